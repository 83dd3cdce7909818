"""--doc-start: one text file cut into documents at the lines that open them, byte for byte."""

from __future__ import annotations

import random
import re

import pytest

from contextlab.data.doc_split import compile_doc_start, cut_text
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.sources import SourceOptions, fingerprint_options, open_source
from contextlab.errors import UserError
from tests.conftest import write_tree

WIKI = (
    " = Alpha = \n"
    " Alpha is a letter . \n"
    " = = History = = \n"  # a section heading, not an article: stays inside
    " It came first . \n"
    " = Beta = \n"
    " Beta follows . \n"
)
ARTICLE = r" = [^=].* = $"


def _reference(text: str, rx: re.Pattern) -> list[str]:
    """Cut points found line by line in the plainest way, for comparison."""
    starts, offset = [], 0
    for i, line in enumerate(text.split("\n")):
        if i and rx.match(line[:-1] if line.endswith("\r") else line):
            starts.append(offset)
        offset += len(line) + 1
    bounds = [0, *starts, len(text)]
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    if len(pieces) > 1 and not pieces[0].strip():
        pieces[:2] = [pieces[0] + pieces[1]]
    return pieces


def test_articles_are_cut_before_their_title_lines():
    docs = list(cut_text([WIKI], re.compile(ARTICLE)))
    assert docs == [
        " = Alpha = \n Alpha is a letter . \n = = History = = \n It came first . \n",
        " = Beta = \n Beta follows . \n",
    ]
    assert "".join(docs) == WIKI


def test_preface_crlf_last_line_and_blank_head():
    rx = re.compile(r"CHAPTER \d+$")
    text = "Preface.\r\nCHAPTER 1\r\none\r\nCHAPTER 2 of 3\r\ntwo\r\nCHAPTER 3"
    # "$" is the line's end in a CRLF file; "CHAPTER 2 of 3" does not match; a last line with no end does
    assert list(cut_text([text], rx)) == [
        "Preface.\r\n",
        "CHAPTER 1\r\none\r\nCHAPTER 2 of 3\r\ntwo\r\n",
        "CHAPTER 3",
    ]
    # a blank text before the first opening line goes with the first document, not one of its own
    assert list(cut_text(["\n\nCHAPTER 1\nx\nCHAPTER 2\ny"], rx)) == ["\n\nCHAPTER 1\nx\n", "CHAPTER 2\ny"]
    assert list(cut_text(["no match\nat all\n"], rx)) == ["no match\nat all\n"]
    assert list(cut_text([""], rx)) == [""]


def test_a_pattern_anchored_with_a_caret_opens_documents_after_the_first_line():
    """'^CHAPTER ' (the form the empty-match error line itself suggests) cut nothing: the pattern is matched
    from each line's first character, where ``^`` holds only with re.MULTILINE. Also through chunks and
    with ``$`` at a CRLF line's end."""
    rx = compile_doc_start(r"^CHAPTER [IVX]+$")
    text = "Preface.\r\nCHAPTER I\r\none\r\nCHAPTER II\r\ntwo, not CHAPTER III\r\n"
    want = ["Preface.\r\n", "CHAPTER I\r\none\r\n", "CHAPTER II\r\ntwo, not CHAPTER III\r\n"]
    assert list(cut_text([text], rx)) == want
    assert list(cut_text([text[i : i + 5] for i in range(0, len(text), 5)], rx)) == want
    assert list(cut_text([WIKI], compile_doc_start(r"^ = [^=]"))) == list(
        cut_text([WIKI], re.compile(ARTICLE))
    )


def test_chunked_text_is_cut_exactly_as_the_whole_one():
    rng = random.Random(0)
    rx = re.compile("A")
    for _ in range(2000):
        text = "".join(rng.choice("AB\n\r ") for _ in range(rng.randint(0, 24)))
        want = _reference(text, rx)
        for size in (1, 2, 3, 64):
            chunks = [text[i : i + size] for i in range(0, len(text), size)]
            assert list(cut_text(chunks, rx)) == want, (text, size)


