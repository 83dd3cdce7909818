"""GPT-2 byte-level BPE from local files, encoded by tiktoken.

``GPT2Tokenizer`` loads ``encoder.json`` + ``vocab.bpe`` (OpenAI) or ``vocab.json`` +
``merges.txt`` (HF), checks the vocabulary against the merge list, and saves itself back
in the OpenAI layout. Trade-off: tiktoken is several times faster than HF ``tokenizers``
on the ingest hot path, but only handles byte-level BPE with the GPT-2 regex; anything
else is loaded as ``hf:PATH`` (``contextlab.data.hf_tokenizer``).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from contextlab.data.tokenizer_base import (
    EOT,
    GPT2_PATTERN,
    Tokenizer,
    bytes_to_unicode,
    gpt2_regex_cuts,
    ids_to_array,
    ranks_canonical,
    read_json_file,
    read_text_file,
    tokenizer_threads,
)
from contextlab.errors import UserError
from contextlab.io import atomic_write_text


class GPT2Tokenizer(Tokenizer):
    """Byte-level BPE with the GPT-2 regex, run by tiktoken built from local files."""

    kind = "gpt2"

    def __init__(self, ranks: dict[bytes, int], special_tokens: dict[str, int], name: str = "gpt2") -> None:
        import tiktoken

        self.name = name
        self.ranks = ranks
        self.special_tokens = dict(special_tokens)
        self.special_tokens.setdefault(
            EOT, max([*ranks.values(), *self.special_tokens.values()], default=-1) + 1
        )
        self.vocab_size = max([*ranks.values(), *self.special_tokens.values()]) + 1
        self._enc = tiktoken.Encoding(
            name=f"contextlab-{name}",
            pat_str=GPT2_PATTERN,
            mergeable_ranks=ranks,
            special_tokens=self.special_tokens,
        )

    @classmethod
    def from_dir(cls, directory: str | os.PathLike, name: str = "gpt2") -> GPT2Tokenizer:
        """Load ``encoder.json`` + ``vocab.bpe`` (OpenAI) or ``vocab.json`` + ``merges.txt`` (HF)."""
        d = Path(directory)
        for vocab_file, merges_file in (("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt")):
            if (d / vocab_file).is_file() and (d / merges_file).is_file():
                break
        else:
            raise UserError(
                f"{d} holds neither encoder.json + vocab.bpe nor vocab.json + merges.txt: "
                "point gpt2:DIR at a GPT-2 tokenizer folder"
            )
        vocab = read_json_file(d / vocab_file)
        lines = read_text_file(d / merges_file).split("\n")
        merges = [
            tuple(ln.rstrip("\r").split(" ")) for ln in lines if ln.strip() and not ln.startswith("#version")
        ]
        ranks, specials = _ranks_from_files(vocab, merges, d / merges_file)
        return cls(ranks, specials, name)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        batch = self._enc.encode_ordinary_batch(texts, num_threads=tokenizer_threads())
        return [ids_to_array(ids) for ids in batch]

    def cut_points(self, text: str, size: int) -> list[int]:
        return gpt2_regex_cuts(text, size)

    def _decode(self, ids: np.ndarray) -> str:
        return self._enc.decode(ids.tolist(), errors="replace")

    @functools.cached_property
    def _token_byte_lengths(self) -> np.ndarray:
        lengths = np.zeros(self.vocab_size, np.int64)
        for i in range(self.vocab_size):
            try:
                lengths[i] = len(self._enc.decode_single_token_bytes(i))
            except KeyError:  # an id between the ranks and the specials: no token, no bytes
                pass
        return lengths

    def _canonical(self) -> Iterator[bytes]:
        return ranks_canonical(self.ranks)

    def _save_files(self, d: Path) -> None:
        b2u = bytes_to_unicode()
        show = lambda token: "".join(b2u[b] for b in token)
        vocab = {show(t): r for t, r in self.ranks.items()} | self.special_tokens
        atomic_write_text(d / "encoder.json", json.dumps(dict(sorted(vocab.items(), key=lambda kv: kv[1]))))
        merges = "".join(f"{show(a)} {show(b)}\n" for a, b in _merges_from_ranks(self.ranks))
        atomic_write_text(d / "vocab.bpe", "#version: 0.2\n" + merges)

    def _with_specials(self, new: dict[str, int]) -> GPT2Tokenizer:
        return GPT2Tokenizer(self.ranks, {**self.special_tokens, **new}, self.name)


def _ranks_from_files(
    vocab: Any, merges: list[tuple[str, ...]], where: Path
) -> tuple[dict[bytes, int], dict[str, int]]:
    """Split a GPT-2 vocab into mergeable ranks and special tokens, checking it against the merges."""
    fix = "the files are not a GPT-2-style byte-level BPE; load them with hf:PATH instead"
    u2b = {c: b for b, c in bytes_to_unicode().items()}
    merged = {a + b for a, b in merges}
    ok = isinstance(vocab, dict) and all(type(i) is int for i in vocab.values())
    if not ok or any(len(m) != 2 for m in merges) or any(c not in u2b for t in merged for c in t):
        raise UserError(f"{where}: malformed vocabulary or merge lines: {fix}")
    ranks: dict[bytes, int] = {}
    specials: dict[str, int] = {}
    for token, i in vocab.items():
        if token in merged or (len(token) == 1 and token in u2b):
            ranks[bytes(u2b[c] for c in token)] = i
        else:
            specials[token] = i
    last = -1
    for n, (a, b) in enumerate(merges):
        r = vocab.get(a + b, -1)
        if not (vocab.get(a, r) < r and vocab.get(b, r) < r and r > last):
            raise UserError(f"{where}: merge {n} '{a} {b}' disagrees with the vocabulary ids: {fix}")
        last = r
    ids = [*ranks.values(), *specials.values()]
    if len(ranks) < 256 + len(merges) or len(set(ids)) != len(ids):
        raise UserError(f"{where}: vocabulary lacks single bytes or repeats ids: {fix}")
    return ranks, specials


def _merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Recover the merge list: each token is the merge of the two parts BPE makes with lower ranks."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            splits = [
                i
                for i in range(1, len(token))
                if ranks.get(token[:i], rank) < rank > ranks.get(token[i:], rank)
            ]
            parts = [token[: splits[0]], token[splits[0] :]] if len(splits) == 1 else _bpe(token, ranks, rank)
            if len(parts) != 2:
                raise ValueError(f"token {token!r} (rank {rank}) is not the merge of two lower-ranked tokens")
            merges.append((parts[0], parts[1]))
    return merges


def _bpe(token: bytes, ranks: dict[bytes, int], max_rank: int) -> list[bytes]:
    """Byte-pair-merge ``token`` using only ranks below ``max_rank``."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        pairs = [(ranks.get(parts[i] + parts[i + 1], max_rank), i) for i in range(len(parts) - 1)]
        rank, i = min(pairs)
        if rank >= max_rank:
            break
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts
