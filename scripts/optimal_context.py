"""Recipe (c) of issue 7: optimal context length vs training-set size on sparse parity (MLP).

    .venv/bin/python scripts/optimal_context.py recipes/optimal_context_mlp.toml [--set key=value ...]

Runs ``contextlab.eval.optimal_context.run_sweep`` (resumable: finished cells are kept in
OUT/results.json), then draws OUT/optimal_context.png and prints the loss table and the
optimal context per data size.
"""

from __future__ import annotations

import argparse
import sys
import time

from contextlab.config import load_config
from contextlab.errors import UserError


def main(argv: list[str]) -> int:
    from contextlab.eval.optimal_context import SweepConfig, optimal_context_png, run_sweep

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="a TOML file of SweepConfig keys (recipes/optimal_context_mlp.toml)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (repeatable)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        cfg = load_config(SweepConfig, args.config, args.set)
        t0 = time.perf_counter()
        res = run_sweep(cfg, progress=not args.no_progress)
    except UserError as exc:
        print(f"optimal_context: error: {exc}", file=sys.stderr)
        return 2
    png = optimal_context_png(res, f"{cfg.out_dir}/optimal_context.png")
    cells = res["cells"]
    print("best validation CE (nats); rows = training samples D, columns = visible bits l")
    print(f"{'D':>8} " + " ".join(f"{l:>7}" for l in cfg.contexts) + "   optimal l")
    print(f"{'Bayes':>8} " + " ".join(f"{res['bayes_risk'][str(l)]:>7.4f}" for l in cfg.contexts))
    for D in cfg.data_sizes:
        row = " ".join(f"{cells[f'{D}/{l}']['best_val_loss']:>7.4f}" for l in cfg.contexts)
        print(f"{D:>8} {row}   {res['optimal_context'][str(D)]['context']}")
    for D, fits in res["feature_fits"].items():
        print(
            f"D={D}: Pearson r of best val CE vs the last hidden layer's measures across contexts: "
            + ", ".join(f"{k} {v['r']:+.3f}" for k, v in fits.items())
        )
    print(f"wrote {cfg.out_dir}/results.json and {png} ({time.perf_counter() - t0:.0f} s this invocation)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
