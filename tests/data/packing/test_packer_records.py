"""The packing methods and retrievers are one record each: the config, the shards and the command
line all read ``PACKERS`` / ``RETRIEVERS``, so a record is all a new method needs."""

from __future__ import annotations

import pytest

from contextlab.cli.pack import cmd_pack
from contextlab.data.packing import PACKERS, RETRIEVERS, PackConfig, Packer, RetrieverKind, pack
from contextlab.data.packing import methods as methods_mod
from contextlab.data.packing.example import pack_ep
from contextlab.errors import UserError
from tests.data.packing.helpers import make_store, mixed_corpus


def test_every_record_is_a_valid_choice_and_nothing_else_is():
    assert list(PACKERS) == ["ep", "ep-domain", "splice", "icp"]
    assert list(RETRIEVERS) == ["bm25", "dense", "repo"]
    for name, packer in PACKERS.items():
        assert isinstance(packer, Packer) and callable(packer.fill) and packer.help
        cfg = PackConfig(method=name)
        assert cfg.uses_retriever == packer.retrieves
    for name, kind in RETRIEVERS.items():
        assert isinstance(kind, RetrieverKind) and callable(kind.build) and kind.help
        assert PackConfig(method="splice", retriever=name).retriever == name
    with pytest.raises(
        UserError, match="unknown packing method 'zigzag'; use one of: ep, ep-domain, splice, icp"
    ):
        PackConfig(method="zigzag")
    with pytest.raises(UserError, match="unknown retriever 'grep'; use one of: bm25, dense, repo"):
        PackConfig(retriever="grep")
    assert not PackConfig(method="splice", noise=1.0).uses_retriever  # every retrieved one replaced


def test_the_command_line_lists_every_record(capsys):
    with pytest.raises(SystemExit):
        cmd_pack(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, packer in PACKERS.items():
        assert f"{name} ({packer.help})" in text
    for name, kind in RETRIEVERS.items():
        assert f"{name} ({kind.help})" in text
    assert "with one of the methods ep, ep-domain, splice, icp" in text


def test_a_new_record_is_all_a_new_method_needs(tmp_path, monkeypatch):
    """A method added to PACKERS is accepted by the config and run by the shards, with its flags."""
    calls = []

    def recorded_ep(seq, retriever, cfg):
        calls.append((retriever, seq.order))
        pack_ep(seq, retriever, cfg)

    monkeypatch.setitem(PACKERS, "ep-test", Packer(recorded_ep, "ep, recorded", ordered=False))
    assert methods_mod.PACKERS is PACKERS
    store = make_store(tmp_path, mixed_corpus(12))
    cfg = PackConfig(method="ep-test", context=63, order="reverse")
    new = pack(store, tmp_path / "new", cfg, progress=False).packed
    assert calls == [(None, "identity")]  # no retriever, and its own order (ordered=False)
    ep = pack(store, tmp_path / "ep", PackConfig(method="ep", context=63), progress=False).packed
    assert new.n_sequences == ep.n_sequences
    assert all((new.sequence_entries(i) == ep.sequence_entries(i)).all() for i in range(ep.n_sequences))
