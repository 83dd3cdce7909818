"""``contextlab data pack`` and ``contextlab data pack-stats``."""

from __future__ import annotations

import argparse
import dataclasses
import json

from contextlab.cli.data import add_ray_args, ray_executor
from contextlab.config import add_dataclass_args, apply_overrides, from_dict, read_toml
from contextlab.errors import UserError


def cmd_pack(argv: list[str]) -> int:
    """Pack a token store into training sequences with one of the packing methods."""
    from contextlab.data.packing import pack

    args = _pack_parser().parse_args(argv)
    config = _pack_config(args)
    only = _only_shards(args.only_shards)
    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    if args.ray is not None and args.workers != 1:
        raise UserError("--workers is for local processes; with --ray the cluster runs the shards: drop one")
    _refuse_too_short(args.store, config.context)
    report = pack(
        args.store,
        args.out,
        config,
        overwrite=args.overwrite,
        workers=args.workers,
        only_shards=only,
        progress=not args.no_progress,
        executor=ray_executor(args),
        verify=not args.no_verify,
    )
    print(_pack_summary(report, config, args))
    return 0


def _pack_parser() -> argparse.ArgumentParser:
    from contextlab.data.packing import PACKERS, PackConfig

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab data pack",
        description="Write a packed store (document order + sequence boundaries, no token copies) from "
        f"STORE with one of the methods {', '.join(PACKERS)} (see --method). Deterministic from --seed; "
        "sharded (--shards, --workers); resumes where it stopped if killed (run the same command again).",
    )
    p.add_argument("store", help="a token store directory (from `contextlab data ingest`)")
    p.add_argument("--out", required=True, help="the packed store directory to create")
    p.add_argument(
        "--config",
        help="a TOML file with packing options (flags and --set override it; default: none)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set noise=0.5 (repeatable)",
    )
    p.add_argument("--workers", type=int, default=1, help="processes packing shards in parallel [default: 1]")
    p.add_argument(
        "--only-shards",
        metavar="I,J,...",
        help="pack only these shard indices and stop before assembling (for many machines sharing "
        "a filesystem); a final run without it assembles the packed store. Indices count from 0, as "
        "the files OUT.partial/shards/shard_NNNNN.npz; messages count shards from 1 (index 0 is "
        "'shard 1/N') (default: every shard, then assemble)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing packed store or unfinished pack at --out",
    )
    p.add_argument("--no-progress", action="store_true", help="print nothing while packing")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the check that STORE still matches its content hash (one read of the store, "
        "remembered while its files are unchanged)",
    )
    add_ray_args(p)
    add_dataclass_args(p, PackConfig)
    p.add_argument("--seq-len", dest="retired_seq_len", help=argparse.SUPPRESS)
    return p


def _pack_config(args: argparse.Namespace):
    """The PackConfig of a TOML file, then --set overrides, then the flags given."""
    from contextlab.data.packing import PackConfig

    data = apply_overrides(read_toml(args.config) if args.config else {}, args.set)
    old = args.retired_seq_len if args.retired_seq_len is not None else data.get("seq_len")
    if old is not None:
        raise UserError(
            f"seq_len (tokens per sequence) is replaced by context, the training context: use --context "
            f"{_minus_one(old)} for the same sequences of {old} tokens (a sequence holds context + 1), or "
            f"--context {old} to train at context {old}"
        )
    for f in dataclasses.fields(PackConfig):
        if getattr(args, f.name, None) is not None:
            data[f.name] = getattr(args, f.name)
    config = from_dict(PackConfig, data)
    _refuse_ignored(config)
    return config


def _refuse_ignored(config) -> None:
    """An option the method would ignore is a mistake (``--method ep --k 5``): one line, not silence."""
    ignored = config.ignored_options()
    if not ignored:
        return
    given = ", ".join(f"--{name.replace('_', '-')} {getattr(config, name)}" for name in ignored)
    by = f"--method {config.method}"
    if config.uses_retriever:
        by += f" with --retriever {config.retriever}"
    them = "it" if len(ignored) == 1 else "them"
    raise UserError(
        f"{by} does not use {given}; leave {them} out, or pick a method or retriever that uses {them} "
        "(see contextlab data pack --help)"
    )


