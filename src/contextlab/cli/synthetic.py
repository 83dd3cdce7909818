"""``contextlab data synthetic KIND``: write synthetic data with a known answer as a token store.

KIND ``parity``: position-weighted multitask sparse parity (see ``contextlab.data.synthetic``
for the layout and the exact Bayes risk); the command prints the Bayes risk at a few visible
context lengths and stores it for every length in ``STORE/meta.json`` and ``STORE/parity.json``.
KIND ``mqar``: multi-query associative recall (``contextlab.data.mqar``); the id layout and
the rule that finds the answers are in ``STORE/meta.json`` and ``STORE/mqar.json``.

Trade-off: each kind has its own parser (the kind is read first), so ``--help`` after a kind
lists exactly that kind's options and two kinds may share an option name (``--queries``).
"""

from __future__ import annotations

import argparse

from contextlab.config import add_dataclass_args, apply_overrides, dataclass_from_args, read_toml

KINDS = ("parity", "mqar")

PARITY_HELP = (
    "KIND parity: "
    "position-weighted multitask sparse parity (intrinsic-entropy seed §4.2): L context bits, "
    "T tasks each the XOR of two bits, the farther bit spread over min_far_bit..L, task "
    "frequency ∝ far_bit^-decay. Each "
    "document is [bit_L .. bit_1, TASK, answer]; train on it with objective last_token, "
    "data.mode long_docs and train.context 0 (one sample per row: the context is taken from the "
    "data); with --set queries=K: [bits, K tasks, K answers], objective queries. Same seeds, same "
    "bytes."
)
MQAR_HELP = (
    "KIND mqar: multi-query associative recall (Zoology): each document is [k_1 v_1 .. k_N v_N, "
    "q_1 a_1 .. q_Q a_Q], the queries being keys of the pairs in a random order, each followed by its "
    "value; keys and values are disjoint id ranges of a word-level vocabulary of K + V + 2 ids saved "
    "with the store. Train on it with objective recall (objective.options.key_ids = [0, K]: loss on "
    "the answers only), data.mode long_docs and train.context 0; evaluate with `contextlab eval mqar "
    "--data STORE`. Same seed, same bytes."
)


def _config_class(kind: str):
    from contextlab.data.mqar import MQARConfig
    from contextlab.data.synthetic import ParityConfig

    return {"parity": ParityConfig, "mqar": MQARConfig}[kind]


def _parser(kind: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab data synthetic",
        description="Write synthetic data with a known answer as a token store. "
        + {"parity": PARITY_HELP, "mqar": MQAR_HELP}.get(kind, PARITY_HELP + " " + MQAR_HELP)
        + ("" if kind else " `contextlab data synthetic KIND --help` lists the options of KIND."),
    )
    p.add_argument("kind", choices=KINDS, help="the synthetic task: parity or mqar")
    p.add_argument("--out", required=True, help="the token store directory to create")
    p.add_argument("--config", help="a TOML file with the options below (flags override it; default: none)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an option, e.g. --set n_bits=40 (repeatable)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    if kind:
        add_dataclass_args(p.add_argument_group(f"{kind} options"), _config_class(kind))
    return p


def cmd_synthetic(argv: list[str]) -> int:
    """Write a token store of synthetic data with a known answer: parity or mqar (associative recall).

    parity is multitask sparse parity; mqar is multi-query associative recall."""
    kind = next((a for a in argv if not a.startswith("-")), None)
    args = _parser(kind if kind in KINDS else None).parse_args(argv)
    base = apply_overrides(read_toml(args.config) if args.config else {}, args.set)
    cfg = dataclass_from_args(_config_class(args.kind), args, base)
    if args.kind == "mqar":
        return _mqar(cfg, args)
    return _parity(cfg, args)


def _mqar(cfg, args) -> int:
    from contextlab.data import mqar
    from contextlab.data.store import TokenStore

    out = mqar.write_mqar_store(cfg, args.out, overwrite=args.overwrite, progress=not args.no_progress)
    store = TokenStore(out)
    lay = mqar.layout_of(cfg)
    print(
        f"wrote {out}: {store.n_docs:,} sequences of {cfg.length} tokens ({store.n_tokens:,} tokens): "
        f"{cfg.pairs} pairs, {cfg.n_queries} queries, keys {lay.as_dict()['key_ids']}, values "
        f"{lay.as_dict()['value_ids']}, vocabulary {lay.eot + 1}; train with objective recall, "
        f"objective.options.key_ids = [0, {cfg.keys}], data.mode long_docs, train.context 0"
    )
    return 0


def _parity(cfg, args) -> int:
    from contextlab.data import synthetic as syn
    from contextlab.data.store import TokenStore

    out = syn.write_parity_store(cfg, args.out, overwrite=args.overwrite, progress=not args.no_progress)
    store = TokenStore(out)
    tasks = syn.make_tasks(cfg)
    asked = "task + answer" if cfg.queries == 1 else f"{cfg.queries} tasks ({cfg.query_tasks}) + answers"
    print(
        f"wrote {out}: {store.n_docs:,} samples of {cfg.n_bits} bits + {asked} ({store.n_tokens:,} tokens), "
        f"{cfg.n_tasks} tasks, {100 * cfg.mask_fraction:.0f}% drawn to be masked (to "
        f"{cfg.min_visible}..{cfg.n_bits} visible bits: a few of them show all), "
        f"{100 * cfg.bias_fraction:.0f}% biased bits"
    )
    shown = sorted({c for c in (0, 10, 15, 20, 25, 30, 40, 50, 60, 80, 100, cfg.n_bits) if c <= cfg.n_bits})
    of = " of single-task rows of unbiased bits" if cfg.queries > 1 or cfg.bias_fraction > 0 else ""
    print(
        f"exact Bayes risk (nats){of} by visible bits: "
        + ", ".join(f"{c}: {syn.bayes_risk(tasks, c):.4f}" for c in shown)
    )
    return 0
