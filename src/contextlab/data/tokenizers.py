"""Tokenizers: one small interface over raw bytes, GPT-2 BPE and Hugging Face `tokenizers`.

Every tokenizer maps text to ids and back, names its special tokens (``<|endoftext|>`` is
the document separator) and knows its identity as a content hash. Everything is offline:
GPT-2 is built from local ``encoder.json`` + ``vocab.bpe`` (or ``vocab.json`` +
``merges.txt``) and new vocabularies are trained locally with ``train_bpe``.

Trade-offs:

- GPT-2 runs on tiktoken, not on HF ``tokenizers``: it is several times faster on the
  ingest hot path, but only handles byte-level BPE with the GPT-2 regex. A ``tokenizer.json``
  (including every ``bpe:N``) is also encoded by tiktoken when it is such a BPE and tiktoken's
  rank order provably follows its merge list (every merge is checked at load, then both
  engines encode a probe text; see ``contextlab.data.hf_tokenizer``); anything else keeps HF
  ``tokenizers`` (``HFTokenizer.engine`` and ``engine_reason`` say which and why). File, hash and decoding stay HF's either way.
- Identity is a sha256 of a canonical description of the content (ranks, special tokens,
  canonical JSON), never a name or path: renaming a folder or re-saving a file keeps the
  hash, while changing one merge or adding one special token changes it. Stores and models
  compare hashes before they are used together.
- ``encode`` never parses special-token strings in text: a document that happens to
  contain ``<|endoftext|>`` cannot forge a document boundary. Special tokens are inserted
  as ids by the code that needs them.
- ``encode_batch`` returns one uint32 array per text and leaves threading to the library
  (tiktoken's thread pool, rayon in HF); the cost is one copy of the ids per text.
"""

from __future__ import annotations

import array
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_text

EOT = "<|endoftext|>"
SPEC_FILE = "tokenizer_spec.json"
VALID_SPECS = "byte, gpt2:DIR, hf:PATH (tokenizer.json or its folder), bpe:N, dir:DIR (a saved tokenizer)"
# The GPT-2 pre-tokenizer regex (contractions, letters, digits, other, whitespace).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOS_NAMES = (EOT, "</s>", "<eos>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|end|>")
N_THREADS = os.cpu_count() or 1