def test_bad_patterns_are_one_line():
    with pytest.raises(UserError, match=r"not a regular expression .*Python's re syntax"):
        compile_doc_start("(unclosed")
    with pytest.raises(UserError, match="matches an empty line"):
        SourceOptions(doc_start="(CHAPTER)?")
    with pytest.raises(UserError, match="empty"):
        compile_doc_start("")


def test_folder_files_are_cut_with_ids_sections_and_counts(tmp_path):
    root = write_tree(
        tmp_path / "c",
        {"a/wiki.txt": WIKI, "b/plain.txt": "no title here\n", "b/heads.txt": " = Only = \n\n"},
    )
    src = open_source(root, SourceOptions(doc_start=ARTICLE))
    docs = list(src)
    assert [(d.meta["id"], d.meta["path"], d.meta["section"], d.meta["domain"]) for d in docs] == [
        ("a/wiki.txt#0", "a/wiki.txt", 0, "a/wiki.txt"),  # a file's sections share it as their domain
        ("a/wiki.txt#1", "a/wiki.txt", 1, "a/wiki.txt"),
        ("b/heads.txt#0", "b/heads.txt", 0, "b/heads.txt"),
        ("b/plain.txt#0", "b/plain.txt", 0, "b/plain.txt"),
    ]
    by_folder = open_source(root, SourceOptions(doc_start=ARTICLE, domain_depth=1))
    assert [d.meta["domain"] for d in by_folder] == ["a", "a", "b", "b"]  # asked for: the folders
    assert "".join(d.text for d in docs[:2]) == WIKI
    assert (src.stats.doc_start_cut, src.stats.doc_start_uncut, src.stats.documents) == (1, 2, 4)
    # without the option nothing changes: one document per file, no section, ids as before
    plain = list(open_source(root))
    assert [d.meta["id"] for d in plain] == ["a/wiki.txt", "b/heads.txt", "b/plain.txt"]
    assert all("section" not in d.meta for d in plain)
    # stores made before the option existed keep their fingerprint
    assert "doc_start" not in fingerprint_options(SourceOptions())
    assert fingerprint_options(SourceOptions(doc_start=ARTICLE))["doc_start"] == ARTICLE


def test_empty_sections_are_skipped_and_named(tmp_path):
    root = write_tree(tmp_path / "c", {"x.txt": "intro\n = A = \n = B = \ntext\n"})
    src = open_source(root, SourceOptions(doc_start=ARTICLE, min_chars=8))
    assert [d.text for d in src] == [" = B = \ntext\n"]
    assert src.skipped == [
        {"path": "x.txt", "reason": "shorter than --min-chars 8", "section": 0},
        {"path": "x.txt", "reason": "shorter than --min-chars 8", "section": 1},
    ]


def test_gutenberg_header_and_footer_are_cut_before_the_chapters(tmp_path):
    book = (
        "The Project Gutenberg EBook of Toy\r\n\r\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK TOY ***\r\n"
        "\r\nCHAPTER I\r\nOne.\r\n\r\nCHAPTER II\r\nTwo.\r\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK TOY ***\r\nlicense CHAPTER\r\n"
    )
    root = write_tree(tmp_path / "g", {"toy.txt": book})
    src = open_source(root, SourceOptions(doc_start=r"CHAPTER [IVX]+$", strip_gutenberg="yes"))
    assert [d.text for d in src] == ["\r\nCHAPTER I\r\nOne.\r\n\r\n", "CHAPTER II\r\nTwo.\r\n"]
    assert src.stats.gutenberg_stripped == 1


def test_a_streamed_long_file_is_cut_like_a_read_one(tmp_path, monkeypatch):
    import contextlab.data.source_files as sf

    monkeypatch.setattr(sf, "CHUNK_BYTES", 5)  # chunk edges inside lines and multi-byte characters
    root = write_tree(tmp_path / "c", {"w.txt": WIKI.replace("letter", "lettré") * 3})
    whole = [(d.text, d.meta) for d in open_source(root, SourceOptions(doc_start=ARTICLE))]
    streamed = open_source(root, SourceOptions(doc_start=ARTICLE, long_doc_mb=1e-6))
    assert [(d.text, d.meta) for d in streamed] == whole and len(whole) == 6


