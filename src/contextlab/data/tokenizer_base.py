"""The tokenizer interface, the byte tokenizer, and what every BPE tokenizer shares.

Every tokenizer maps text to ids and back, names its special tokens (``<|endoftext|>`` is
the document separator) and knows its identity as a content hash. ``ByteTokenizer`` needs
no files; the GPT-2 BPE (``gpt2_tokenizer``) and Hugging Face ``tokenizer.json``
(``hf_tokenizer``) build on this module, and ``contextlab.data.tokenizers`` turns a spec
string into any of them.

Trade-offs:

- Identity is a sha256 of a canonical description of what determines the ids (ranks or
  vocabulary and merges, normalizer, pre-tokenizer, post-processor, special and added
  tokens), never a name, path or file spelling: renaming a folder or re-saving a file (by
  ``transformers`` too) keeps the hash, while changing one merge or adding one special token
  changes it. Stores and models compare hashes before they are used together; hashes that
  earlier versions recorded (``legacy_hash``) are still accepted.
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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contextlab.errors import UserError
from contextlab.io import atomic_write_json

EOT = "<|endoftext|>"
SPEC_FILE = "tokenizer_spec.json"
# The GPT-2 pre-tokenizer regex (contractions, letters, digits, other, whitespace).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOS_NAMES = (EOT, "</s>", "<eos>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|end|>")
_threads = 0  # tokenizer threads set by set_tokenizer_threads; 0 = one per core


def tokenizer_threads() -> int:
    """The threads a batch of texts is tokenized on: ``set_tokenizer_threads``'s, else one per core."""
    return _threads or os.cpu_count() or 1


def set_tokenizer_threads(n: int) -> None:
    """Tokenize on ``n`` threads (0: one per core): tiktoken's batches, and the Rust pool of HF
    ``tokenizers`` (encoding and BPE training), which reads RAYON_NUM_THREADS when it first starts,
    so this is called before any text is tokenized."""
    global _threads
    _threads = max(0, int(n))
    if _threads:
        os.environ["RAYON_NUM_THREADS"] = str(_threads)


def ranks_canonical(ranks: dict[bytes, int]) -> Iterator[bytes]:
    """What determines the ids of a byte-level BPE with the GPT-2 pattern: the pattern and its ranks."""
    yield f"pattern={GPT2_PATTERN}\n".encode()
    for token, rank in sorted(ranks.items()):
        yield b"%s %d\n" % (token.hex().encode(), rank)


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

    def token_bytes(self, ids: Sequence[int] | np.ndarray) -> int | None:
        """How many bytes of text ``ids`` stand for, counted token by token: exact where the ids begin
        or end inside a character (a document cut at --max-tokens), which a count of decoded text is
        not (a partial character decodes to U+FFFD, 3 bytes); a special token counts its name. None
        when the tokenizer cannot say (the caller counts decoded text)."""
        lengths = self._token_byte_lengths
        if lengths is None:
            return None
        arr = np.asarray(ids, dtype=np.int64).ravel()
        return int(lengths[arr].sum())

    @functools.cached_property
    def _token_byte_lengths(self) -> np.ndarray | None:
        """(vocab_size,) bytes of each token's text, or None (the default: not known)."""
        return None

    @functools.cached_property
    def hash(self) -> str:
        """sha256 hex of what determines the ids: equal hashes encode identically."""
        return self._sha256(self._canonical())

    @functools.cached_property
    def ids_hash(self) -> str:
        """The hash of every tokenizer that encodes exactly as this one, whatever its files: a Hugging
        Face byte-level BPE that tiktoken reproduces has the hash of the GPT-2 kind with its ranks (the
        same GPT-2 BPE as `gpt2:DIR` and as a tokenizer.json were two tokenizers, and never paired)."""
        return self.hash

    @functools.cached_property
    def legacy_hash(self) -> str:
        """The hash earlier versions recorded (for HF: the whole tokenizer.json); still accepted."""
        return self._sha256(self._legacy_canonical())

    def _sha256(self, chunks: Iterator[bytes], kind: str | None = None) -> str:
        h = hashlib.sha256(f"kind={kind or self.kind}\n".encode())
        h.update(json.dumps(sorted(self.special_tokens.items())).encode())
        for chunk in chunks:
            h.update(chunk)
        return h.hexdigest()

    def _canonical(self) -> Iterator[bytes]:
        return iter(())

    def _legacy_canonical(self) -> Iterator[bytes]:
        return self._canonical()

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable description: kind, name, vocab size, eot id, specials, hash."""
        spec = {
            "kind": self.kind,
            "name": self.name,
            "vocab_size": self.vocab_size,
            "eot_id": self.eot_id,
            "special_tokens": dict(self.special_tokens),
            "hash": self.hash,
        }
        if self.legacy_hash != self.hash:  # lets specs recorded by earlier versions match this one
            spec["legacy_hash"] = self.legacy_hash
        if self.ids_hash != self.hash:  # lets a tokenizer of other files that encodes alike match it
            spec["ids_hash"] = self.ids_hash
        return spec

    def save(self, directory: str | os.PathLike) -> None:
        """Write the files to reload this tokenizer into ``directory`` (spec file last)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self._save_files(d)
        atomic_write_json(d / SPEC_FILE, self.spec())

    def _save_files(self, d: Path) -> None:
        pass

    def with_special_tokens(self, names: list[str]) -> Tokenizer:
        """A copy with ``names`` added as special tokens after the vocabulary (present ones keep their id)."""
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

    @functools.cached_property
    def _token_byte_lengths(self) -> np.ndarray:
        lengths = np.zeros(self.vocab_size, np.int64)
        lengths[:256] = 1
        for name, i in self.special_tokens.items():
            lengths[i] = len(name.encode("utf-8"))
        return lengths

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


def ids_to_array(ids: list[int]) -> np.ndarray:
    """list -> uint32 array via array.array: 2.4x faster than np.array on a list of ints."""
    return np.frombuffer(array.array("I", ids), dtype=np.uint32)


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map used by encoder.json/vocab.json and merges."""
    keep = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    out = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in out):
        out[b] = chr(256 + n)
    return out


# str.translate table undoing that map: token.translate(BYTE_CHARS).encode("latin-1") is its bytes.
BYTE_CHARS = {ord(c): chr(b) for b, c in bytes_to_unicode().items()}


def read_text_file(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"cannot read {path} ({type(e).__name__}): check the path and that it is UTF-8 text"
        ) from None


def read_json_file(path: Path) -> Any:
    try:
        return json.loads(read_text_file(path))
    except json.JSONDecodeError as e:
        raise UserError(
            f"{path} is not valid JSON ({e.msg} at line {e.lineno}): restore or re-create the file"
        ) from None
