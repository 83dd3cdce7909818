"""``contextlab analyze entropy``: intrinsic entropy / dimension of hidden states vs context length.

Runs ``contextlab.eval.entropy`` on a contextlab run or a Hugging Face folder and writes
``OUT/entropy.json`` (self-describing result: options, model, data hash, code version),
``OUT/entropy.relative_eigenvalues.npy`` (the spectra) and ``OUT/entropy.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from contextlab.config import add_dataclass_args, dataclass_from_args


def _parser() -> argparse.ArgumentParser:
    from contextlab.eval.entropy import Options

    p = argparse.ArgumentParser(
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
        required=True,
        metavar="STORE",
        help="a token store made with the model's tokenizer (long documents), or a parity store",
    )
    p.add_argument("--out", help="output folder (default: MODEL/eval)")
    p.add_argument("--step", type=int, help="checkpoint step of a run (default: the newest)")
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
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_dataclass_args(p.add_argument_group("entropy options"), Options)
    return p


def _table(results: dict) -> str:
    per = results["contexts"]
    parity = "bayes_risk" in per[0]
    weighted = parity and "ce_task_weighted" in per[0]
    head = f"{'l':>5} {'CE':>8}" + (f" {'Bayes':>8} {'|diff|':>8} {'excess':>8} {'±se':>7}" if parity else "")
    head += f" {'CE/task':>8} {'|diff|':>8}" if weighted else ""
    ents = list(per[0]["entropy"])
    head += "".join(f" {'S@' + k:>9}" for k in ents) + f" {'dim@0.01':>8}" * ("0.01" in per[0]["dimension"])
    lines = [head]
    for r in per:
        line = f"{r['context']:>5} {r['ce']:>8.4f}"
        if parity:
            line += f" {r['bayes_risk']:>8.4f} {r['abs_diff']:>8.4f} {r['excess']:>8.4f}"
            line += f" {r['excess_stderr']:>7.4f}"
        if weighted:
            line += f" {r['ce_task_weighted']:>8.4f} {r['abs_diff_task_weighted']:>8.4f}"
        line += "".join(f" {r['entropy'][k]:>9.2f}" for k in ents)
        if "0.01" in r["dimension"]:
            line += f" {r['dimension']['0.01']:>8d}"
        lines.append(line)
    fits = results["fits_vs_ce"]
    lines.append("Pearson r vs CE: " + ", ".join(f"{k} {v['r']:+.3f}" for k, v in fits.items()))
    return "\n".join(lines)


def cmd_entropy(argv: list[str]) -> int:
    """Intrinsic entropy and dimension of hidden states vs context length, correlated with the loss."""
    from contextlab.eval import load_model
    from contextlab.eval.entropy import Options, run
    from contextlab.eval.results import write_result
    from contextlab.rundir import eval_dir

    args = _parser().parse_args(argv)
    options = dataclass_from_args(Options, args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    adapter = load_model(
        args.model, dtype=args.dtype, batch_size=args.batch_size, device=args.device, step=args.step
    )
    adapter.require_lm("analyze entropy")
    out_dir = Path(args.out) if args.out else eval_dir(args.model)
    t0 = time.perf_counter()
    out = run(adapter, options, args.data, progress=not args.no_progress)
    model = {**vars(adapter.info), "dtype": adapter.dtype, "batch_size": adapter.batch_size}
    path = write_result(
        out_dir,
        "entropy",
        results=out.results,
        options=options,
        model=model,
        data=out.data,
        seconds=time.perf_counter() - t0,
        arrays=out.arrays,
    )
    out.plot(out_dir / "entropy.png")
    print(_table(out.results))
    print(f"wrote {path}, {out_dir / 'entropy.png'} ({time.perf_counter() - t0:.0f} s)")
    return 0
