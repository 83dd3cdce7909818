"""``contextlab data export``: a packed store as Parquet or a Megatron indexed dataset."""

from __future__ import annotations

import argparse

from contextlab.config import add_dataclass_args, dataclass_from_args


def cmd_data_export(argv: list[str]) -> int:
    """Export a packed store's rows for other trainers (Parquet for HF, Megatron .bin/.idx)."""
    from contextlab.data.export import ExportConfig, export

    args = _parser().parse_args(argv)
    config = dataclass_from_args(ExportConfig, args)
    report = export(
        args.packed,
        args.out,
        config,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        verify=not args.no_verify,
        store=args.store,
    )
    rec = report.record
    splits = splits_text(rec["splits"])
    val, short = rec.get("validation") or {}, rec["short_rows_left_out"]
    if val.get("from") == "heldout documents":
        n = val["documents"]
        splits += f" (windows over the {n:,} document{'s' * (n != 1)} the pack held out)"
    lost = rec.get("short_row_tokens_left_out") or 0
    packed = max(rec.get("packed_tokens") or 1, 1)
    share = f" ({lost:,} tokens, {100 * lost / packed:.1f}% of the packed ones)"
    print(
        f"wrote {report.out} ({rec['export_format']}, context {rec['context']:,}): {splits}; "
        f"{short:,} short row{'s' * (short != 1)} left out{share if short else ''}; {report.seconds:,.1f} s"
    )
    return 0


def splits_text(splits: dict) -> str:
    """``train 22 rows / 360,470 tokens, validation 1 row / 16,385 tokens``."""
    return ", ".join(
        f"{name} {s['rows']:,} row{'s' * (s['rows'] != 1)} / {s['tokens']:,} tokens"
        for name, s in splits.items()
    )


def _parser() -> argparse.ArgumentParser:
    from contextlab.data.export import FORMATS, ExportConfig

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab data export",
        description="Write the rows of a packed store, in packed order, for another trainer: "
        + "; ".join(f"{k}: {v}" for k, v in FORMATS.items())
        + ". OUT gets export.json (source fingerprint, tokenizer hash, eod id, context, counts). "
        "See docs/data.md, 'Training on SPLICE data elsewhere'.",
    )
    p.add_argument("packed", help="a finished packed store (from `contextlab data pack`)")
    p.add_argument(
        "--store",
        help="the token store PACKED was packed from, when it moved from the path PACKED records (it "
        "must hold the same content: checked by its content hash; default: the path PACKED records)",
    )
    p.add_argument("--out", required=True, help="the folder to create (written as OUT.partial, then renamed)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the check that the token store behind PACKED still matches its content hash (one "
        "read of the store, remembered while its files are unchanged)",
    )
    add_dataclass_args(p, ExportConfig)
    return p
