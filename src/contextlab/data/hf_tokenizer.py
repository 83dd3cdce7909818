"""Hugging Face ``tokenizer.json`` tokenizers, and training a byte-level BPE with HF ``tokenizers``.

Files, hashes and decoding are always HF's. Encoding switches to tiktoken when that is
provably exact: the tokenizer is a plain byte-level BPE with the GPT-2 regex whose token ids
follow its merge list (``_ranks_following_merges`` checks every merge at load), and both
engines then agree on a probe text. tiktoken is several times faster on the ingest hot path;
anything it cannot reproduce keeps the HF engine, and ``engine_reason`` says why.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contextlab.data.tokenizer_base import (
    BYTE_CHARS,
    EOT,
    GPT2_PATTERN,
    Tokenizer,
    gpt2_regex_cuts,
    ids_to_array,
    ranks_canonical,
    tokenizer_threads,
)
from contextlab.errors import UserError
from contextlab.io import atomic_write_text

_PROBE = "The quick brown fox jumps over the lazy dog. 0123456789"


def _encodes(tok) -> bool:
    """False for a tokenizer that turns a sentence into no ids (one saved without its vocabulary)."""
    try:
        return bool(tok.encode(_PROBE, add_special_tokens=False).ids)
    except Exception:  # e.g. a word-level vocabulary without an unknown token: it encodes other text
        return True


class HFTokenizer(Tokenizer):
    """Any Hugging Face ``tokenizers.Tokenizer``, taken over: special tokens are plain text in ``encode``.

    ``engine`` is "tiktoken" when tiktoken gives the same ids (a plain byte-level BPE), else "hf".
    """

    kind = "hf"

    def __init__(self, tok: Any, name: str, *, engine: str = "auto") -> None:
        """``engine``: "auto" encodes with tiktoken when exact (see ``_tiktoken_twin``), "hf" never does."""
        if engine not in ("auto", "hf"):
            raise ValueError(f"engine must be 'auto' or 'hf', not {engine!r}")
        tok.encode_special_tokens = True  # not saved in tokenizer.json: set on every load
        self._tok = tok
        self.name = name
        added = sorted(tok.get_added_tokens_decoder().items())
        self.special_tokens = {t.content: i for i, t in added if t.special}
        self.vocab_size = max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        self._engine_request = engine
        self._tt, self.engine_reason = None, "engine='hf' was asked for"
        if engine == "auto":
            self._tt, self.engine_reason = _tiktoken_twin(tok, self.special_tokens)
        self.engine = "hf" if self._tt is None else "tiktoken"

    @classmethod
    def from_file(
        cls, path: str | os.PathLike, name: str | None = None, *, engine: str = "auto"
    ) -> HFTokenizer:
        """Load a ``tokenizer.json`` (or a folder holding one)."""
        from tokenizers import Tokenizer as HFTok

        p = Path(path)
        p = p / "tokenizer.json" if p.is_dir() else p
        if not p.is_file():
            raise UserError(
                f"no tokenizer.json at {p}: give the path of a Hugging Face tokenizer.json or its folder"
            )
        try:
            tok = HFTok.from_file(str(p))
        except Exception as e:  # tokenizers raises plain Exception for any parse error
            raise UserError(
                f"cannot read {p} as a Hugging Face tokenizer.json ({str(e).splitlines()[0]}): "
                "re-export it with tokenizer.save()"
            ) from None
        if not _encodes(tok):  # a vocabulary saved empty
            raise UserError(
                f"{p} encodes text to no tokens (its vocabulary holds "
                f"{len(tok.get_vocab(with_added_tokens=True)):,} entries): it was saved without its "
                "vocabulary; save the tokenizer again from one that encodes (tokenizer.save_pretrained)"
            )
        return cls(tok, name or (p.parent.name if p.stem == "tokenizer" else p.stem), engine=engine)

    def leading_special_ids(self) -> list[int]:
        """The special tokens the tokenizer's own post-processor puts before any text (the BOS of
        Llama, Mistral and Gemma tokenizers: their models always saw it first); [] when it puts none.
        ``encode`` never adds them (contextlab's stores hold text only)."""
        try:
            plain = self._tok.encode(_PROBE, add_special_tokens=False).ids
            full = self._tok.encode(_PROBE, add_special_tokens=True).ids
        except Exception:  # a post-processor that cannot run alone (a pair template only)
            return []
        specials = set(self.special_tokens.values())
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                lead = full[:start]
                return lead if all(i in specials for i in lead) else []
        return []

    def encode(self, text: str) -> list[int]:
        if self._tt is not None:
            return self._tt.encode_ordinary(text)
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        if self._tt is not None:
            batch = self._tt.encode_ordinary_batch(texts, num_threads=tokenizer_threads())
            return [ids_to_array(ids) for ids in batch]
        return [ids_to_array(e.ids) for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)]

    def cut_points(self, text: str, size: int) -> list[int]:
        return gpt2_regex_cuts(text, size) if self._tt is not None else []

    def _decode(self, ids: np.ndarray) -> str:
        return self._tok.decode(ids.tolist(), skip_special_tokens=False)

    @functools.cached_property
    def _token_byte_lengths(self) -> np.ndarray | None:
        """Known for a byte-level vocabulary (GPT-2, Llama 3, Qwen: each token spells its bytes in
        GPT-2's byte alphabet) and added tokens (their content); None for any other (SentencePiece's
        metaspace and byte fallback are decoded by rules this does not repeat)."""
        decoder = json.loads(self._tok.to_str()).get("decoder") or {}
        parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
        if not any(d.get("type") == "ByteLevel" for d in parts if isinstance(d, dict)):
            return None
        added = {i: t.content for i, t in self._tok.get_added_tokens_decoder().items()}
        lengths = np.zeros(self.vocab_size, np.int64)
        for token, i in self._tok.get_vocab(with_added_tokens=True).items():
            if i in added:
                lengths[i] = len(added[i].encode("utf-8"))
            elif all(ord(c) in BYTE_CHARS for c in token):
                lengths[i] = len(token)  # one alphabet character a byte
            else:
                return None  # a token outside the byte alphabet: not a plain byte-level vocabulary
        return lengths

    def _canonical(self) -> Iterator[bytes]:
        yield json.dumps(_identity(json.loads(self._tok.to_str())), sort_keys=True).encode()

    @functools.cached_property
    def ids_hash(self) -> str:
        auto = self._engine_request == "auto"  # the same identity whichever engine encodes
        twin = self._tt if auto else _tiktoken_twin(self._tok, self.special_tokens)[0]
        if twin is None:
            return self.hash
        return self._sha256(ranks_canonical(twin._mergeable_ranks), kind="gpt2")  # as gpt2:DIR of them

    def _legacy_canonical(self) -> Iterator[bytes]:
        yield json.dumps(json.loads(self._tok.to_str()), sort_keys=True).encode()

    def _save_files(self, d: Path) -> None:
        atomic_write_text(d / "tokenizer.json", self._tok.to_str(pretty=True))

    def _with_specials(self, new: dict[str, int]) -> HFTokenizer:
        from tokenizers import AddedToken
        from tokenizers import Tokenizer as HFTok

        tok = HFTok.from_str(self._tok.to_str())
        for name in new:
            tok.add_special_tokens([AddedToken(name, special=True, normalized=False)])
        out = HFTokenizer(tok, self.name, engine=self._engine_request)
        for name, i in new.items():
            if out.special_tokens.get(name) != i:
                raise UserError(
                    f"cannot add special token {name!r} to {self.name}: it is already an "
                    "ordinary token of the vocabulary; pick another name"
                )
        return out


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    """What in a tokenizer.json determines the ids, spelled one way.

    Left out: the decoder, truncation, padding and the format version (they never change an
    id), ``trim_offsets`` (offsets only) and a post-processor that adds no token (transformers
    writes a template of just ``$A``/``$A $B`` where the file had none; contextlab encodes
    without post-processing anyway). Merges are pairs whether written ``"a b"`` or ``["a", "b"]``.
    """
    model = dict(obj.get("model") or {})
    if "merges" in model:
        model["merges"] = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model["merges"]]
    normalizer = obj.get("normalizer")
    return {
        "model": model,
        "normalizer": None if normalizer == {"type": "Sequence", "normalizers": []} else normalizer,
        "pre_tokenizer": _without_offsets(obj.get("pre_tokenizer")),
        "post_processor": _post_processor(obj.get("post_processor")),
        "added_tokens": sorted(obj.get("added_tokens") or [], key=lambda t: t.get("id", -1)),
    }


