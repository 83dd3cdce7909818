"""Burstiness of SPLICE vs example packing by two estimators of the Zipf exponent.

Ingests a source tree (default: this Python's standard library without
site-packages) with the GPT-2 tokenizer, packs it
with example packing and with SPLICE (BM25, k = 1) for one context, and prints per method the
least-squares Zipf slope over all ranks and the discrete power-law MLE with a fitted x_min
(``contextlab.data.packing.stats``), each as mean +- std over the sampled full sequences, so a
disagreement between the two is visible as such. Last line: one JSON object with the figures.

    python scripts/burstiness_estimators.py --work /tmp/burst [--source DIR] [--context 2047]
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.packing import PackConfig, pack, pack_stats
from contextlab.data.sources import SourceOptions

GPT2 = "../shared/data/gpt2_tokenizer"  # the data folder beside the repository (see its README)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=sysconfig.get_paths()["stdlib"], help="a source tree to ingest")
    ap.add_argument("--include", default="*.py", help="globs of the files to read (comma-separated)")
    ap.add_argument("--exclude", default="site-packages/", help="globs of the files to leave out")
    ap.add_argument("--gpt2", default=GPT2, help="GPT-2 tokenizer folder (encoder.json + vocab.bpe)")
    ap.add_argument("--work", required=True, help="where the store and the packed stores go")
    ap.add_argument("--context", type=int, default=2047, help="the training context packed for")
    ap.add_argument("--max-sequences", type=int, default=1000, help="full sequences fitted per method")
    args = ap.parse_args()
    work = Path(args.work)
    source = SourceOptions(include=args.include.split(","), exclude=args.exclude.split(","), encoding="skip")
    store = ingest(
        args.source,
        work / "store",
        IngestConfig(tokenizer=f"gpt2:{args.gpt2}", source=source),
        progress=False,
    ).store
    print(f"store {store.path}: {store.n_docs:,} documents, {store.n_tokens:,} tokens")
    out = {}
    for name, cfg in (
        ("ep", PackConfig(method="ep", context=args.context, val_fraction=0)),
        (
            "splice_bm25",
            PackConfig(method="splice", retriever="bm25", k=1, context=args.context, val_fraction=0),
        ),
    ):
        packed = pack(store, work / name, cfg, progress=False).packed
        s = pack_stats(packed, max_sequences=args.max_sequences, mle_sequences=0)  # the MLE of every one
        out[name] = {k: {f: s[k][f] for f in ("mean", "std", "n_sequences")} for k in ("zipf", "zipf_mle")}
        out[name]["zipf_mle"]["alpha_mean"] = s["zipf_mle"]["alpha_mean"]
        out[name]["zipf_mle"]["xmin_median"] = s["zipf_mle"]["xmin_median"]
        z, m = s["zipf"], s["zipf_mle"]
        print(
            f"{name:<12} least squares {z['mean']:.3f} +- {z['std']:.3f}   "
            f"MLE {m['mean']:.3f} +- {m['std']:.3f} (alpha {m['alpha_mean']:.3f}, x_min median "
            f"{m['xmin_median']:.0f})   over {z['n_sequences']:,} / {m['n_sequences']:,} sequences"
        )
    for key in ("zipf", "zipf_mle"):
        d = out["splice_bm25"][key]["mean"] - out["ep"][key]["mean"]
        print(f"SPLICE - EP ({key}): {d:+.3f} ({'burstier' if d < 0 else 'not burstier'} by this estimator)")
    print(json.dumps({"source": args.source, "context": args.context, **out}))


if __name__ == "__main__":
    main()
