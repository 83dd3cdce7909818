"""All 127 Gutenberg books through ``contextlab data ingest`` with the GPT-2 tokenizer,
checked against an independent tiktoken count and against the source text.

The independent side does not use contextlab at all: it cuts each book at the body offsets
given in ``manifest.jsonl`` and encodes it with tiktoken built straight from the shared
GPT-2 files. The store must hold the same number of tokens (and the same ids), and
decoding every stored document must give back its source text exactly.

    python benchmarks/gutenberg_gpt2_parity.py [--shared ../shared]

Last line: ``{"bench": "gutenberg_gpt2_parity", "docs": 127, "tokens_store": ...,
"tokens_tiktoken": ..., "ids_equal": true, "decode_equal_docs": 127}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    args = ap.parse_args()
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    from contextlab.data.ingest import IngestConfig, ingest

    data = Path(args.shared) / "data"
    gpt2 = data / "gpt2_tokenizer"
    enc = tiktoken.Encoding(
        name="gpt2-local",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=data_gym_to_mergeable_bpe_ranks(str(gpt2 / "vocab.bpe"), str(gpt2 / "encoder.json")),
        special_tokens={"<|endoftext|>": 50256},
    )
    manifest = [
        json.loads(line) for line in (data / "gutenberg_books" / "manifest.jsonl").read_text().splitlines()
    ]
    bodies = {}
    for row in manifest:
        text = (data / "gutenberg_books" / row["file"]).read_bytes().decode("utf-8")
        bodies[Path(row["file"]).name] = text[row["body_start_char"] : row["body_end_char"]]

    work = Path(tempfile.mkdtemp(prefix="gpt2-parity-"))
    try:
        rep = ingest(
            data / "gutenberg_books" / "texts",
            work / "store",
            IngestConfig(tokenizer=f"gpt2:{gpt2}"),
            progress=True,
        )
        store = rep.store
        tok = store.tokenizer()
        ids_equal, decode_equal, tiktoken_total = True, 0, 0
        for i, meta in enumerate(store.docs_meta()):
            body = bodies[meta["path"]]
            ref = enc.encode_ordinary(body)
            tiktoken_total += len(ref)
            ids_equal &= store.doc(i).tolist() == ref
            decode_equal += tok.decode(store.doc(i)) == body
        print(
            f"store: {store.n_docs} documents, {store.n_tokens:,} tokens in {rep.seconds:.1f} s "
            f"({rep.mb_per_s:.1f} MB/s); tiktoken on the manifest bodies: {tiktoken_total:,} tokens"
        )
        print(
            f"ids identical: {ids_equal}; documents decoding to their source text: "
            f"{decode_equal}/{store.n_docs}"
        )
        result = {
            "bench": "gutenberg_gpt2_parity",
            "docs": store.n_docs,
            "tokens_store": store.n_tokens,
            "tokens_tiktoken": tiktoken_total,
            "ids_equal": bool(ids_equal),
            "decode_equal_docs": decode_equal,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