class Tokenizer:
    """Base class: text <-> ids, special tokens, a content hash and save/load."""

    kind: str = ""
    name: str = ""
    vocab_size: int = 0
    special_tokens: dict[str, int]

    @property
    def eot_id(self) -> int | None:
        """Id of the document separator: ``<|endoftext|>`` or the first eos-like special."""
        return next((self.special_tokens[n] for n in EOS_NAMES if n in self.special_tokens), None)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; special-token strings in it are encoded as plain text."""
        raise NotImplementedError

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """One uint32 id array per text, encoded with the backend's own threads."""
        raise NotImplementedError

    def cut_points(self, text: str, size: int) -> list[int]:
        """Positions, about ``size`` characters apart, where ``text`` may be cut without changing its ids.

        Encoding the pieces and concatenating the ids gives exactly the ids of the whole
        text. The base class knows no such positions (an arbitrary HF pre-tokenizer or
        normalizer may look across any cut), so it returns none.
        """
        return []

    def encode_pieces(self, texts: list[str], piece_chars: int) -> list[np.ndarray]:
        """``encode_batch`` with long texts cut at ``cut_points`` first.

        The pieces of all texts go to the backend as one batch, so a single long document
        keeps every core busy and no piece larger than about ``piece_chars`` is encoded at
        once (the per-token Python lists a backend returns cost ~36 bytes a token).
        """
        pieces: list[str] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            cuts = self.cut_points(text, piece_chars) if len(text) > piece_chars else []
            for a, b in zip([0, *cuts], [*cuts, len(text)]):
                pieces.append(text[a:b])
                owner.append(i)
        ids = self.encode_batch(pieces)
        del pieces
        out: list[list[np.ndarray]] = [[] for _ in texts]
        for i, arr in zip(owner, ids):
            out[i].append(arr)
        return [parts[0] if len(parts) == 1 else np.concatenate(parts) for parts in out]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of ``ids`` (a list or an array); special tokens appear as their names."""
        arr = np.asarray(ids, dtype=np.int64).ravel()
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            bad = int(arr[(arr < 0) | (arr >= self.vocab_size)][0])
            raise ValueError(f"token id {bad} is outside 0..{self.vocab_size - 1} of tokenizer {self.name}")
        return self._decode(arr)

    def _decode(self, ids: np.ndarray) -> str:
        raise NotImplementedError

    @functools.cached_property
    def hash(self) -> str:
        """sha256 hex of the canonical content: equal hashes encode identically."""
        h = hashlib.sha256(f"kind={self.kind}\n".encode())
        h.update(json.dumps(sorted(self.special_tokens.items())).encode())
        for chunk in self._canonical():
            h.update(chunk)
        return h.hexdigest()

    def _canonical(self) -> Iterator[bytes]:
        return iter(())

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable description: kind, name, vocab size, eot id, specials, hash."""
        return {
            "kind": self.kind,
            "name": self.name,
            "vocab_size": self.vocab_size,
            "eot_id": self.eot_id,
            "special_tokens": dict(self.special_tokens),
            "hash": self.hash,
        }

    def save(self, directory: str | os.PathLike) -> None:
        """Write the files to reload this tokenizer into ``directory`` (spec file last)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self._save_files(d)
        atomic_write_json(d / SPEC_FILE, self.spec())

    def _save_files(self, d: Path) -> None:
        pass

    def with_special_tokens(self, names: list[str]) -> Tokenizer:
        """A copy with ``names`` added as special tokens after the vocabulary (present names keep their id)."""
        new: dict[str, int] = {}
        for name in names:
            if name not in self.special_tokens and name not in new:
                new[name] = self.vocab_size + len(new)
        return self._with_specials(new) if new else self

    def _with_specials(self, new: dict[str, int]) -> Tokenizer:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, vocab_size={self.vocab_size}, hash={self.hash[:8]})"
        )


class ByteTokenizer(Tokenizer):
    """Ids 0..255 are the UTF-8 bytes; ``<|endoftext|>`` is 256. Needs no files."""

    kind = "byte"
    name = "byte"

    def __init__(self, special_tokens: dict[str, int] | None = None) -> None:
        self.special_tokens = dict(special_tokens) if special_tokens else {EOT: 256}
        self.vocab_size = max(self.special_tokens.values()) + 1

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), np.uint8).astype(np.uint32) for t in texts]

    def cut_points(self, text: str, size: int) -> list[int]:
        return list(range(size, len(text), size))  # bytes of a character never span a cut

    def _decode(self, ids: np.ndarray) -> str:
        names = {i: n.encode("utf-8") for n, i in self.special_tokens.items()}
        parts, start = [], 0
        for pos in np.flatnonzero(ids >= 256):
            parts += [ids[start:pos].astype(np.uint8).tobytes(), names.get(int(ids[pos]), b"")]
            start = pos + 1
        parts.append(ids[start:].astype(np.uint8).tobytes())
        return b"".join(parts).decode("utf-8", errors="replace")

    def _with_specials(self, new: dict[str, int]) -> ByteTokenizer:
        return ByteTokenizer({**self.special_tokens, **new})


def gpt2_regex_cuts(text: str, size: int) -> list[int]:
    """Cut points for ``GPT2_PATTERN`` tokenizers: a space (U+0020) right after a non-space.

    No alternative of the pattern matches a non-space followed by a space (spaces only
    lead a piece or fill a whitespace run), so a regex piece always starts at such a
    space; and the pattern has no look-behind, so the pieces found from there on do not
    depend on the text before it. BPE merges never cross regex pieces, so the ids of the
    two sides concatenate to the ids of the whole. ``str.isspace`` accepts every Unicode
    White_Space character (and a few more), so "not isspace" is the safe side of ``\\s``.
    """
    cuts: list[int] = []
    start, n = 0, len(text)
    while n - start > size:
        i = start + size
        while True:
            i = text.rfind(" ", start + 1, i + 1)
            if i <= start or not text[i - 1].isspace():
                break
            i -= 1
        if i <= start:  # no cut point in the last `size` characters: look further on
            i = start + size
            while True:
                i = text.find(" ", i)
                if i < 0 or not text[i - 1].isspace():
                    break
                i += 1
            if i < 0:
                break
        cuts.append(i)
        start = i
    return cuts


def _to_array(ids: list[int]) -> np.ndarray:
    """list -> uint32 array via array.array: 2.4x faster than np.array on a list of ints."""
    return np.frombuffer(array.array("I", ids), dtype=np.uint32)


@functools.cache
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map used by encoder.json/vocab.json and merges."""
    keep = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    out = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in out):
        out[b] = chr(256 + n)
    return out