def _without_offsets(part: Any) -> Any:
    """``part`` with every ``trim_offsets`` flag removed (they only move offsets)."""
    if isinstance(part, dict):
        return {k: _without_offsets(v) for k, v in part.items() if k != "trim_offsets"}
    if isinstance(part, list):
        return [_without_offsets(v) for v in part]
    return part


def _post_processor(post: Any) -> Any:
    """The post-processor, or None when it adds no token (ByteLevel, a template of sequences only)."""
    if not isinstance(post, dict):
        return post
    kind = post.get("type")
    if kind == "Sequence":
        parts = [p for p in map(_post_processor, post.get("processors") or []) if p is not None]
        return {"type": "Sequence", "processors": parts} if parts else None
    if kind == "ByteLevel":
        return None
    templates = [*(post.get("single") or []), *(post.get("pair") or [])]
    if (
        kind == "TemplateProcessing"
        and not post.get("special_tokens")
        and all("Sequence" in t for t in templates)
    ):
        return None
    return _without_offsets(post)


# Checked by both engines when an HFTokenizer picks tiktoken: prose, indented code, digits,
# CRLF, whitespace runs, accents, CJK, emoji with modifiers, astral letters, a special's name.
PROBE = (
    "The quick brown fox -- naïve café, 1,234.56 items; don't 'quote' it's OK?!\r\n"
    "def f(x):\n    if x >= 10:\n\t\treturn [i ** 2 for i in range(x)]  # 😀\n\n\n"
    "    日本語 Ωμέγα 👍🏽🚀 \u200b𝔘𝔫𝔦 \x00 x2024 ١٢٣ 12345678 <|endoftext|>   \n  end  "
)


def _tiktoken_twin(tok: Any, specials: dict[str, int]) -> tuple[Any, str]:
    """A tiktoken ``Encoding`` that encodes exactly like ``tok``, or None and the reason there is none."""
    import tiktoken

    obj = json.loads(tok.to_str())
    reason = _not_plain_byte_level_bpe(obj)
    ranks, reason = (None, reason) if reason else _ranks_following_merges(obj, tok.model, specials)
    if ranks is None:
        return None, reason
    enc = tiktoken.Encoding(
        name="contextlab-hf", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )
    probe = "\n".join([PROBE, *specials])  # each special name alone on a line: one regex piece
    if enc.encode_ordinary(probe) != tok.encode(probe, add_special_tokens=False).ids:
        return None, "tiktoken and HF disagree on the probe text"
    return enc, f"byte-level BPE whose {len(ranks) - 256} merges follow the token ids"


def _not_plain_byte_level_bpe(obj: dict[str, Any]) -> str:
    """Why the tokenizer.json is not a byte-level BPE with the GPT-2 regex and nothing else ("" if it is)."""
    model, pre = obj.get("model") or {}, obj.get("pre_tokenizer") or {}
    if pre.get("type") == "Sequence" and len(pre.get("pretokenizers") or []) == 1:
        pre = pre["pretokenizers"][0]
    checks = {
        "the model is not BPE": model.get("type") != "BPE",
        "BPE has dropout, an unk token, byte fallback or word affixes": any(
            model.get(k)
            for k in (
                "dropout",
                "unk_token",
                "byte_fallback",
                "continuing_subword_prefix",
                "end_of_word_suffix",
            )
        ),
        "there is a normalizer": obj.get("normalizer") not in (None, {"type": "Sequence", "normalizers": []}),
        "the pre-tokenizer is not ByteLevel with the GPT-2 regex and no prefix space": pre.get("type")
        != "ByteLevel"
        or pre.get("add_prefix_space", True)
        or not pre.get("use_regex", True),
        "the decoder is not ByteLevel": (obj.get("decoder") or {}).get("type") != "ByteLevel",
        "truncation or padding is set": bool(obj.get("truncation") or obj.get("padding")),
        "there are added tokens that are not special": any(
            not t.get("special") for t in obj.get("added_tokens", [])
        ),
    }
    return next((why for why, bad in checks.items() if bad), "")


