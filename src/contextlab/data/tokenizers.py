"""Tokenizers by spec: ``byte``, ``gpt2:DIR``, ``hf:PATH``, ``bpe:N`` or a saved ``dir:DIR``.

One small interface over raw bytes, GPT-2 BPE and Hugging Face ``tokenizers``
(``tokenizer_base``, ``gpt2_tokenizer``, ``hf_tokenizer``); this module turns a spec string
(its grammar and its error line: ``tokenizer_spec``) into one of them, reloads a saved
tokenizer folder against its stored hash, and compares two tokenizer specs. Everything is
offline: GPT-2 is built from local files and new vocabularies are trained locally with
``train_bpe``. Callers import every tokenizer name from here.

Trade-offs:

- GPT-2 runs on tiktoken, not on HF ``tokenizers``: it is several times faster on the
  ingest hot path, but only handles byte-level BPE with the GPT-2 regex. A ``tokenizer.json``
  (including every ``bpe:N``) is also encoded by tiktoken when it is such a BPE and
  tiktoken's rank order provably follows its merge list (see ``hf_tokenizer``); anything
  else keeps HF ``tokenizers``. File, hash and decoding stay HF's either way.
- A saved folder is trusted only when its files hash to the spec it was saved with, so a
  hand-edited vocabulary is caught when it is loaded, not as wrong ids later.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from contextlab.data.gpt2_tokenizer import GPT2Tokenizer
from contextlab.data.hf_tokenizer import PROBE, HFTokenizer, train_bpe
from contextlab.data.tokenizer_base import (
    EOS_NAMES,
    EOT,
    GPT2_PATTERN,
    SPEC_FILE,
    ByteTokenizer,
    Tokenizer,
    read_json_file,
)
from contextlab.data.tokenizer_spec import bad_spec, parse_spec
from contextlab.errors import UserError

__all__ = [
    "EOS_NAMES",
    "EOT",
    "GPT2_PATTERN",
    "PROBE",
    "SPEC_FILE",
    "ByteTokenizer",
    "GPT2Tokenizer",
    "HFTokenizer",
    "Tokenizer",
    "check_same_tokenizer",
    "load_saved_tokenizer",
    "load_tokenizer",
    "train_bpe",
]


def load_tokenizer(spec: str, *, texts: Callable[[], Iterable[str]] | None = None) -> Tokenizer:
    """Build a tokenizer from a spec: byte, gpt2:DIR, hf:PATH, bpe:N (trains on ``texts()``), dir:DIR or
    store:STORE (that token store's); a bad spec is ``bad_spec``'s one line."""
    parsed = parse_spec(spec, check_path=True)
    try:
        if parsed.kind == "byte":
            return ByteTokenizer()
        if parsed.kind == "bpe":
            return _train_from_spec(parsed.arg, texts)
        if parsed.kind == "gpt2":
            return GPT2Tokenizer.from_dir(parsed.path)
        if parsed.kind == "hf":
            return HFTokenizer.from_file(parsed.path)
        if parsed.kind == "store":  # the tokenizer of that token store, as ingest reads it
            from contextlab.data.store import TokenStore

            return TokenStore(parsed.arg).tokenizer()
        return load_saved_tokenizer(parsed.path)
    except _NotTheSpec as e:  # the spec was fine; its training texts were not (an empty corpus)
        raise UserError(str(e)) from None
    except UserError as e:
        raise bad_spec(spec, str(e)) from None


class _NotTheSpec(UserError):
    """A problem with what a valid spec was given to read, not with the spec."""


def _checked_texts(texts: Iterable[str]) -> Iterator[str]:
    try:
        yield from texts
    except UserError as e:
        raise _NotTheSpec(str(e)) from None


def _train_from_spec(arg: str, texts: Callable[[], Iterable[str]] | None) -> Tokenizer:
    if texts is None:
        raise UserError(
            "bpe:N trains a new tokenizer and needs training texts, which this command does not have"
        )
    return train_bpe(_checked_texts(texts()), int(arg))


def load_saved_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """Reload a folder written by ``Tokenizer.save``, checking the files against the stored hash."""
    d = Path(directory)
    spec = read_json_file(d / SPEC_FILE)
    specials = spec.get("special_tokens") if isinstance(spec, dict) else None
    if not isinstance(specials, dict) or not all(type(i) is int for i in specials.values()):
        raise UserError(
            f"{d / SPEC_FILE} is malformed (no special_tokens map): re-create the folder with save()"
        )
    kind, name = spec.get("kind"), str(spec.get("name", spec.get("kind")))
    tok: Tokenizer
    if kind == "byte":
        tok = ByteTokenizer(specials)
    elif kind == "gpt2":
        tok = GPT2Tokenizer.from_dir(d, name=name)
    elif kind == "hf":
        tok = HFTokenizer.from_file(d / "tokenizer.json", name=name)
    else:
        raise UserError(
            f"{d / SPEC_FILE} has unknown tokenizer kind {kind!r}: re-create the folder with save()"
        )
    if spec.get("hash") == tok.legacy_hash != tok.hash:
        # Saved by an earlier version, whose hash covered the whole tokenizer.json: accepted, and
        # the tokenizer keeps that recorded hash as its identity, so the stores, runs and
        # checkpoints that recorded it still match it (``check_same_tokenizer`` also matches
        # it against new specs through their ``legacy_hash``).
        tok.__dict__["hash"] = tok.legacy_hash
    if tok.hash != spec.get("hash"):
        raise UserError(
            f"tokenizer files in {d} do not match their spec (hash {tok.hash[:8]} != "
            f"{str(spec.get('hash'))[:8]}); re-create the folder by saving the original tokenizer again"
        )
    return tok


def check_same_tokenizer(
    a_spec: dict[str, Any], b_spec: dict[str, Any], what_a: str, what_b: str, *, fix: str | None = None
) -> None:
    """Raise UserError naming both tokenizers if the two specs' hashes differ.

    A spec written by an earlier version holds only the old whole-file hash; it matches a new
    spec whose ``legacy_hash`` is that hash (the same tokenizer.json, so the same ids).
    """
    a_hash, b_hash = str(a_spec.get("hash")), str(b_spec.get("hash"))
    if same_tokenizer(a_spec, b_spec):
        return
    fix = fix or (
        f"rebuild {what_b} with {what_a}'s tokenizer (--tokenizer store:<a store made with it>, "
        "dir:<its saved tokenizer folder> or hf:<its Hugging Face folder>) or pair items made with the "
        "same tokenizer"
    )
    raise UserError(
        f"{what_a}'s tokenizer ({a_spec.get('name')}, hash {a_hash[:8]}) differs from "
        f"{what_b}'s ({b_spec.get('name')}, hash {b_hash[:8]}): {fix}"
    )


def same_tokenizer(a_spec: dict[str, Any], b_spec: dict[str, Any]) -> bool:
    """Whether two specs name the same tokenizer (a hash, an earlier version's hash, or the hash of the
    tokenizers that encode alike, in common)."""
    return bool(_hashes(a_spec) & _hashes(b_spec))


def _hashes(spec: dict[str, Any]) -> set[str]:
    return {str(spec[k]) for k in ("hash", "legacy_hash", "ids_hash") if spec.get(k)}