def _refuse_too_short(store: str, context: int) -> None:
    """One line, before anything is written, for a store with fewer tokens than one sequence of
    context + 1: its pack would hold no full sequence, and training reads full ones only (it was
    written, with a note, exit 0)."""
    import json
    from pathlib import Path

    try:
        n = int(json.loads((Path(store) / "meta.json").read_text(encoding="utf-8"))["n_tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # no store or an odd one: pack's own message names it
    if n < context + 1:
        raise UserError(
            f"{store} holds {n:,} tokens, fewer than one sequence of --context {context:,} + 1: the pack "
            f"would hold no full sequence, and training reads full ones only; give --context "
            f"{max(1, n - 1):,} or less, or a store of more text (nothing was written)"
        )


def _minus_one(value) -> str:
    try:
        return str(int(value) - 1)
    except (TypeError, ValueError):
        return "L"


def _only_shards(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--only-shards expects comma-separated integers, got {text!r}") from None


def _pack_summary(report, config, args: argparse.Namespace) -> str:
    from contextlab.io import partial_dir

    if report.packed is None:
        return (
            f"packed shard index(es) {args.only_shards} into {partial_dir(args.out)} "
            f"({report.shards_packed} new, {report.shards_resumed} already there); "
            "run without --only-shards to assemble"
        )
    from contextlab.data.packing.stats import (
        arrangement,
        few_to_arrange,
        near_duplicates,
        near_duplicates_line,
    )

    pk = report.packed
    if report.up_to_date:
        n = pk.n_sequences
        return f"{pk.path} is up to date ({n:,} sequence{'s' * (n != 1)}); nothing to do"
    m = pk.meta
    note = few_to_arrange(arrangement(pk))
    if not m["n_full_sequences"]:  # training reads full sequences only
        row = config.context + 1
        why = (
            f"the packed documents hold {m['n_tokens']:,} tokens, fewer than one sequence of context + 1 = "
            f"{row:,}"
            if m["n_tokens"] < row
            else f"each of the {len(m['shards'])} shards holds less than one sequence of {row:,} tokens"
        )
        note = (
            f"note: no sequence is full: {why}, and training reads full sequences only; lower --context"
            + (" or --shards" if m["n_tokens"] >= row else " or pack more text")
        )
    dups = near_duplicates_line(near_duplicates(pk))
    left = f"; left out: {dups}" if dups else ""
    held = m.get("heldout") or {}
    docs = f"{m['store']['n_docs']:,} document{'s' * (m['store']['n_docs'] != 1)}"
    if held:
        n = held["documents"]
        docs = (
            f"{m['store']['n_docs'] - n:,} of {docs} ({n:,} held out for validation, {held['tokens']:,} "
            f"tokens: val_fraction {held['val_fraction']:g})"
        )
    return (
        f"wrote {pk.path}: {config.method}, {pk.n_sequences:,} sequences for context {config.context:,} "
        f"({m['n_full_sequences']:,} full), {pk.n_entries:,} entries from {docs}{left} "
        f"in {report.seconds:,.1f} s ({_rate(report)}); "
        f"largest shard index {m['index_bytes_max'] / 2**20:,.1f} MiB" + (f"\n{note}" if note else "")
    )


def _rate(report) -> str:
    """Documents per second over the documents this run packed (a resumed run packed fewer)."""
    rate = f"{report.docs_packed / max(report.seconds, 1e-9):,.0f} docs/s"
    if not report.shards_resumed:
        return rate
    if not report.docs_packed:
        return "0 documents packed now: every shard was already packed"
    return f"{report.docs_packed:,} documents packed now, {rate}; {report.shards_resumed} shard(s) resumed"


def cmd_pack_stats(argv: list[str]) -> int:
    """Documents per sequence, neighbour similarity, domains spanned and Zipf burstiness of a packed store."""
    from contextlab.data.packing import PackedStore, pack_stats
    from contextlab.data.packing.stats import format_pack_stats, plot_pack_stats, stats_record
    from contextlab.data.store import TokenStore
    from contextlab.figures import default_plot_path
    from contextlab.io import atomic_write_json
    from contextlab.outputs import refuse_plot_target

    args = _pack_stats_parser().parse_args(argv)
    if args.max_sequences < 0 or args.mle_sequences < 0:
        raise UserError(
            f"--max-sequences and --mle-sequences must be >= 0, got {args.max_sequences} and "
            f"{args.mle_sequences}"
        )
    packed = PackedStore(args.packed, store=TokenStore(args.store) if args.store else None)
    target = args.plot or default_plot_path(args.packed, "pack_stats.png")
    if not args.no_plot:  # before the fits: a --plot naming the pack's entries.npy replaced it
        refuse_plot_target(target, "--plot" if args.plot else "the default --plot")
    stats = pack_stats(
        packed,
        max_sequences=args.max_sequences,
        mle_sequences=args.mle_sequences,
        seed=args.seed,
        progress=not args.no_progress,
        verify=not args.no_verify,
    )
    saved = default_plot_path(args.packed, "pack_stats.json")  # what `contextlab report` shows of it
    atomic_write_json(saved, stats_record(stats))
    if args.json:
        print(json.dumps({k: v for k, v in stats.items() if not isinstance(v, list)}, indent=2))
    else:
        print(format_pack_stats(stats))
        print(f"saved          {saved}")
    if not args.no_plot:
        out = plot_pack_stats(stats, target)
        if not args.json:
            print(f"plot           {out}")
    return 0


def _pack_stats_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab data pack-stats",
        description="Diagnostics of a packed store: documents per sequence, mean retrieval similarity of "
        "neighbours, fraction of sequences with >= 2 related documents, domains/directories spanned "
        "per sequence, and the Zipf coefficient of token frequencies (seed Table 9; lower = burstier), "
        "with a plot; the figures are saved as PACKED/pack_stats.json, which `contextlab report` shows.",
    )
    p.add_argument("packed", help="a packed store directory (from `contextlab data pack`)")
    p.add_argument(
        "--store",
        help="the token store PACKED was packed from, when it moved from the path PACKED records (it "
        "must hold the same content: checked by its content hash; default: the path PACKED records)",
    )
    p.add_argument(
        "--max-sequences",
        type=int,
        default=2000,
        help="full sequences sampled (seeded) for the Zipf coefficient; 0 = all [default: 2000]",
    )
    p.add_argument(
        "--mle-sequences",
        type=int,
        default=200,
        help="of those, how many also get the power-law MLE (seeded; 0 = all of them): it costs ~44 ms a "
        "sequence, the least-squares slope well under 1 [default: 200]",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of that sample [default: 0]")
    p.add_argument(
        "--plot",
        help="where to write the PNG (default: PACKED/pack_stats.png, or ./PACKEDNAME_pack_stats.png "
        "when PACKED is read-only)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar over the Zipf fits (it shows on a terminal only)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the check that the token store behind PACKED still matches its content hash (one "
        "read of the store, remembered while its files are unchanged)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary as JSON: every number the text shows (without the per-sequence lists)",
    )
    return p
