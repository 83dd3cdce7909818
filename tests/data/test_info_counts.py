"""Tests for contextlab.data.stats: the summary ``contextlab data info`` prints, on tiny stores."""

from __future__ import annotations

import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.sources import SourceOptions
from contextlab.data.stats import format_summary, store_summary
from tests.conftest import write_tree

GUTENBERG_TOY = (
    "The Project Gutenberg EBook of Toy\n\n"
    "*** START OF THE PROJECT GUTENBERG EBOOK TOY ***\n"
    "Chapter 1\nBody.\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK TOY ***\nlicense\n"
)


def summary_lines(store) -> dict[str, str]:
    """The summary's lines by their label (the first word)."""
    return {line.split()[0]: line for line in format_summary(store_summary(store)).splitlines()}


def test_stripped_gutenberg_books_are_not_called_skipped(tmp_path):
    write_tree(tmp_path / "g", {"toy.txt": GUTENBERG_TOY, "plain.txt": "no markers"})
    store = ingest(tmp_path / "g", tmp_path / "s", progress=False).store
    assert store.n_docs == 2 and store.meta["source_stats"]["gutenberg_stripped"] == 1
    lines = summary_lines(store)
    assert "skipped" not in lines
    assert lines["stripped"] == (
        "stripped   gutenberg_stripped=1  (Project Gutenberg header and footer cut; the documents are kept)"
    )


def test_an_undecodable_jsonl_row_is_a_row_not_a_file(tmp_path):
    (tmp_path / "bad.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "bad \xff byte"}\n')
    cfg = IngestConfig(source=SourceOptions(encoding="replace"))
    store = ingest(tmp_path / "bad.jsonl", tmp_path / "s", cfg, progress=False).store
    stats = store.meta["source_stats"]
    assert (stats["undecodable_rows"], stats["undecodable_files"], stats["undecodable_bytes"]) == (1, 0, 1)
    assert summary_lines(store)["not"] == (
        "not UTF-8  undecodable_bytes=1  undecodable_rows=1  "
        "(--encoding replace: kept, the bad bytes stored as U+FFFD)"
    )
    latin = IngestConfig(source=SourceOptions(encoding="latin-1"))
    stats = ingest(tmp_path / "bad.jsonl", tmp_path / "l", latin, progress=False).store.meta["source_stats"]
    assert (stats["latin1_rows"], stats["latin1_files"]) == (1, 0)


def test_min_chars_and_min_tokens_counts_are_both_shown(tmp_path, capsys):
    from contextlab.cli.data import _print_ingest_report

    write_tree(tmp_path / "c", {"a.txt": "a", "b.txt": "abc", "c.txt": "long enough"})
    cfg = IngestConfig(min_tokens=5, source=SourceOptions(min_chars=2))
    report = ingest(tmp_path / "c", tmp_path / "s", cfg, progress=False)
    assert summary_lines(report.store)["skipped"] == "skipped    skipped_short=1  fewer_than_min_tokens=1"
    capsys.readouterr()
    _print_ingest_report(report)  # what `contextlab data ingest` prints under its first line
    assert capsys.readouterr().out.splitlines()[1] == "  skipped (short): 1, fewer than --min-tokens: 1"


def test_the_length_histogram_starts_at_the_shortest_document(tmp_path, monkeypatch):
    """A user's histogram of documents of 2,619+ tokens started at 1 token: 70% of its width empty."""
    from contextlab import figures
    from contextlab.data import stats

    write_tree(tmp_path / "src", {f"d{i}.txt": "x" * (3000 + 500 * i) for i in range(5)})
    store = ingest(tmp_path / "src", tmp_path / "st", IngestConfig(tokenizer="byte"), progress=False).store
    figs = []
    monkeypatch.setattr(figures, "save_png", lambda fig, out, dpi=0: figs.append(fig) or out)
    stats.plot_length_histogram(store, tmp_path / "h.png")
    ax = figs[0].axes[0]
    edges = [p.get_x() for p in ax.patches]
    assert 2500 < min(edges) <= 3000 and sum(p.get_height() for p in ax.patches) == 5
    figures.pyplot().close(figs[0])


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2"])
def test_an_ingest_of_crlf_text_says_its_carriage_returns_are_tokens(tmp_path, capsys, tokenizer):
    """Project Gutenberg's files keep CRLF line ends, byte for byte: 7% of a user's GPT-2 tokens were
    carriage returns, which the prompt tasks (LF) never show the model, and nothing said so."""
    from contextlab.cli import main
    from tests.conftest import GPT2_DIR, shakespeare

    spec = "byte" if tokenizer == "byte" else f"gpt2:{GPT2_DIR}"
    text = shakespeare(5_000)
    (tmp_path / "crlf").mkdir()
    (tmp_path / "crlf" / "a.txt").write_bytes(text.replace("\n", "\r\n").encode())
    (tmp_path / "lf").mkdir()
    (tmp_path / "lf" / "a.txt").write_bytes(text.encode())
    assert (
        main(["data", "ingest", str(tmp_path / "crlf"), "--tokenizer", spec, "--out", str(tmp_path / "s1")])
        == 0
    )
    said = capsys.readouterr().out
    note = next(line for line in said.splitlines() if "carriage returns" in line)
    share = text.count("\n") / (len(text) + text.count("\n")) if tokenizer == "byte" else None
    assert note.startswith(f"  note: {share:.1%} of the tokens" if share else "  note: ")
    assert "the prompt tasks (niah, kv, passkey, vartrack) write LF" in note
    assert (
        main(["data", "ingest", str(tmp_path / "lf"), "--tokenizer", spec, "--out", str(tmp_path / "s2")])
        == 0
    )
    assert "carriage returns" not in capsys.readouterr().out