def test_row_sources_refuse_it(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "a"}\n', encoding="utf-8")
    with pytest.raises(UserError, match="--doc-start cuts text files.*leave --doc-start out"):
        open_source(path, SourceOptions(doc_start="x"))


def test_store_holds_each_section_as_a_document(tmp_path):
    path = tmp_path / "wiki.raw"
    path.write_bytes(WIKI.encode("utf-8"))
    cfg = IngestConfig(tokenizer="byte", source=SourceOptions(doc_start=ARTICLE))
    store = ingest(path, tmp_path / "s", cfg, progress=False).store
    assert store.n_docs == 2
    docs = list(cut_text([WIKI], re.compile(ARTICLE)))
    assert [bytes(store.doc(i).tolist()).decode("utf-8") for i in range(2)] == docs
    assert [m["id"] for m in store.docs_meta()] == ["wiki.raw#0", "wiki.raw#1"]
    assert store.meta["source_stats"]["doc_start_cut"] == 1
    from contextlab.data.stats import format_summary, store_summary

    cut = [line for line in format_summary(store_summary(store)).splitlines() if line.startswith("cut")]
    assert cut == [
        "cut        doc_start_cut=1  doc_start_uncut=0  (files cut into documents at the lines matching "
        f"--doc-start {ARTICLE!r}, and files left whole)"
    ]


def test_cli_names_what_it_cut_and_warns_when_nothing_matched(tmp_path):
    from tests.test_cli import run_cli

    path = tmp_path / "wiki.raw"
    path.write_bytes(WIKI.encode("utf-8"))
    done = run_cli(
        "data", "ingest", str(path), "--doc-start", ARTICLE, "--out", str(tmp_path / "s"), "--no-progress"
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and "2 documents" in done.stdout
    assert "--doc-start cut 1 of 1 text file into documents" in done.stdout and "warning" not in done.stderr
    miss = run_cli(
        "data", "ingest", str(path), "--doc-start", "CHAPTER", "--out", str(tmp_path / "m"), "--no-progress"
    )
    assert miss.returncode == 0 and "1 document," in miss.stdout
    assert "warning: --doc-start 'CHAPTER' matched no line" in miss.stderr
    bad = run_cli("data", "ingest", str(path), "--doc-start", "(", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "--doc-start '(' is not a regular expression" in bad.stderr
    assert not (tmp_path / "b").exists()


def test_a_large_single_file_is_told_about_doc_start(tmp_path):
    from contextlab.data.sources import ONE_DOC_NOTE

    big = tmp_path / "wiki.raw"
    big.write_text(WIKI * (ONE_DOC_NOTE // len(WIKI) + 1), encoding="utf-8")
    note = open_source(big).one_document_note()
    assert note.startswith(f"note: {big} is one file, so it is one document;") and "--doc-start REGEX" in note
    assert open_source(big, SourceOptions(doc_start=ARTICLE)).one_document_note() is None
    small = tmp_path / "small.txt"
    small.write_text(WIKI, encoding="utf-8")
    assert open_source(small).one_document_note() is None  # a note only where it can matter
    assert open_source(write_tree(tmp_path / "f", {"a.txt": WIKI})).one_document_note() is None


def test_a_caller_with_its_own_options_can_keep_the_notes_of_data_ingest_to_itself(tmp_path, capsys):
    from contextlab.data.sources import ONE_DOC_NOTE

    big = tmp_path / "wiki.raw"
    big.write_text(WIKI * (ONE_DOC_NOTE // len(WIKI) + 1), encoding="utf-8")
    ingest(big, tmp_path / "quiet", IngestConfig(), progress=False, notes=False)
    assert "note:" not in capsys.readouterr().out  # profile and the quickstart say their own
    ingest(big, tmp_path / "said", IngestConfig(), progress=False)
    assert "is one file, so it is one document" in capsys.readouterr().out
