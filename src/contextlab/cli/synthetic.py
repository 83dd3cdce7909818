"""``contextlab data synthetic parity``: write the position-weighted multitask sparse parity data.

The data is a byte-tokenizer token store (see ``contextlab.data.synthetic`` for the layout
and the exact Bayes risk); the command prints the Bayes risk at a few visible context
lengths and stores it for every length in ``STORE/meta.json`` and ``STORE/parity.json``.
"""

from __future__ import annotations

import argparse

from contextlab.config import add_dataclass_args, apply_overrides, dataclass_from_args, read_toml

KINDS = ("parity",)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextlab data synthetic",
        description="Write synthetic data with a known Bayes risk as a token store. KIND parity: "
        "position-weighted multitask sparse parity (intrinsic-entropy seed §4.2): L context bits, "
        "T tasks each the XOR of two bits, the farther bit spread over min_far_bit..L, task "
        "frequency ∝ far_bit^-decay. Each "
        "document is [bit_L .. bit_1, TASK, answer]; train on it with objective last_token, "
        "data.mode long_docs and train.context 0 (one sample per row: the context is taken from the "
        "data); with --set queries=K: [bits, K tasks, K answers], objective queries. Same seeds, same "
        "bytes.",
    )
    p.add_argument("kind", choices=KINDS, help="the synthetic task: parity")
    p.add_argument("--out", required=True, help="the token store directory to create")
    p.add_argument("--config", help="a TOML file with the options below (flags override it)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an option, e.g. --set n_bits=40 (repeatable)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    from contextlab.data.synthetic import ParityConfig

    add_dataclass_args(p.add_argument_group("parity options"), ParityConfig)
    return p


def cmd_synthetic(argv: list[str]) -> int:
    """Write synthetic data with an exact Bayes risk (parity: multitask sparse parity) as a token store."""
    from contextlab.data import synthetic as syn
    from contextlab.data.store import TokenStore

    args = _parser().parse_args(argv)
    base = apply_overrides(read_toml(args.config) if args.config else {}, args.set)
    cfg = dataclass_from_args(syn.ParityConfig, args, base)
    out = syn.write_parity_store(cfg, args.out, overwrite=args.overwrite, progress=not args.no_progress)
    store = TokenStore(out)
    tasks = syn.make_tasks(cfg)
    asked = "task + answer" if cfg.queries == 1 else f"{cfg.queries} tasks ({cfg.query_tasks}) + answers"
    print(
        f"wrote {out}: {store.n_docs:,} samples of {cfg.n_bits} bits + {asked} ({store.n_tokens:,} tokens), "
        f"{cfg.n_tasks} tasks, {100 * cfg.mask_fraction:.0f}% masked, "
        f"{100 * cfg.bias_fraction:.0f}% biased bits"
    )
    shown = sorted({c for c in (0, 10, 15, 20, 25, 30, 40, 50, 60, 80, 100, cfg.n_bits) if c <= cfg.n_bits})
    of = " of single-task rows of unbiased bits" if cfg.queries > 1 or cfg.bias_fraction > 0 else ""
    print(
        f"exact Bayes risk (nats){of} by visible bits: "
        + ", ".join(f"{c}: {syn.bayes_risk(tasks, c):.4f}" for c in shown)
    )
    return 0
