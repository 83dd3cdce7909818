"""``profile --data`` that names nothing, or an export for other trainers, is one line naming what to
give (a missing path was called text; an export folder was read as text and refused for having no
files, naming --include/--exclude, which profile has not)."""

from __future__ import annotations

from contextlab.cli import main


def test_missing_data_and_an_export_folder_are_named(tmp_path, capsys):
    argv = ["profile", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "p"), "--data"]
    assert main([*argv, str(tmp_path / "nope")]) == 2
    assert f"--data {tmp_path / 'nope'} not found: give a token store, or text" in capsys.readouterr().err
    export = tmp_path / "pq"
    export.mkdir()
    (export / "export.json").write_text('{"format": "contextlab-export"}')
    (export / "train-00000-of-00001.parquet").write_bytes(b"PAR1")
    assert main([*argv, str(export)]) == 2
    assert "is an export of a packed store for other trainers, not text or a token store" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "p").exists()


def test_a_folder_of_notes_and_records_only_is_no_text_to_profile(tmp_path):
    """Such a folder was refused naming --include/--exclude, which profile has not."""
    import pytest

    from contextlab.errors import UserError
    from contextlab.profile.data import prose_source

    (tmp_path / "README.md").write_text("about the data")
    (tmp_path / "kv.jsonl").write_text('{"key": "a"}\n')
    with pytest.raises(UserError, match=r"holds no text to profile: its files are a corpus's notes or files"):
        prose_source(tmp_path)
    (tmp_path / "text.txt").write_text("words " * 50)
    assert prose_source(tmp_path, say=False).exclude  # text beside them: they are left out, it is read
