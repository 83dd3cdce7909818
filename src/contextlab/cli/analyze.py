"""``contextlab analyze entropy`` and ``analyze attention``: hidden-state entropy, where attention goes.

Runs ``contextlab.analysis.entropy`` on a contextlab run or a Hugging Face folder and writes
``OUT/entropy.json`` (self-describing result: options, model, data hash, code version),
``OUT/entropy.relative_eigenvalues.npy`` (the spectra) and ``OUT/entropy.png``. ``analyze
attention`` runs ``contextlab.analysis.attention`` on one model or two (A against B on the same rows)
and writes ``OUT/attention.json``, its per-row ``.npy`` arrays and three PNGs
(``analysis/attention_plots.py``). Trade-off: both commands live here because each is one parser and
one function over an eval module; the work is in ``eval``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from contextlab.cli.runtime import DEVICE_HELP, check_compute, quiet_transformers, refuse_data_as_model
from contextlab.config import add_dataclass_args, dataclass_from_args
from contextlab.errors import UserError
from contextlab.rundir import STEP_HELP, parse_step


def _refuse_out(out: str | None, model: str) -> None:
    """One line, before any model loads, for an --out that is a file or lies in a run's checkpoints,
    and for an output folder (--out, or the default beside the model) that cannot be written."""
    from contextlab.outputs import refuse_results_out, refuse_unwritable
    from contextlab.rundir import eval_dir

    if out:
        refuse_results_out(out)
    refuse_unwritable(out or eval_dir(model), given=bool(out))


OVERWRITE_HELP = (
    "replace a result in the output folder made with another model, data or options (without it that is "
    "refused; the same settings again replace it, as a reproduction)"
)


def _check_rerun(path: Path, options, data, overwrite: bool, models: dict | None = None) -> None:
    """``eval``'s rule for an analysis result (``results.check_rerun``): a file there that is not a
    result is refused; one of other options or data unless ``overwrite`` (before any model loads);
    with ``models`` ("a"/"b" -> the path each opened model records, None for none: after they load),
    one of other models unless ``overwrite``."""
    import json

    from contextlab.eval.results import check_rerun

    if models is None:
        check_rerun(path, options=options, model={}, data=data, overwrite=overwrite)
        return
    if overwrite or not path.is_file():
        return
    doc = json.loads(path.read_text(encoding="utf-8"))
    recorded = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    if "a" not in recorded:  # an entropy result: one model, recorded as eval records it
        recorded = {"a": recorded}
    change = []
    for k, now in models.items():
        was = (recorded.get(k) or {}).get("path") if isinstance(recorded.get(k), dict) else None
        if was != now:
            change.append(f"{'--model' if k == 'a' else '--compare'} {was} -> {now}")
    if change:
        raise UserError(
            f"{path} holds a result of other models ({'; '.join(change)}); pass --overwrite to replace "
            "it, or give another --out to keep both (nothing was run)"
        )


def _parser() -> argparse.ArgumentParser:
    from contextlab.analysis.entropy import Options

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab analyze entropy",
        description="For each visible context length l: hidden states of N samples, PCA spectrum "
        "relative to the largest eigenvalue, intrinsic entropy (sum of log relative eigenvalues over "
        "the first n components), intrinsic dimension (eigenvalues above thresholds), Gaussian-KDE entropy, "
        "TwoNN/MLE/lPCA (scikit-dimension), and the next-token cross-entropy at l; every measure is "
        "fitted linearly against the cross-entropy (Pearson r). On a synthetic parity store the loss is "
        "the answer's and the exact Bayes risk is reported beside it.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="a contextlab run or checkpoint directory, or a local Hugging Face model folder",
    )
    p.add_argument(
        "--data",
        metavar="STORE",
        help="required: a token store made with the model's tokenizer (long documents), or a parity "
        "store; with --split run, default: the run's own store",
    )
    p.add_argument(
        "--out",
        help="output folder (default: RUN/eval for a run or any of its checkpoints, FOLDER/eval for a "
        "model folder)",
    )
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.add_argument("--step", type=parse_step, help=STEP_HELP)
    p.add_argument(
        "--dtype", default="fp32", choices=["fp32", "bf16"], help="compute precision (default: fp32)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="sequences per forward pass at the model's full "
        "context; shorter contexts use proportionally more (default: 64)",
    )
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0 = torch's own)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (shown on stderr)")
    add_dataclass_args(p.add_argument_group("entropy options"), Options)
    return p


def _table(results: dict) -> str:
    from contextlab.analysis.intrinsic import SKDIM_ESTIMATORS

    per = results["contexts"]
    parity = "bayes_risk" in per[0]
    weighted = parity and "ce_task_weighted" in per[0]
    head = f"{'l':>5} {'CE':>8}" + (f" {'Bayes':>8} {'|diff|':>8} {'excess':>8} {'±se':>7}" if parity else "")
    head += f" {'CE/task':>8} {'|diff|':>8}" if weighted else ""
    ents = list(per[0]["entropy"])
    head += "".join(f" {'S@' + k:>9}" for k in ents) + f" {'dim@0.01':>8}" * ("0.01" in per[0]["dimension"])
    estimators = [k for k in SKDIM_ESTIMATORS if k in per[0]]  # the intrinsic-dimension estimates asked for
    head += "".join(f" {k:>7}" for k in estimators)
    lines = [head]
    for r in per:
        line = f"{r['context']:>5} {r['ce']:>8.4f}"
        if parity:
            line += f" {r['bayes_risk']:>8.4f} {r['abs_diff']:>8.4f} {r['excess']:>8.4f}"
            line += f" {r['excess_stderr']:>7.4f}"
        if weighted:
            line += f" {r['ce_task_weighted']:>8.4f} {r['abs_diff_task_weighted']:>8.4f}"
        line += "".join(
            f" {r['entropy'][k]:>9.2f}" if r["entropy"][k] is not None else f" {'-':>9}" for k in ents
        )
        if "0.01" in r["dimension"]:
            line += f" {r['dimension']['0.01']:>8d}"
        line += "".join(f" {r[k]:>7.2f}" if r[k] is not None else f" {'-':>7}" for k in estimators)
        lines.append(line)
    fits = results["fits_vs_ce"]
    r = lambda v: ("constant" if v.get("constant") else "null") if v["r"] is None else format(v["r"], "+.3f")
    p = lambda v: f" (p {v['p_value']:.2g})" if isinstance(v.get("p_value"), float) else ""
    two = lambda v: " (2 values: one step)" if v.get("two_values") else ""
    shown = (f"{k} {r(v)}{p(v)}{two(v)}" for k, v in fits.items())
    n = len(results.get("contexts") or [])
    ranked = results.get("summary", {}).get("measures_compared", len(fits))
    lines.append(
        f"Pearson r vs CE over {n} contexts (p: two-sided, each alone; the best of the {ranked} measures "
        "ranked is the smallest of many): " + ", ".join(shown)
    )
    lines += results.get("text", [])
    return "\n".join(lines)


def cmd_entropy(argv: list[str]) -> int:
    """Intrinsic entropy and dimension of hidden states vs context length, correlated with the loss."""
    from contextlab.analysis.entropy import Options, run
    from contextlab.eval import load_model, progress
    from contextlab.eval.results import model_record, run_and_record
    from contextlab.rundir import eval_dir

    parser = _parser()
    args = parser.parse_args(argv)
    options = dataclass_from_args(Options, args)
    if args.data is None and options.split == "run":
        from contextlab.eval.heldout import default_store

        args.data = default_store(options.heldout_of or args.model)  # the run's own store
    if args.data is None:
        parser.error(
            "--data STORE is required (a token store made with the model's tokenizer), or --split run "
            "for what a contextlab run held out of its own store"
        )
    check_compute(args)
    refuse_data_as_model([args.model])
    refuse_data_as_model([getattr(args, "compare", None)], "--compare")
    progress.set_enabled(not args.no_progress)
    quiet_transformers([args.model], args.no_progress)
    _refuse_out(args.out, args.model)
    out_dir = Path(args.out) if args.out else eval_dir(args.model)
    _check_rerun(out_dir / "entropy.json", options, args.data, args.overwrite)
    adapter = load_model(
        args.model, dtype=args.dtype, batch_size=args.batch_size, device=args.device, step=args.step
    )
    adapter.require_lm("analyze entropy")
    models = {"a": model_record(adapter).get("path")}
    _check_rerun(out_dir / "entropy.json", options, args.data, args.overwrite, models)
    path, out, seconds = run_and_record(
        out_dir,
        "entropy",
        lambda: run(adapter, options, args.data, progress=not args.no_progress),
        options=options,
        model=model_record(adapter),
    )
    from contextlab.eval.results import note_written

    note_written(out_dir, "entropy", out.plot(out_dir / "entropy.png"))
    print(_table(out.results))
    print(f"wrote {path}, {out_dir / 'entropy.png'} (the analysis {seconds:.1f} s)")
    return 0


def _attention_parser() -> argparse.ArgumentParser:
    from contextlab.analysis.attention import Options

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab analyze attention",
        description="Where attention goes: attention received per source token (the sum over queries of "
        "the weights it gets, heads and layers averaged), mass by distance in buckets [0], [1], [2,3], "
        "[4,7], ... per layer, the entropy of the weights; with --compare, model A against model B on "
        "the same tokens: percent change per token and per chunk (the ContextLM paper's Figure 6) and "
        "the differences with 95% intervals over documents. The weights are recomputed in fp32 from each "
        "attention module's q and k (checked against the model's own attention output); a Hugging Face "
        "model's are transformers' own, read under its eager attention (checked against the attention it "
        "runs by default, which is put back after); the model itself is unchanged. Writes "
        "OUT/attention.json, .npy arrays and three PNGs.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="model A: a contextlab run, checkpoint or export, or a Hugging Face causal LM folder",
    )
    p.add_argument(
        "--compare",
        metavar="PATH",
        help="model B, the reference of the percent changes (same tokenizer; default: none, model A alone)",
    )
    p.add_argument(
        "--data", metavar="STORE", help="a token store made with the models' tokenizer (held-out rows)"
    )
    p.add_argument("--text", help="analyse this text instead of --data (one row, cut to --length tokens)")
    p.add_argument(
        "--out",
        help="output folder (default: RUN/eval for a run or any of its checkpoints, FOLDER/eval for a "
        "model folder)",
    )
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.add_argument("--step", type=parse_step, help="model A's " + STEP_HELP)
    p.add_argument("--compare-step", type=parse_step, help="model B's " + STEP_HELP)
    p.add_argument("--batch-size", type=int, default=8, help="rows per forward pass (default: 8)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0 = torch's own)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (shown on stderr)")
    add_dataclass_args(p.add_argument_group("attention options"), Options)
    return p


def _attention_table(results: dict) -> str:
    s = results["summary"]
    lines = [
        f"{'model':<6} {'mean dist':>9} {'d=0':>6} {'d=1':>6} {'d>=16':>6} {'entropy':>7} {'first tok':>9}"
    ]
    for k in ("a", "b"):
        if k in s:
            r = s[k]
            lines.append(
                f"{k.upper():<6} {r['mean_distance']:>9.2f} {r['mass_at_distance_0']:>6.3f} "
                f"{r['mass_at_distance_1']:>6.3f} {r['mass_beyond_16']:>6.3f} {r['entropy']:>7.3f} "
                f"{r['received_first_token_share']:>9.3f}"
            )
    if "a_vs_b" in s:
        c = s["a_vs_b"]
        ci = c["mean_distance_diff_interval95"]
        lines.append(
            f"A vs B: attention received {c['percent_rest']:+.1f}% beyond the first token, "
            f"{c['percent_first_token']:+.1f}% on it; mean distance {c['mean_distance_diff']:+.2f}"
            + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
            + f"; median |change| per token {c['token_abs_percent_median']:.1f}%"
        )
    return "\n".join(lines)


def cmd_attention(argv: list[str]) -> int:
    """Where attention goes: received per token, mass by distance per layer, two models compared."""
    from contextlab.analysis.attention import Options, run
    from contextlab.analysis.attention_plots import plot_all
    from contextlab.eval import load_model, progress
    from contextlab.eval.results import run_and_record
    from contextlab.rundir import eval_dir

    args = _attention_parser().parse_args(argv)
    options = dataclass_from_args(Options, args)
    if options.split == "run" and args.data is None and args.text is None:
        from contextlab.eval.heldout import default_store

        args.data = default_store(options.heldout_of or args.model)  # the run's own store
    check_compute(args)
    refuse_data_as_model([args.model])
    refuse_data_as_model([getattr(args, "compare", None)], "--compare")
    progress.set_enabled(not args.no_progress)
    quiet_transformers([args.model, args.compare], args.no_progress)
    common = dict(dtype="fp32", batch_size=args.batch_size, device=args.device)
    _refuse_out(args.out, args.model)
    out_dir = Path(args.out) if args.out else eval_dir(args.model)
    if (args.data is None) == (args.text is None):  # before the result folder is judged
        raise UserError("give the rows to analyse: --data STORE or --text TEXT (one of them)")
    _check_rerun(out_dir / "attention.json", options, args.data or args.text, args.overwrite)
    a = load_model(args.model, step=args.step, **common)
    b = load_model(args.compare, step=args.compare_step, **common) if args.compare else None
    models = {"a": a.info.path, "b": b.info.path if b else None}
    _check_rerun(out_dir / "attention.json", options, args.data or args.text, args.overwrite, models)
    path, out, seconds = run_and_record(
        out_dir,
        "attention",
        lambda: run(a, options, args.data, args.text, compare=b, progress=not args.no_progress),
        options=options,
        model={k: {**vars(m.info), "batch_size": m.batch_size} for k, m in (("a", a), ("b", b)) if m},
    )
    pngs = plot_all(out.results, out_dir, options.per_layer)
    print(_attention_table(out.results))
    print(f"wrote {path}, {', '.join(p.name for p in pngs)} (the analysis {seconds:.1f} s)")
    return 0
