"""Check tests/fixtures against the real data sets in ../shared/data (run by CI: make check-fixtures).

    python scripts/check_fixtures.py [--shared ../shared/data]

The test suite reads only the small cuts in tests/fixtures, so that a clone tests with nothing
beside it; this script is what ties those cuts to their sources, and checks the whole data
sets where a cut cannot:

1. every fixture rebuilt from the sources (scripts/build_fixtures.py) equals the committed bytes;
2. all 127 Project Gutenberg books: the body ``open_source`` strips equals the manifest's;
3. the cut kv-retrieval and TREC files give the full files' results (the same key-value
   examples; the same ICL prompts for the shot draws the tests make, and the same ICL results).

Each failed check prints one line naming what differs; the exit status is 1 then. The last line
is one JSON object: fixtures_identical, books_matching, cuts_equal_full.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from build_fixtures import FIXTURES, REPO, build

from contextlab.data.sources import SourceOptions, open_source
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import icl, kv
from contextlab.eval.adapter import ContextLengthWarning, ModelAdapter, in_memory_adapter
from contextlab.models.gpt import GPT, GPTConfig

NOT_BUILT = {"README.md"}


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in NOT_BUILT and "__pycache__" not in p.parts
    }


def check_rebuild(shared: Path) -> list[str]:
    """Fixtures rebuilt from the sources against the committed ones: a line per difference."""
    with tempfile.TemporaryDirectory() as tmp:
        build(shared, Path(tmp))
        built, committed = files(Path(tmp)), files(FIXTURES)
    problems = [
        f"tests/fixtures/{n}: not made by build_fixtures.py" for n in sorted(set(committed) - set(built))
    ]
    problems += [
        f"tests/fixtures/{n}: missing (build_fixtures.py makes it)"
        for n in sorted(set(built) - set(committed))
    ]
    problems += [
        f"tests/fixtures/{n}: differs from what build_fixtures.py makes"
        for n in sorted(set(built) & set(committed))
        if built[n] != committed[n]
    ]
    return problems


def check_books(shared: Path) -> tuple[int, list[str]]:
    """(books whose stripped body equals the manifest's, a line per other book)."""
    books = shared / "gutenberg_books"
    manifest = [json.loads(line) for line in (books / "manifest.jsonl").read_text().splitlines()]
    src = open_source(books / "texts", SourceOptions(strip_gutenberg="yes"))
    bodies = {d.meta["path"]: d.text for d in src}
    problems = []
    if not len(manifest) == 127 == len(bodies) == src.stats.gutenberg_stripped:
        problems.append(f"expected 127 books, manifest {len(manifest)}, read {len(bodies)}")
    for m in manifest:
        text = (books / m["file"]).read_bytes().decode("utf-8")
        if bodies.get(Path(m["file"]).name) != text[m["body_start_char"] : m["body_end_char"]]:
            problems.append(f"{m['file']}: stripped body differs from the manifest's")
    return len(manifest) - len(problems), problems


def tiny_adapter() -> ModelAdapter:
    """A seeded byte-level GPT of context 128, as in the ICL tests (cut and full files are scored
    by the same model, so any fixed model serves)."""
    torch.manual_seed(7)
    model = GPT(GPTConfig(vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=128)).eval()
    return in_memory_adapter(model, ByteTokenizer(), "tiny", batch_size=6)


def check_cuts(shared: Path) -> list[str]:
    """The cut kv and TREC files against the full ones: a line per difference."""
    problems = []
    full_kv = shared / "lost_in_the_middle" / "kv-retrieval-75_keys.jsonl.gz"
    cut_kv = FIXTURES / "lost_in_the_middle" / "kv-retrieval-75_keys.first2.jsonl.gz"
    if kv.read_examples(cut_kv) != kv.read_examples(full_kv)[:2]:
        problems.append(f"{cut_kv.name}: not the first 2 examples of the full file")
    adapter = tiny_adapter()
    warnings.simplefilter("ignore", ContextLengthWarning)  # long prompts are scored alike on both sides
    cut, full = FIXTURES / "trec_qc", shared / "trec_qc"
    for k in (2, 4):  # the draws tests/eval/test_tasks.py makes
        prompts = [
            [
                s.prompt
                for s in icl.build_prompts(
                    adapter, icl.read_trec(d / "train.txt"), icl.read_trec(d / "test.txt")[:6], k, 0
                )
            ]
            for d in (cut, full)
        ]
        if prompts[0] != prompts[1]:
            problems.append(f"trec_qc: the {k}-shot prompts differ from the full file's")
    o = icl.Options(shots=[0, 2], n_test=6, seeds=1, balance=False)  # the cut test.txt has no ABBR line
    if icl.run(adapter, o, str(cut)).results != icl.run(adapter, o, str(full)).results:
        problems.append("trec_qc: ICL results differ from the full file's")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data", help="the data sets")
    args = ap.parse_args()
    if not args.shared.is_dir():
        print(f"error: {args.shared} is not a folder; pass --shared PATH to ../shared/data", file=sys.stderr)
        return 2
    rebuild = check_rebuild(args.shared)
    books_ok, books = check_books(args.shared)
    cuts = check_cuts(args.shared)
    for line in rebuild + books + cuts:
        print(line)
    print(
        f"fixtures rebuilt: {'identical' if not rebuild else f'{len(rebuild)} differ'}; "
        f"books matching the manifest: {books_ok}/127; cuts give the full files' results: {not cuts}"
    )
    print(
        json.dumps(
            {"fixtures_identical": not rebuild, "books_matching": books_ok, "cuts_equal_full": not cuts}
        )
    )
    return 1 if rebuild or books or cuts else 0


if __name__ == "__main__":
    sys.exit(main())