def _ranks_following_merges(
    obj: dict[str, Any], hf_model: Any, specials: dict[str, int]
) -> tuple[dict[bytes, int] | None, str]:
    """Token bytes -> id for a BPE that tiktoken's rank order reproduces, or None and why not.

    tiktoken merges the adjacent pair whose concatenation has the lowest id and takes a piece
    that is itself a token whole; HF applies merge rules in merge-list order. They agree if
    (1) the vocab is the 256 bytes plus one distinct token per merge, with ids increasing along
    the merge list and above both parts' ids (rank order is merge order, one merge per token),
    and (2) HF's BPE turns each merged token's string back into that one token. By induction
    on ids, (2) makes rank-BPE of any token with the lower ids alone end as exactly its merge's
    parts, so tiktoken never joins a pair that is not a merge rule, and its shortcut is moot.
    (1) alone is not enough: with merges b+c, a+b, c+d, ab+cd, HF splits "abcd" as a|bc|d.
    """
    from tokenizers import Tokenizer as HFTok

    model = obj["model"]
    special_ids = set(specials.values())
    plain = {t: i for t, i in model["vocab"].items() if i not in special_ids}
    if not set(map(ord, "".join(plain))) <= BYTE_CHARS.keys():
        return None, "the vocabulary has tokens that are not byte-level strings"
    ranks = {t.translate(BYTE_CHARS).encode("latin-1"): i for t, i in plain.items()}
    if len(ranks) != 256 + len(model["merges"]) or any(bytes([b]) not in ranks for b in range(256)):
        return None, "the vocabulary is not the 256 bytes plus one distinct token per merge"
    if model.get("ignore_merges"):  # (2) must be checked with the merges, not by a vocab lookup
        hf_model = HFTok.from_str(json.dumps({**obj, "model": {**model, "ignore_merges": False}})).model
    last = -1
    for n, merge in enumerate(model["merges"]):
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        i = plain.get(a + b, -1)
        if not (last < i and plain.get(a, i) < i and plain.get(b, i) < i):
            return (
                None,
                f"merge {n} '{a} {b}' does not make a new token with an id above its parts' "
                "and the last merge's",
            )
        if [t.id for t in hf_model.tokenize(a + b)] != [i]:
            return None, f"merge {n} '{a} {b}': HF's own BPE does not turn {a + b!r} back into that token"
        last = i
    return ranks, ""


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    *,
    special_tokens: Sequence[str] = (EOT,),
    show_progress: bool = False,
) -> HFTokenizer:
    """Train a byte-level BPE (GPT-2 regex, all 256 bytes in the alphabet) with HF ``tokenizers``."""
    from tokenizers import Tokenizer as HFTok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    minimum = 256 + len(special_tokens)
    if vocab_size < minimum:
        raise UserError(
            f"BPE vocab size {vocab_size} is too small: byte-level BPE needs at least {minimum} "
            f"(256 bytes + {len(special_tokens)} special tokens); use bpe:{minimum} or more"
        )
    tok = HFTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    tok.train_from_iterator(
        _short_words(_told(texts, f"training a BPE of {vocab_size - minimum:,} merges")), trainer=trainer
    )
    learned = tok.get_vocab_size(with_added_tokens=True)
    if learned < vocab_size:  # the corpus ran out of pairs to merge: said, as the name keeps what was asked
        import sys

        print(
            f"note: the BPE learned {learned:,} tokens, not the {vocab_size:,} asked: the corpus has no more "
            f"pairs to merge (its vocabulary is {learned:,}; the tokenizer keeps the name bpe-{vocab_size})",
            file=sys.stderr,
        )
    return HFTokenizer(tok, f"bpe-{vocab_size}")


LONGEST_WORD = 1024  # characters of a run without whitespace that BPE training reads as one word


def _short_words(texts: Iterable[str]) -> Iterator[str]:
    """``texts`` with every run of more than ``LONGEST_WORD`` characters without whitespace cut by a
    newline, for training only: the trainer's time grows with the square of its longest word (a line of
    2,000,000 characters, minified code or a DNA sequence, ran for hours and ignored Ctrl-C), and no
    merge worth learning spans a thousand characters. Encoding reads the text as it is."""
    long_run = re.compile(r"\S{" + str(LONGEST_WORD) + "}")
    for text in texts:
        yield long_run.sub(lambda m: m.group(0) + "\n", text) if len(text) > LONGEST_WORD else text


def _told(texts: Iterable[str], what: str) -> Iterator[str]:
    """``texts``, saying on stderr what is trained on them (a long silence otherwise) and, once all
    are read, on how many MB (the merges are computed after that)."""
    import sys

    print(f"{what}: reading the text ...", file=sys.stderr, flush=True)
    n_bytes = 0
    for text in texts:
        n_bytes += len(text.encode("utf-8", "replace"))
        yield text
    print(f"{what} on {n_bytes / 1e6:,.1f} MB ...", file=sys.stderr, flush=True)
