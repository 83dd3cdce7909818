"""``contextlab optimal-context``: optimal context length vs training-set size on sparse parity (MLP).

A thin wrapper of ``contextlab.sweep.optimal_context``: read the options (a TOML file such
as ``recipes/optimal_context_mlp.toml``, ``--set KEY=VALUE`` and one flag per option), run
every (data size, visible context) cell that is not finished yet, draw
``OUT/optimal_context.png`` and print the loss table and the optimal context per data size.
"""

from __future__ import annotations

import argparse
import time

from contextlab.config import add_dataclass_args, apply_overrides, dataclass_from_args, read_toml


def _parser() -> argparse.ArgumentParser:
    from contextlab.sweep.optimal_context import OptimalContextConfig

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab optimal-context",
        description="Optimal context length vs training-set size (intrinsic-entropy seed, Appendix F): for "
        "every training-set size D and visible context l, train a fresh MLP on D samples of "
        "position-weighted multitask sparse parity that sees the task and the l nearest bits, with early "
        "stopping on a fixed validation set; the optimal l of each D is the one with the lowest best "
        "validation loss, next to the exact Bayes risk of every l. Each cell is a resumable step: run the "
        "same command again to finish an interrupted sweep; finished cells are skipped. Writes "
        "OUT/results.json, OUT/cells/D_l.json and OUT/optimal_context.png.",
    )
    p.add_argument(
        "config", nargs="?", help="a TOML file of the options below (e.g. recipes/optimal_context_mlp.toml)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an option, e.g. --set patience=5 (repeatable)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_dataclass_args(
        p.add_argument_group("options (flags override the file and --set)"), OptimalContextConfig
    )
    return p


def format_table(res: dict) -> str:
    """Best validation CE per (D, l), the Bayes risk, the optimum per D and the feature fits."""
    cfg, cells = res["config"], res["cells"]
    lines = [
        "best validation CE (nats); rows = training samples D, columns = visible bits l",
        f"{'D':>8} " + " ".join(f"{l:>7}" for l in cfg["contexts"]) + "   optimal l",
        f"{'Bayes':>8} " + " ".join(f"{res['bayes_risk'][str(l)]:>7.4f}" for l in cfg["contexts"]),
    ]
    if "bayes_on_validation" in res:
        on_val = res["bayes_on_validation"]
        lines.append(f"{'Bayes/val':>8} " + " ".join(f"{on_val[str(l)]:>7.4f}" for l in cfg["contexts"]))
    for D in cfg["data_sizes"]:
        shown = lambda v: f"{'-':>7}" if v is None else f"{v:>7.4f}"
        row = " ".join(  # a cell a stopped study has not run yet: '.'
            shown(cells[f"{D}/{l}"]["best_val_loss"]) if f"{D}/{l}" in cells else f"{'.':>7}"
            for l in cfg["contexts"]
        )
        opt_ = res["optimal_context"].get(str(D))
        if opt_ is None:
            said = "(none: no cell has a loss)"
        else:
            from contextlab.sweep.optimal_context import optimum_words

            said = optimum_words(opt_)
        lines.append(f"{D:>8} {row}   {said}")
    if any(o.get("within_noise") for o in res["optimal_context"].values()):
        lines.append(
            "within noise: contexts whose best CE is within 1.96 standard errors of the optimum's (errors "
            "over the validation samples, taken as independent: wider than paired)"
        )
    for D, fits in res["feature_fits"].items():
        lines.append(
            f"D={D}: Pearson r of best val CE vs the last hidden layer's measures across contexts "
            f"({len(cfg['contexts'])} points; p two-sided): "
            + ", ".join(f"{k} {_r(v)}" for k, v in fits.items())
        )
    lines += res.get("text", [])
    if res.get("complete") is False:  # a stopped study's file: the optimum of a row may still move
        lines.append(f"partial: {res['cells_done']} cells; run the same command again to finish the others")
    return "\n".join(lines)


def _r(fit: dict) -> str:
    if fit["r"] is None or fit["r"] != fit["r"]:
        return "null"
    p = fit.get("p_value")
    return f"{fit['r']:+.3f}" + (f" (p {p:.2g})" if p is not None else "")


def cmd_optimal_context(argv: list[str]) -> int:
    """Optimal context vs training-set size on sparse parity: one MLP per (D, l) cell, resumable."""
    from contextlab.sweep.optimal_context import (
        OptimalContextConfig,
        optimal_context_png,
        run_optimal_context,
    )

    args = _parser().parse_args(argv)
    base = apply_overrides(read_toml(args.config) if args.config else {}, args.set)
    cfg = dataclass_from_args(OptimalContextConfig, args, base)
    t0 = time.perf_counter()
    res = run_optimal_context(cfg, progress=not args.no_progress)
    png = optimal_context_png(res, f"{cfg.out_dir}/optimal_context.png")
    print(format_table(res))
    print(f"wrote {cfg.out_dir}/results.json and {png} ({time.perf_counter() - t0:.0f} s this invocation)")
    return 0
