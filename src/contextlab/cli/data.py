"""``contextlab data ...`` commands: ingest, info, verify."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from contextlab.config import add_dataclass_args, apply_overrides, field_help, from_dict, read_toml
from contextlab.errors import UserError


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"contextlab {prog}", description=description, allow_abbrev=False)


def cmd_ingest(argv: list[str]) -> int:
    """Tokenize a corpus (folder, JSONL, Parquet, HF dataset folder) into a token store."""
    from contextlab.data.ingest import ingest, resolve_tokenizer_spec
    from contextlab.data.ingest_parts import in_parts
    from contextlab.data.tokenizer_spec import parse_spec

    args = _ingest_parser().parse_args(argv)
    _set_threads(args)
    config = _ingest_config(args)
    parse_spec(config.tokenizer, check_path=True)  # a bad spec is one line before OUT.partial exists
    resolve_tokenizer_spec(config.tokenizer)  # store:STORE must be a token store
    executor = ray_executor(args)
    report = ingest(
        args.source,
        args.out,
        config,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        store_documents=None if executor is None else in_parts(executor, args.ray_parts),
    )
    _print_ingest_report(report)
    return 0


def _set_threads(args: argparse.Namespace) -> None:
    """``--threads N``: tokenize on N threads (set before any text is tokenized)."""
    from contextlab.data.tokenizer_base import set_tokenizer_threads

    if args.threads < 0:
        raise UserError(f"--threads must be a number of threads (0 = one per core), got {args.threads}")
    if args.threads and args.ray is not None:
        raise UserError(
            "--threads is for an ingest on this machine; with --ray each part is a Ray task on one CPU: "
            "leave --threads out (--ray-cpus sets the CPUs of a local Ray instance)"
        )
    set_tokenizer_threads(args.threads)


def add_ray_args(p: argparse.ArgumentParser, parts: bool = False) -> None:
    """``--ray [ADDRESS]`` and ``--ray-cpus N`` (ingest, pack); ``--ray-parts N`` for ingest."""
    from contextlab.ray_engine import LOCAL, RAY_CPUS_HELP, RAY_HELP

    p.add_argument("--ray", nargs="?", const=LOCAL, metavar="ADDRESS", help=RAY_HELP)
    p.add_argument("--ray-cpus", type=int, default=0, metavar="N", help=RAY_CPUS_HELP)
    if parts:
        p.add_argument(
            "--ray-parts",
            type=int,
            default=32,
            metavar="N",
            help="with --ray: the source's files are cut into N parts of about equal bytes, one Ray task "
            "each (a single file is one part); the store is the same for any N [default: 32]",
        )


def ray_executor(args: argparse.Namespace):
    """The Ray executor asked for with --ray, or None (the local path)."""
    if args.ray is None:
        if args.ray_cpus or getattr(args, "ray_parts", 32) != 32:
            raise UserError("--ray-cpus and --ray-parts only apply with --ray; add --ray or leave them out")
        return None
    if args.ray_cpus < 0 or getattr(args, "ray_parts", 1) < 1:
        raise UserError("--ray-cpus must be >= 0 and --ray-parts >= 1")
    from contextlab.data.shards import make_executor

    return make_executor(args.ray, ray_cpus=args.ray_cpus)


def _ingest_parser() -> argparse.ArgumentParser:
    from contextlab.data.ingest import IngestConfig
    from contextlab.data.sources import SourceOptions

    p = _parser(
        "data ingest",
        "Tokenize SOURCE into a token store at --out. Runs in parallel, shows progress, "
        "and resumes where it stopped if killed (run the same command again).",
    )
    p.add_argument(
        "source",
        help="a folder of text/code files, a text file, .jsonl[.gz], .parquet, "
        "or a local Hugging Face datasets folder (save_to_disk)",
    )
    p.add_argument("--out", required=True, help="the token store directory to create")
    p.add_argument(
        "--config",
        help="a TOML file with ingest options (flags and --set override it; default: none)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set source.encoding=replace (repeatable)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing store or unfinished ingest at --out"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="tokenize on N threads, e.g. on a machine shared with others (BPE training too); "
        "the store is the same for any N [default: 0 = one per core]",
    )
    add_ray_args(p, parts=True)
    add_dataclass_args(p, IngestConfig)
    add_dataclass_args(p, SourceOptions, skip=_GLOB_FLAGS)
    for name in _GLOB_FLAGS:  # repeatable, and each may be a comma list: all of them count
        p.add_argument(
            f"--{name}",
            dest=name,
            action="append",
            metavar="GLOB[,GLOB...]",
            help=f"{field_help(SourceOptions, name)}; repeat the flag to add more",
        )
    return p


_GLOB_FLAGS = ("include", "exclude")


def _ingest_config(args: argparse.Namespace):
    """The IngestConfig of --config, then --set, then the option flags (each overriding the last)."""
    from contextlab.data.ingest import IngestConfig
    from contextlab.data.sources import SourceOptions

    data = apply_overrides(read_toml(args.config) if args.config else {}, args.set)
    for f in dataclasses.fields(IngestConfig):
        if getattr(args, f.name, None) is not None and f.name != "source":
            data[f.name] = getattr(args, f.name)
    for f in dataclasses.fields(SourceOptions):
        value = getattr(args, f.name, None)
        if value is not None:
            data.setdefault("source", {})[f.name] = ",".join(value) if isinstance(value, list) else value
    return from_dict(IngestConfig, data)


def carriage_return_note(store) -> str:
    """A note when a store's text keeps CRLF line ends (Project Gutenberg's files; kept byte for byte, as
    every offset into the source stays valid): its carriage returns are tokens the prompt tasks, which
    write LF, never show the model. "" when under ``CR_SHARE`` of the tokens."""
    from contextlab.data.stats import CR_SHARE, carriage_return_share

    share = carriage_return_share(store)
    if share < CR_SHARE:
        return ""
    return (
        f"  note: {share:.1%} of the tokens hold carriage returns (CRLF line ends, kept byte for byte); "
        "the prompt tasks (niah, kv, passkey, vartrack) write LF, so a model trained here reads their "
        "line ends as text it has not seen: convert the files to LF first (e.g. dos2unix) to train on LF"
    )


def _print_ingest_report(report) -> None:
    """What was written (or that the store was up to date), and the skipped-document counts."""
    store = report.store
    if report.up_to_date:
        print(
            f"{store.path} is up to date ({store.n_docs:,} document{'s' * (store.n_docs != 1)}, "
            f"{store.n_tokens:,} tokens); "
            "nothing to do"
        )
        return
    stats = store.meta.get("source_stats", {})
    print(
        f"wrote {store.path}: {store.n_docs:,} document{'' if store.n_docs == 1 else 's'}, "
        f"{store.n_tokens:,} tokens "
        f"({store.tokenizer_spec['name']}), {report.bytes_read / 1e6:,.1f} MB in {report.seconds:,.1f} s "
        f"({report.mb_per_s:,.1f} MB/s)"
    )
    notes = {
        _stat_label(k): v
        for k, v in stats.items()
        if isinstance(v, int) and v and k.startswith(("skipped", "undecodable", "latin1"))
    }
    # the token filters' counts (the source's own skipped_short is --min-chars)
    notes["fewer than --min-tokens"] = report.skipped_short
    notes["more than --max-tokens"] = report.skipped_long
    notes = {k: v for k, v in notes.items() if v}
    if notes:
        print("  " + ", ".join(f"{k}: {v:,}" for k, v in notes.items()))
    if line := carriage_return_note(store):
        print(line)
    if n := stats.get("byte_order_marks"):
        print(f"  {n:,} file{'s' * (n != 1)} opened with a UTF-8 byte-order mark, read past (not text)")
    if stats.get("latin1_files") or stats.get("latin1_rows"):  # which, so a reader can look at them
        from contextlab.data.stats import latin1_line

        named = list(dict.fromkeys(m.get("path") for m in store.iter_docs_meta() if m.get("encoding")))
        print("  " + latin1_line(named).split(None, 1)[1])
    pattern = store.meta.get("source", {}).get("options", {}).get("doc_start")
    if pattern is not None:
        cut, uncut = stats.get("doc_start_cut", 0), stats.get("doc_start_uncut", 0)
        print(
            f"  --doc-start cut {cut:,} of {cut + uncut:,} text file{'s' * (cut + uncut != 1)} into documents"
        )
        if not cut:
            print(
                f"warning: --doc-start {pattern!r} matched no line after a file's first, so every file "
                "is one document; it is a Python regular expression matched from a line's start, on the line "
                "without its line end",
                file=sys.stderr,
            )
    skipped = store.path / "skipped.jsonl"
    if skipped.exists() and skipped.stat().st_size:
        _print_unreadable(skipped)
        print(f"  every skipped file is named, with its reason, in {skipped}")


def _print_unreadable(skipped, show: int = 3) -> None:
    """Name the first files the source could not read (a corrupt archive, a file under another format's
    name): unlike excluded or binary files, they were meant to be read, and a count alone hides which."""
    bad = []
    for line in skipped.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line) if line.strip() else {}
        if str(entry.get("reason", "")).startswith("unreadable"):
            bad.append(entry)
    for e in bad[:show]:
        where = f"{e['path']} row {e['row']}" if "row" in e else e["path"]
        print(f"  {where}: {e['reason']}")
    if len(bad) > show:
        print(f"  ... and {len(bad) - show:,} more unreadable")


def _stat_label(key: str) -> str:
    """A source count's name as the summary line says it: skipped_excluded -> "skipped (excluded)",
    latin1_files -> "read as Latin-1 (files)", undecodable_bytes -> "not UTF-8 (bytes)"."""
    for prefix, said in (
        ("skipped_", "skipped"),
        ("latin1_", "read as Latin-1"),
        ("undecodable_", "not UTF-8"),
    ):
        if key.startswith(prefix):
            return f"{said} ({key[len(prefix) :].replace('_', ' ')})"
    return key.replace("_", " ")


def cmd_info(argv: list[str]) -> int:
    """Print a token store's counts and draw its document-length histogram (PNG)."""
    from contextlab.data.stats import format_summary, plot_length_histogram, store_summary
    from contextlab.data.store import TokenStore
    from contextlab.figures import default_plot_path
    from contextlab.outputs import refuse_plot_target

    p = _parser(
        "data info",
        "Counts, document-length percentiles, long-document counts (LongCrawl64 view), "
        "and a histogram of document lengths.",
    )
    p.add_argument("store", help="a token store directory")
    p.add_argument(
        "--plot",
        help="where to write the histogram PNG (default: STORE/doc_lengths.png, or "
        "./STORENAME_doc_lengths.png when STORE is read-only)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw the histogram")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    store = TokenStore(args.store)
    target = args.plot or default_plot_path(args.store, "doc_lengths.png")
    if not args.no_plot:  # before anything is read: a --plot naming the store's tokens.bin replaced it
        refuse_plot_target(target, "--plot" if args.plot else "the default --plot")
    summary = store_summary(store)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    if not args.no_plot:
        out = plot_length_histogram(store, target)
        if not args.json:
            print(f"histogram  {out}")
    return 0


def cmd_verify(argv: list[str]) -> int:
    """Check a token store end to end (sizes, counts, vocabulary, token ids, content hash)."""
    from contextlab.data.store import TokenStore

    p = _parser(
        "data verify",
        "Re-read the whole store and check it against meta.json: sizes and counts, the vocabulary "
        "size against the tokenizer, every token id against the vocabulary, the content hash.",
    )
    p.add_argument("store", help="a token store directory")
    args = p.parse_args(argv)
    store = TokenStore(args.store)
    store.verify()
    for _ in store.iter_docs_meta():  # one JSON object per document, one line each (none kept)
        pass
    print(
        f"{store.path}: ok ({store.n_docs:,} documents, {store.n_tokens:,} tokens, every id below the "
        f"vocabulary size {store.vocab_size:,}, hash {store.hash[:12]})"
    )
    return 0
