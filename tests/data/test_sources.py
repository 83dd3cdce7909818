"""Tests for contextlab.data.sources: tiny corpora in tmp_path, exact documents and meta."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import time
from pathlib import Path

import pytest

from contextlab.data.gutenberg import find_gutenberg_body
from contextlab.data.sources import SourceOptions, fingerprint_options, open_source
from contextlab.errors import UserError
from tests.conftest import FIXTURES, read_gz_text, write_tree

PG_VARIANTS = FIXTURES / "gutenberg_books" / "marker_variants.jsonl.gz"  # see tests/fixtures/README.md
BAD_UTF8 = b"ok \xff\xfe caf\xc3\xa9 \xe2\x82 end"  # 4 undecodable bytes, the first at offset 3


def write(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def docs(path, **opts) -> list[tuple[str, dict]]:
    return [(d.text, d.meta) for d in open_source(path, SourceOptions(**opts))]


def texts(path, **opts) -> list[str]:
    return [t for t, _ in docs(path, **opts)]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write(
        tmp_path / "corpus",
        {
            "b.txt": "bee\r\n",
            "a/z.py": "print(1)\n",
            "a/b/c.md": "# c",
            "a.txt": "ay",
            "empty.txt": "",
            "blank.txt": " \n\t",
            "img.bin": b"\x89PNG\x00\x00data",
            ".git/config": "[core]",
            "a/.hidden.txt": "secret",
            "zip/d.txt.gz": gzip.compress(b"gz body"),
        },
    )


def test_folder_order_meta_and_counts(tree: Path):
    src = open_source(tree)
    assert src.kind == "folder"
    got = [(d.text, d.meta) for d in src]
    given = str(tree)
    assert got == [  # plain string order of the relative paths: "." sorts before "/"
        ("ay", {"id": "a.txt", "source": given, "path": "a.txt", "domain": ""}),
        ("# c", {"id": "a/b/c.md", "source": given, "path": "a/b/c.md", "domain": "a"}),
        ("print(1)\n", {"id": "a/z.py", "source": given, "path": "a/z.py", "domain": "a"}),
        ("bee\r\n", {"id": "b.txt", "source": given, "path": "b.txt", "domain": ""}),
        ("gz body", {"id": "zip/d.txt.gz", "source": given, "path": "zip/d.txt.gz", "domain": "zip"}),
    ]
    s = src.stats.as_dict()
    assert (s["files_seen"], s["documents"], s["skipped_binary"], s["skipped_empty"]) == (8, 5, 1, 2)
    assert s["bytes_read"] == 2 + 3 + 9 + 5 + 7 + 0 + 3 + len(b"\x89PNG\x00\x00data")


def test_include_exclude_globs(tree: Path):
    assert texts(tree, include=["**/*.py", "*.md"]) == ["# c", "print(1)\n"]
    assert texts(tree, include=["a/**"], exclude=["a/b/"]) == ["print(1)\n"]
    assert texts(tree, include=["*.txt"]) == ["ay", "bee\r\n"]
    assert texts(tree, include=["[ab].txt"]) == ["ay", "bee\r\n"]
    assert texts(tree, exclude=["a/*", "a.txt", "b.t?t", "*.gz"]) == ["# c"]
    src = open_source(tree, SourceOptions(include=["**/*.py"]))
    list(src)
    assert src.stats.skipped_excluded == 7 and src.stats.files_seen == 1


def test_symlinks_not_followed_out_of_tree(tmp_path: Path):
    root = write(tmp_path / "c", {"in.txt": "inside"})
    outside = write(tmp_path / "out", {"secret.txt": "outside"})
    os.symlink(outside / "secret.txt", root / "link_out.txt")
    os.symlink(root / "in.txt", root / "link_in.txt")
    os.symlink(outside, root / "dirlink")
    src = open_source(root)
    # link_in.txt is the same file as in.txt: skipped as a duplicate (by resolved path), and named
    assert [(d.meta["path"], d.text) for d in src] == [("in.txt", "inside")]
    assert src.stats.skipped_symlinks == 2 and src.stats.skipped_duplicates == 1
    assert {"path": "link_in.txt", "reason": "duplicate of in.txt (a symlink to it)"} in src.skipped


@pytest.mark.parametrize(
    "policy, expect, counts",
    [
        ("replace", "ok \ufffd\ufffd caf\u00e9 \ufffd end", {"undecodable_bytes": 4, "undecodable_files": 1}),
        ("latin-1", BAD_UTF8.decode("latin-1"), {"latin1_files": 1, "undecodable_bytes": 0}),
        ("skip", None, {"undecodable_bytes": 4, "undecodable_files": 1}),
    ],
)
def test_encoding_policies(tmp_path: Path, policy, expect, counts):
    root = write(tmp_path / "c", {"bad.txt": BAD_UTF8, "good.txt": "fine"})
    src = open_source(root, SourceOptions(encoding=policy))
    got = {d.meta["path"]: d.text for d in src}
    assert got.get("bad.txt") == expect and got["good.txt"] == "fine"
    assert {k: src.stats.as_dict()[k] for k in counts} == counts


def test_documents_read_as_latin1_are_marked_and_named(tmp_path: Path, capsys):
    """A user's six State of the Union files read with --encoding latin-1 were five Big5 files and one
    Latin-1: the store said `latin1_files=6` and nothing named which documents to look at."""
    from contextlab.cli.data import cmd_info, cmd_ingest

    root = write(tmp_path / "c", {"bad.txt": BAD_UTF8, "good.txt": "fine", "also.txt": BAD_UTF8})
    docs = {d.meta["path"]: d.meta for d in open_source(root, SourceOptions(encoding="latin-1"))}
    assert docs["bad.txt"]["encoding"] == docs["also.txt"]["encoding"] == "latin-1"
    assert "encoding" not in docs["good.txt"]
    out = tmp_path / "st"
    argv = [str(root), "--tokenizer", "byte", "--encoding", "latin-1", "--out", str(out), "--no-progress"]
    assert cmd_ingest(argv) == 0
    said = capsys.readouterr().out
    assert "  also.txt, bad.txt (documents with encoding latin-1 in docs.jsonl; if they are another" in said
    assert cmd_info([str(out)]) == 0
    assert "latin-1    also.txt, bad.txt (documents with encoding latin-1" in capsys.readouterr().out


def test_encoding_strict_names_file_and_offset(tmp_path: Path):
    root = write(tmp_path / "c", {"bad.txt": BAD_UTF8})
    with pytest.raises(
        UserError, match=r"bad\.txt is not valid UTF-8 \(byte offset 3\); use --encoding replace"
    ):
        list(open_source(root))


def test_jsonl_plain_gz_and_domain_field(tmp_path: Path):
    rows = [{"text": "one", "lang": "en"}, {"text": "two", "lang": "fr"}, {"text": "", "lang": "x"}]
    body = "".join(json.dumps(r) + "\n" for r in rows) + "\n" + json.dumps({"text": "four"}) + "\n"
    plain = write(tmp_path, {"wiki.jsonl": body})
    got = docs(tmp_path / "wiki.jsonl")
    assert [t for t, _ in got] == ["one", "two", "four"]
    assert got[2][1] == {
        "id": "wiki.jsonl#4",
        "source": str(plain / "wiki.jsonl"),
        "path": "wiki.jsonl",
        "row": 4,
        "domain": "wiki",
    }
    gz = tmp_path / "web.jsonl.gz"
    gz.write_bytes(gzip.compress(("".join(json.dumps(r) + "\n" for r in rows[:2])).encode()))
    src = open_source(gz, SourceOptions(domain_field="lang"))
    assert src.kind == "jsonl"
    assert [(d.text, d.meta["domain"], d.meta["row"]) for d in src] == [("one", "en", 0), ("two", "fr", 1)]


def test_jsonl_blank_lines_are_not_rows_and_empty_rows_are_listed(tmp_path: Path):
    body = '{"text":"hello world"}\n\n{"text":"second row"}\n   \n{"text":"third"}\n{"text": ""}\n'
    write(tmp_path, {"blank.jsonl": body})
    src = open_source(tmp_path / "blank.jsonl")
    assert [(d.text, d.meta["row"]) for d in src] == [("hello world", 0), ("second row", 2), ("third", 4)]
    assert src.stats.skipped_empty == 1  # the empty-text row; the two blank lines are no rows
    assert src.skipped == [{"path": "blank.jsonl", "row": 5, "reason": "empty"}]


def test_jsonl_bad_line_and_missing_field(tmp_path: Path):
    write(
        tmp_path,
        {
            "a.jsonl": '{"text": "ok"}\n{"text": oops}\n',
            "b.jsonl": '{"body": "x"}\n{"body": "y"}\n',
            "c.jsonl": '{"text": 3}\n',
            "d.json": '[{"text": "x"}]\n',
            "e.json": '[\n  {"text": "x"}\n]\n',
        },
    )
    with pytest.raises(UserError, match=r"a\.jsonl line 2 is not valid JSON"):
        list(open_source(tmp_path / "a.jsonl"))
    with pytest.raises(
        UserError, match=r"no row of .*b\.jsonl has a field 'text' \(line 1 has: body\); pass --text-field"
    ):
        list(open_source(tmp_path / "b.jsonl"))
    with pytest.raises(UserError, match=r"c\.jsonl line 1: field 'text' holds int, not text"):
        list(open_source(tmp_path / "c.jsonl"))
    with pytest.raises(UserError, match=r"d\.json line 1 holds a JSON list, not an object"):
        list(open_source(tmp_path / "d.json"))
    with pytest.raises(
        UserError, match=r"e\.json line 1 is not valid JSON .*\(a JSON array\? write one object per line\)"
    ):
        list(open_source(tmp_path / "e.json"))


def test_jsonl_row_without_a_named_field_is_kept_or_skipped_not_fatal(tmp_path: Path):
    rows = [{"id": i, "content": f"row {i}", "cat": "ab"[i % 2], "fname": f"d{i}/f.py"} for i in range(4)]
    rows[1] = {"id": 1, "content": "no domain, no path"}  # kept: no domain, no path (as a null)
    rows[2] = {"id": 2, "cat": "a", "fname": "x.py"}  # skipped and named: no text field
    write(tmp_path, {"opt.jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    opts = {"text_field": "content", "domain_field": "cat", "path_field": "fname"}
    src = open_source(tmp_path / "opt.jsonl", SourceOptions(**opts))
    got = [(d.text, d.meta["row"], d.meta["domain"], d.meta["path"]) for d in src]
    assert got == [
        ("row 0", 0, "a", "d0/f.py"),
        ("no domain, no path", 1, "", ""),
        ("row 3", 3, "b", "d3/f.py"),
    ]
    assert src.skipped == [{"path": "opt.jsonl", "row": 2, "reason": "no field 'content'"}]
    assert src.stats.skipped_no_text_field == 1 and src.stats.documents == 3
    # without --domain-field the row without a path gets the domain of an empty path, as a null would
    assert [
        d.meta["domain"]
        for d in open_source(tmp_path / "opt.jsonl", SourceOptions(**{**opts, "domain_field": None}))
    ] == ["d0", "", "d3"]
    # rows without the text field before the first row that has it are named too, in row order
    write(tmp_path, {"late.jsonl": '{"t": 1}\n{"t": 2}\n{"text": "x"}\n{"t": 3}\n'})
    late = open_source(tmp_path / "late.jsonl")
    assert [d.text for d in late] == ["x"]
    assert [(e["row"], e["reason"]) for e in late.skipped] == [
        (0, "no field 'text'"),
        (1, "no field 'text'"),
        (3, "no field 'text'"),
    ]
    # a field that no row of a file has is a typo: one line, naming what the rows hold
    with pytest.raises(
        UserError,
        match=r"^no row of .*opt\.jsonl has a field 'kat' \(line 1 has: id, content, cat, fname\); "
        r"pass --domain-field NAME$",
    ):
        list(open_source(tmp_path / "opt.jsonl", SourceOptions(**{**opts, "domain_field": "kat"})))


def test_folder_of_jsonl_is_jsonl(tmp_path: Path):
    write(tmp_path / "j", {"x/1.jsonl": '{"text": "a"}\n', "0.jsonl": '{"text": "b"}\n'})
    src = open_source(tmp_path / "j")
    assert src.kind == "jsonl"
    assert [(d.text, d.meta["id"]) for d in src] == [("b", "0.jsonl#0"), ("a", "x/1.jsonl#0")]


def test_parquet_file_and_folder(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"text": [f"doc {i}" for i in range(10)], "dom": ["x", "y"] * 5})
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=3)  # 4 row groups
    assert pq.ParquetFile(tmp_path / "big.parquet").num_row_groups == 4
    got = docs(tmp_path / "big.parquet")
    assert [t for t, _ in got] == [f"doc {i}" for i in range(10)]
    assert got[7][1] == {
        "id": "big.parquet#7",
        "source": str(tmp_path / "big.parquet"),
        "path": "big.parquet",
        "row": 7,
        "domain": "big",
    }
    assert [m["domain"] for _, m in docs(tmp_path / "big.parquet", domain_field="dom")][:3] == ["x", "y", "x"]
    folder = tmp_path / "pq"
    folder.mkdir()
    pq.write_table(pa.table({"body": ["b0", None]}), folder / "b.parquet")
    pq.write_table(pa.table({"body": ["a0"]}), folder / "a.parquet")
    src = open_source(folder, SourceOptions(text_field="body"))
    assert src.kind == "parquet"
    assert [(d.text, d.meta["id"]) for d in src] == [("a0", "a.parquet#0"), ("b0", "b.parquet#0")]
    assert src.stats.skipped_empty == 1
    with pytest.raises(UserError, match=r"has no column 'text' \(columns: body\); pass --text-field NAME"):
        list(open_source(folder))
    pq.write_table(pa.table({"n": [1], "body": ["c0"], "title": ["t"]}), tmp_path / "mixed.parquet")
    with pytest.raises(
        UserError, match=r"\(columns: n, body, title; body, title hold text\); pass --text-field"
    ):
        list(open_source(tmp_path / "mixed.parquet"))


def test_parquet_domain_and_path_columns_must_hold_strings(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "text": ["a b", "c d", "e f"],
            "meta": [{"k": 1}, {"k": 2}, {"k": 1}],
            "tags": [["x"], ["y"], ["x"]],
            "cat": pa.array(["p", "q", "p"]).dictionary_encode(),  # a categorical column is strings
            "year": [2001, 2002, 2001],
        }
    )
    pq.write_table(table, tmp_path / "s.parquet")
    for flag, column, kind in (
        ("domain", "meta", "struct<k: int64>"),
        ("path", "tags", "list<element: string>"),
    ):
        with pytest.raises(
            UserError,
            match=rf"^column '{column}' of .*s\.parquet holds {re.escape(kind)}, not strings; "
            rf"--{flag}-field needs a column of strings \(string columns: text, cat\)$",
        ):
            list(open_source(tmp_path / "s.parquet", SourceOptions(**{f"{flag}_field": column})))
    assert [m["domain"] for _, m in docs(tmp_path / "s.parquet", domain_field="cat")] == ["p", "q", "p"]
    assert [m["domain"] for _, m in docs(tmp_path / "s.parquet", domain_field="year")] == [
        "2001",
        "2002",
        "2001",
    ]


def test_hf_dataset_and_dataset_dict(tmp_path: Path):
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["zero", "one", "two"], "src": ["a", "b", "c"]})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=2)
    src = open_source(tmp_path / "ds", SourceOptions(domain_field="src"))
    assert src.kind == "hf-dataset"
    got = [(d.text, d.meta["id"], d.meta["row"], d.meta["domain"]) for d in src]
    assert got == [("zero", "ds#0", 0, "a"), ("one", "ds#1", 1, "b"), ("two", "ds#2", 2, "c")]
    assert src.stats.files_seen == 2
    dd = datasets.DatasetDict({"train": ds, "test": ds.select([2])})
    dd.save_to_disk(str(tmp_path / "dd"))
    got = docs(tmp_path / "dd")
    assert [t for t, _ in got] == ["zero", "one", "two"]
    assert got[0][1]["path"] == "train/data-00000-of-00001.arrow" and got[0][1]["domain"] == "dd"
    assert texts(tmp_path / "dd" / "test") == ["two"]


def test_a_saved_dataset_whose_arrow_files_are_gone_is_named_as_one(tmp_path: Path):
    """Its state.json lists the data files: it is not read as a folder of JSON lines (which named
    dataset_info.json 'not valid JSON')."""
    import datasets

    datasets.Dataset.from_dict({"text": ["zero", "one"]}).save_to_disk(str(tmp_path / "ds"))
    for f in (tmp_path / "ds").glob("*.arrow"):
        f.unlink()
    with pytest.raises(UserError, match=r"ds is an incomplete Hugging Face dataset \(missing \['data-0"):
        list(open_source(tmp_path / "ds", SourceOptions()))
    (tmp_path / "notes").mkdir()  # a state.json of something else leaves a folder a folder
    (tmp_path / "notes" / "state.json").write_text('{"step": 3}')
    (tmp_path / "notes" / "a.txt").write_text("prose")
    assert open_source(tmp_path / "notes", SourceOptions()).kind == "folder"


def test_dataset_dict_split_is_chosen_named_and_recorded(tmp_path: Path):
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["zero", "one", "two"]})
    datasets.DatasetDict({"train": ds.select([0]), "test": ds}).save_to_disk(str(tmp_path / "dd"))
    src = open_source(tmp_path / "dd")
    assert src.split == "train" and texts(tmp_path / "dd") == ["zero"]
    assert src.split_note() == (
        f"{tmp_path / 'dd'} is a DatasetDict with splits train (1 row), test (3 rows): "
        "ingesting train; --split NAME reads another"
    )
    test = open_source(tmp_path / "dd", SourceOptions(split="test"))
    got = [(d.text, d.meta["path"]) for d in test]
    assert got == [(t, "test/data-00000-of-00001.arrow") for t in ("zero", "one", "two")]
    assert (
        test.describe()["split"] == "test" and "split" not in open_source(tmp_path / "dd" / "test").describe()
    )
    assert test.fingerprint() != src.fingerprint()
    # stores ingested before --split existed keep their fingerprint (the same command stays up to date)
    assert fingerprint_options(SourceOptions()) == {
        k: v for k, v in dataclasses.asdict(SourceOptions()).items() if k not in ("split", "doc_start")
    }
    with pytest.raises(UserError, match=r"has no split 'dev' \(splits: train, test\); pass --split with one"):
        open_source(tmp_path / "dd", SourceOptions(split="dev"))
    with pytest.raises(UserError, match=r"is a single saved Dataset, not a DatasetDict; leave --split out"):
        open_source(tmp_path / "dd" / "test", SourceOptions(split="test"))
    datasets.DatasetDict({"validation": ds, "test": ds}).save_to_disk(str(tmp_path / "nov"))
    with pytest.raises(
        UserError, match=r"no 'train' split \(splits: validation, test\); pass --split NAME to choose one"
    ):
        open_source(tmp_path / "nov")
    assert texts(tmp_path / "nov", split="validation") == ["zero", "one", "two"]
    datasets.DatasetDict({"validation": ds}).save_to_disk(str(tmp_path / "one"))
    assert open_source(tmp_path / "one").split == "validation"
    assert open_source(tmp_path / "one").split_note().endswith("validation (3 rows): ingesting validation")
    write(tmp_path, {"a.jsonl": '{"text": "a"}\n'})
    with pytest.raises(UserError, match=r"--split applies to a saved Hugging Face DatasetDict"):
        open_source(tmp_path / "a.jsonl", SourceOptions(split="train"))


def test_arrow_file_format_fallback_and_corrupt_files(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({"text": ["x", "y"]})
    (tmp_path / "ds").mkdir()
    with ipc.new_file(str(tmp_path / "ds" / "a.arrow"), table.schema) as writer:  # file, not stream, format
        writer.write_table(table)
    (tmp_path / "ds" / "state.json").write_text(json.dumps({"_data_files": [{"filename": "a.arrow"}]}))
    assert texts(tmp_path / "ds") == ["x", "y"]
    (tmp_path / "ds" / "a.arrow").write_bytes(b"nonsense")
    with pytest.raises(UserError, match=r"a\.arrow is not a readable Arrow file"):
        list(open_source(tmp_path / "ds"))
    (tmp_path / "bad.parquet").write_bytes(b"nonsense")
    with pytest.raises(UserError, match=r"bad\.parquet is not a readable Parquet file"):
        list(open_source(tmp_path / "bad.parquet"))


def test_single_file_binary_and_missing(tmp_path: Path):
    write(tmp_path, {"one.txt": "just one\n", "blob.dat": b"\x00\x01\x02"})
    got = docs(tmp_path / "one.txt")
    assert got == [
        (
            "just one\n",
            {"id": "one.txt", "source": str(tmp_path / "one.txt"), "path": "one.txt", "domain": ""},
        )
    ]
    with pytest.raises(UserError, match="SOURCE is not a text file"):
        open_source(tmp_path / "blob.dat")
    with pytest.raises(UserError, match=r"^SOURCE not found: .*nope$"):
        open_source(tmp_path / "nope")


def test_empty_corpus_names_what_was_skipped(tmp_path: Path):
    write(
        tmp_path / "c",
        {"a.bin": b"\x00", "b.bin": b"x\x00", "c.bin": b"\x00\x00", "e.txt": "", "f.txt": "  "},
    )
    src = open_source(tmp_path / "c")
    with pytest.raises(
        UserError, match=r"no documents in .*: 5 files read: 3 files were binary, 2 empty; check --include"
    ):
        list(src)
    with pytest.raises(UserError, match=r": 1 file read: 1 shorter than --min-chars 7;"):
        list(open_source(write(tmp_path / "d", {"s.txt": "sixsix"}), SourceOptions(min_chars=7)))


def test_options_validated():
    with pytest.raises(UserError, match="unknown encoding policy 'utf-16'"):
        SourceOptions(encoding="utf-16")
    with pytest.raises(UserError, match="strip_gutenberg"):
        SourceOptions(strip_gutenberg="maybe")


def test_fingerprint_and_reiteration(tree: Path):
    src = open_source(tree)
    fp = src.fingerprint()
    first = [(d.text, d.meta) for d in src]
    stats = src.stats.as_dict()
    assert [(d.text, d.meta) for d in src] == first and src.stats.as_dict() == stats
    assert open_source(tree).fingerprint() == fp
    assert open_source(tree, SourceOptions(min_chars=2)).fingerprint() != fp
    target = tree / "a.txt"
    target.write_text("ay, changed")
    fp2 = src.fingerprint()
    assert fp2 != fp
    os.utime(target, ns=(time.time_ns(), target.stat().st_mtime_ns + 10**9))
    assert src.fingerprint() != fp2
    assert json.loads(json.dumps(src.describe()))["kind"] == "folder"


GUTENBERG_TOY = (
    "The Project Gutenberg EBook of Toy\r\n\r\n"
    "***START OF THE PROJECT GUTENBERG EBOOK TOY: A VERY LONG\r\nTITLE***\r\n"
    "\r\nChapter 1\r\nBody with *** stars.\r\n\r\n"
    "*** END OF THIS PROJECT GUTENBERG EBOOK TOY ***\r\nlicense\r\n"
)


def test_gutenberg_small_case(tmp_path: Path):
    body = "\r\nChapter 1\r\nBody with *** stars.\r\n\r\n"
    start, end = find_gutenberg_body(GUTENBERG_TOY)
    assert GUTENBERG_TOY[start:end] == body
    write(tmp_path / "g", {"toy.txt": GUTENBERG_TOY, "plain.txt": "no markers"})
    src = open_source(tmp_path / "g")
    assert [d.text for d in src] == ["no markers", body] and src.stats.gutenberg_stripped == 1
    assert texts(tmp_path / "g", strip_gutenberg="no")[1] == GUTENBERG_TOY
    with pytest.raises(UserError, match="no Project Gutenberg START/END markers in plain.txt"):
        list(open_source(tmp_path / "g", SourceOptions(strip_gutenberg="yes")))
    assert (
        find_gutenberg_body("x *** START OF THE PROJECT GUTENBERG EBOOK X ***\n") is None
    )  # not at line start


def test_gutenberg_marker_spellings_of_real_books(tmp_path: Path):
    """One raw book per START/END spelling among the 127 of the Gutenberg data set (scripts/check_fixtures.py
    checks all of them): the header and footer verbatim, the body cut short."""
    rows = [json.loads(line) for line in read_gz_text(PG_VARIANTS).splitlines()]
    for m in rows:
        (tmp_path / m["file"]).write_bytes(m["text"].encode("utf-8"))
    src = open_source(tmp_path, SourceOptions(strip_gutenberg="yes"))
    bodies = {d.meta["path"]: d.text for d in src}
    assert len(rows) == 13 == len(bodies) == src.stats.gutenberg_stripped
    for m in rows:
        assert bodies[m["file"]] == m["text"][m["body_start_char"] : m["body_end_char"]], m["file"]


def test_symlink_loops_corrupt_gz_and_duplicate_links_are_skipped_and_named(tmp_path: Path):
    root = write(
        tmp_path / "c", {"real.txt": "real", "sub/x.txt": "x", "zip/ok.txt.gz": gzip.compress(b"gz")}
    )
    (root / "zip" / "bad.txt.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"not deflate data" * 4)
    os.symlink("self", root / "self")  # a link to itself
    os.symlink("b", root / "sub" / "a")  # a -> b -> a
    os.symlink("a", root / "sub" / "b")
    os.symlink("real.txt", root / "link.txt")  # the same file twice
    src = open_source(root, SourceOptions(exclude=["sub/"]))
    assert [(d.meta["path"], d.text) for d in src] == [("real.txt", "real"), ("zip/ok.txt.gz", "gz")]
    st = src.stats
    assert (st.skipped_symlinks, st.skipped_unreadable, st.skipped_duplicates) == (3, 1, 1)
    reasons = {e["path"]: e["reason"] for e in src.skipped}
    assert reasons["self"] == reasons["sub/a"] == reasons["sub/b"] == "symlink loop"
    assert reasons["link.txt"] == "duplicate of real.txt (a symlink to it)"
    assert reasons["zip/bad.txt.gz"].startswith("unreadable: not a valid gzip file")
    assert reasons["sub/x.txt"] == "excluded by --include/--exclude"


def test_corrupt_gz_jsonl_is_skipped_after_its_good_rows(tmp_path: Path):
    good = gzip.compress(b'{"text": "a"}\n{"text": "b"}\n')
    write(tmp_path / "j", {"1.jsonl.gz": good[:-12] + b"\0" * 12, "2.jsonl": '{"text": "c"}\n'})
    src = open_source(tmp_path / "j")
    assert [d.text for d in src][-1] == "c"
    assert src.stats.skipped_unreadable == 1
    assert src.skipped[0]["path"] == "1.jsonl.gz" and "gzip" in src.skipped[0]["reason"]


def test_strict_encoding_check_lists_every_undecodable_file_before_reading(tmp_path: Path):
    root = write(
        tmp_path / "c",
        {
            "a.txt": "fine",
            "b/bad1.c": BAD_UTF8,
            "c/bad2.c": b"x\xe9",
            "d.bin": b"\0\xff",
            "e.jsonl": '{"t": 1}\n',
        },
    )
    src = open_source(root)
    with pytest.raises(
        UserError,
        match=r"2 files in .* are not valid UTF-8: b/bad1\.c \(byte 3\), c/bad2\.c \(byte 1\); "
        r"nothing was tokenized: run again with --encoding replace, skip or latin-1",
    ):
        src.check_encoding()
    open_source(root, SourceOptions(encoding="skip")).check_encoding()  # only strict checks
    src = open_source(root, SourceOptions(encoding="skip"))
    list(src)
    assert [e for e in src.skipped if e["reason"].startswith("not UTF-8")] == [
        {"path": "b/bad1.c", "reason": "not UTF-8 (byte 3), --encoding skip"},
        {"path": "c/bad2.c", "reason": "not UTF-8 (byte 1), --encoding skip"},
    ]


def test_domain_is_first_folder_below_the_common_root(tmp_path: Path):
    root = write(
        tmp_path / "t",
        {"project-1.0/src/a.c": "a", "project-1.0/docs/b.md": "b", "project-1.0/README": "r"},
    )
    assert [(d.meta["path"], d.meta["domain"]) for d in open_source(root)] == [
        ("project-1.0/README", "project-1.0"),
        ("project-1.0/docs/b.md", "project-1.0/docs"),
        ("project-1.0/src/a.c", "project-1.0/src"),
    ]
    assert {d.meta["domain"] for d in open_source(root, SourceOptions(domain_depth=1))} == {"project-1.0"}
    deep = {d.meta["domain"] for d in open_source(root, SourceOptions(domain_depth=3))}
    assert deep == {"project-1.0", "project-1.0/docs", "project-1.0/src"}


def test_path_field_gives_rows_their_own_path_and_domain(tmp_path: Path):
    rows = [{"text": "x", "file": "repo/src/a.py"}, {"text": "y", "file": "repo/tests/t.py"}]
    write(tmp_path, {"code.jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    got = docs(tmp_path / "code.jsonl", path_field="file")
    assert [(m["path"], m["domain"], m["file"], m["row"]) for _, m in got] == [
        ("repo/src/a.py", "repo", "code.jsonl", 0),
        ("repo/tests/t.py", "repo", "code.jsonl", 1),
    ]
    assert [m["domain"] for _, m in docs(tmp_path / "code.jsonl", path_field="file", domain_depth=2)] == [
        "repo/src",
        "repo/tests",
    ]
    with pytest.raises(UserError, match=r"has a field 'path' \(line 1 has: text, file\); pass --path-field"):
        list(open_source(tmp_path / "code.jsonl", SourceOptions(path_field="path")))


@pytest.mark.parametrize("policy", ["strict", "replace", "latin-1", "skip"])
def test_long_files_read_in_chunks_equal_whole_files(tmp_path: Path, policy, monkeypatch):
    import contextlab.data.source_files as sf

    monkeypatch.setattr(sf, "CHUNK_BYTES", 7)  # chunk edges fall inside multi-byte characters
    body = {"ok.txt": "  café — naïve\n" * 40 + " \t", "pad.txt": " \n" * 300}
    if policy != "strict":
        body["bad.txt"] = BAD_UTF8 * 30 + b"\xe2\x82"  # ends inside a truncated sequence
    root = write(tmp_path / "c", body)
    whole = open_source(root, SourceOptions(encoding=policy))
    want = [(d.text, d.meta) for d in whole]
    chunked = open_source(root, SourceOptions(encoding=policy, long_doc_mb=1e-4))
    got = [d for d in chunked]
    assert all(isinstance(d.text, sf.LongText) for d in got)
    assert [("".join(d.text.chunks()), d.meta) for d in got] == want
    assert [len(d.text) for d in got] == [len(t) for t, _ in want]
    assert chunked.stats.as_dict() == whole.stats.as_dict()
    assert chunked.skipped == whole.skipped


def test_a_glob_that_matches_no_file_but_names_a_folder_is_said_with_the_glob_that_takes_it(tmp_path):
    """--exclude tests left every file of the tests/ folders in, unseen (a glob matches files; one
    without '/' a file's name at any depth); an --include that matches nothing is said too."""
    write_tree(
        tmp_path / "src", {"pkg/tests/t.py": "x = 1\n", "tests/u.py": "y = 2\n", "pkg/a.py": "z = 3\n"}
    )
    src = open_source(tmp_path / "src", SourceOptions(exclude=["tests", "*.rs"], include=["*.py", "*.md"]))
    notes = src.pattern_notes()
    assert len(notes) == 2, notes  # '*.rs' excludes what is not there: nothing to say
    assert notes[0].startswith("note: --include '*.md' matched no file")
    assert notes[1].startswith("note: --exclude 'tests' matched no file") and "'**/tests/**'" in notes[1]
    assert len(list(src)) == 3  # as asked: the note changes nothing
    assert "'tests/**' the one at the top" in notes[1]
    fixed = open_source(tmp_path / "src", SourceOptions(exclude=["**/tests/**"]))
    assert [d.meta["path"] for d in fixed] == ["pkg/a.py"] and fixed.pattern_notes() == []
    # only a deeper folder of that name (the stdlib's unittest/test): 'test/**' would take nothing, so
    # it is not offered (a user followed it and excluded none of the test files, with no word)
    write_tree(tmp_path / "lib", {"unittest/test/t.py": "x = 1\n", "unittest/case.py": "y = 2\n"})
    (note,) = open_source(tmp_path / "lib", SourceOptions(exclude=["test"])).pattern_notes()
    assert note.endswith("; 'test' is a folder here, below the top: --exclude '**/test/**' takes it")


def test_a_glob_whose_files_another_glob_or_their_kind_took_is_not_said_to_match_nothing(tmp_path):
    write_tree(tmp_path / "src", {"pkg/tests/t.py": "x = 1\n", "pkg/a.py": "z = 3\n"})
    (tmp_path / "src" / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")
    both = open_source(tmp_path / "src", SourceOptions(exclude=["**/tests/**", "tests"]))
    assert both.pattern_notes() == []  # the folder's files are out already: nothing left to advise
    pngs = open_source(tmp_path / "src", SourceOptions(include=["*.png", "*.py"]))
    assert pngs.pattern_notes() == []  # it matched logo.png, which is skipped as binary