# str.translate table undoing that map: token.translate(_BYTE_CHARS).encode("latin-1") is its bytes.
_BYTE_CHARS = {ord(c): chr(b) for b, c in _bytes_to_unicode().items()}


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
        vocab = _read_json(d / vocab_file)
        lines = _read_text(d / merges_file).split("\n")
        merges = [
            tuple(ln.rstrip("\r").split(" ")) for ln in lines if ln.strip() and not ln.startswith("#version")
        ]
        ranks, specials = _ranks_from_files(vocab, merges, d / merges_file)
        return cls(ranks, specials, name)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [_to_array(ids) for ids in self._enc.encode_ordinary_batch(texts, num_threads=N_THREADS)]

    def cut_points(self, text: str, size: int) -> list[int]:
        return gpt2_regex_cuts(text, size)

    def _decode(self, ids: np.ndarray) -> str:
        return self._enc.decode(ids.tolist(), errors="replace")

    def _canonical(self) -> Iterator[bytes]:
        yield f"pattern={GPT2_PATTERN}\n".encode()
        for token, rank in sorted(self.ranks.items()):
            yield b"%s %d\n" % (token.hex().encode(), rank)

    def _save_files(self, d: Path) -> None:
        b2u = _bytes_to_unicode()
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
    u2b = {c: b for b, c in _bytes_to_unicode().items()}
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


def load_tokenizer(spec: str, *, texts: Callable[[], Iterable[str]] | None = None) -> Tokenizer:
    """Build a tokenizer from a spec: byte, gpt2:DIR, hf:PATH, bpe:N (trains on ``texts()``) or dir:DIR."""
    kind, _, arg = spec.partition(":")
    try:
        if spec == "byte":
            return ByteTokenizer()
        if kind not in ("gpt2", "hf", "bpe", "dir"):
            raise UserError(f"unknown kind {kind!r}")
        if not arg:
            raise UserError(f"{kind} needs an argument after the colon")
        if kind == "bpe":
            return _train_from_spec(arg, texts)
        path = Path(arg).expanduser()
        if not path.exists():
            raise UserError(f"{path} does not exist")
        if kind == "gpt2":
            return GPT2Tokenizer.from_dir(path)
        if kind == "hf":
            from contextlab.data.hf_tokenizer import HFTokenizer

            return HFTokenizer.from_file(path)
        return load_saved_tokenizer(path)
    except UserError as e:
        raise UserError(f"bad tokenizer spec {spec!r}: {e}; valid forms: {VALID_SPECS}") from None


def _train_from_spec(arg: str, texts: Callable[[], Iterable[str]] | None) -> Tokenizer:
    if not arg.isdigit():
        raise UserError(f"the vocab size {arg!r} is not a whole number (e.g. bpe:4096)")
    if texts is None:
        raise UserError(
            "bpe:N trains a new tokenizer and needs training texts, which this command does not have"
        )
    from contextlab.data.hf_tokenizer import train_bpe

    return train_bpe(texts(), int(arg))


def load_saved_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """Reload a folder written by ``Tokenizer.save``, checking the files against the stored hash."""
    d = Path(directory)
    spec = _read_json(d / SPEC_FILE)
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
        from contextlab.data.hf_tokenizer import HFTokenizer

        tok = HFTokenizer.from_file(d / "tokenizer.json", name=name)
    else:
        raise UserError(
            f"{d / SPEC_FILE} has unknown tokenizer kind {kind!r}: re-create the folder with save()"
        )
    if tok.hash != spec.get("hash"):
        raise UserError(
            f"tokenizer files in {d} do not match their spec (hash {tok.hash[:8]} != "
            f"{str(spec.get('hash'))[:8]}); re-create the folder by saving the original tokenizer again"
        )
    return tok


def check_same_tokenizer(
    a_spec: dict[str, Any], b_spec: dict[str, Any], what_a: str, what_b: str, *, fix: str | None = None
) -> None:
    """Raise UserError naming both tokenizers if the two specs' hashes differ."""
    a_hash, b_hash = str(a_spec.get("hash")), str(b_spec.get("hash"))
    if a_hash == b_hash and a_spec.get("hash"):
        return
    fix = fix or (
        f"rebuild {what_b} with {what_a}'s tokenizer (--tokenizer dir:<its tokenizer folder>) "
        "or pair items made with the same tokenizer"
    )
    raise UserError(
        f"{what_a}'s tokenizer ({a_spec.get('name')}, hash {a_hash[:8]}) differs from "
        f"{what_b}'s ({b_spec.get('name')}, hash {b_hash[:8]}): {fix}"
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"cannot read {path} ({type(e).__name__}): check the path and that it is UTF-8 text"
        ) from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as e:
        raise UserError(
            f"{path} is not valid JSON ({e.msg} at line {e.lineno}): restore or re-create the file"
        ) from None


_HF_NAMES = ("HFTokenizer", "train_bpe", "PROBE")


def __getattr__(name: str) -> Any:
    """``HFTokenizer``, ``train_bpe`` and ``PROBE`` live in hf_tokenizer (which builds on this module)."""
    if name in _HF_NAMES:
        from contextlab.data import hf_tokenizer

        return getattr(hf_tokenizer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
