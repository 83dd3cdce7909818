"""Rebuild the books corpus shipped inside the package (src/contextlab/corpus/books).

Takes a few public-domain Project Gutenberg books from ../shared/data/gutenberg_books,
cuts the Project Gutenberg header and footer at the offsets in its manifest, turns CRLF
into LF, and writes them with a PROVENANCE.json (title, author, ebook id, source hash).

    python scripts/build_embedded_corpus.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

BOOKS = [158, 5230, 209, 863, 1597, 13726]  # Emma, The Invisible Man, The Turn of the Screw,
# The Mysterious Affair at Styles, Andersen's Fairy Tales, Apology/Crito/Phaedo

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    args = ap.parse_args()
    src = Path(args.shared) / "data" / "gutenberg_books"
    manifest = {}
    for line in (src / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        manifest[row["ebook_id"]] = row
    out = ROOT / "src" / "contextlab" / "corpus" / "books"
    out.mkdir(parents=True, exist_ok=True)
    provenance = []
    for ebook_id in BOOKS:
        row = manifest[ebook_id]
        raw = (src / row["file"]).read_bytes()
        text = raw.decode("utf-8")[row["body_start_char"] : row["body_end_char"]]
        body = text.replace("\r\n", "\n").strip()
        # older books repeat a short "End of the Project Gutenberg EBook of ..." line
        body = (
            re.sub(r"\n\s*End of (the )?Project Gutenberg[^\n]*$", "", body, flags=re.IGNORECASE).strip()
            + "\n"
        )
        name = f"pg{ebook_id}.txt"
        (out / name).write_text(body, encoding="utf-8")
        provenance.append(
            {
                "file": name,
                "ebook_id": ebook_id,
                "title": row["title"],
                "author": row["author"],
                "source": (
                    f"Project Gutenberg eBook #{ebook_id}, via shared/data/gutenberg_books/{row['file']}"
                ),
                "source_sha256": row["sha256"],
                "body_chars": [row["body_start_char"], row["body_end_char"]],
                "processing": (
                    "Project Gutenberg header and footer (and a trailing 'End of the Project Gutenberg "
                    "EBook' line) removed; CRLF -> LF; surrounding whitespace stripped"
                ),
                "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
                "bytes": len(body.encode("utf-8")),
                "licence": "public domain in the USA (Project Gutenberg eBook)",
            }
        )
    (out / "PROVENANCE.json").write_text(json.dumps(provenance, indent=2) + "\n")
    total = sum(p["bytes"] for p in provenance)
    print(f"wrote {len(provenance)} books, {total / 1e6:.2f} MB, to {out}")


if __name__ == "__main__":
    main()
