"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology") as a token store.

A sequence holds N key-value pairs, then Q of the keys again in a random order, each
followed by its value: ``[k_1 v_1 .. k_N v_N  q_1 a_1 .. q_Q a_Q]`` where every q is one of
the keys and a its value. Keys and values are disjoint id ranges of a small word-level
vocabulary written with the store (``k00..``, ``v00..``, the filler ``_`` and
``<|endoftext|>``), so the model's vocabulary is exactly K + V + 2. Keys and values are
drawn without repetition inside a sequence (K, V >= N), so a key's value is unique and the
other values of the same prompt are fair distractors. With ``context`` T > 2N + 2Q the query
slots (2 tokens each) sit at random places after the pairs, the rest filled with ``_``,
which spreads the distance between a key and its query.

The answers are found by one rule, recorded in ``meta.json`` (``mqar.answer_rule``): a
target is an answer when the token before it is a key that already occurred earlier in the
row. Keys occur once among the pairs, so exactly the Q query keys are such repeats. The
training objective ``recall`` applies the same rule with the store's ``key_ids``; the
evaluation ``mqar`` reads the config and regenerates sequences from it.

Trade-off: a dedicated word-level tokenizer (a Hugging Face ``tokenizer.json`` built here)
instead of the byte tokenizer: the vocabulary then scales with K and V (one of the things
that decides whether a small model learns the task), and ids decode to readable names, at
the price of a store that only models trained on this vocabulary can read.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextlab.config import opt
from contextlab.errors import UserError

SOURCE_KIND = "synthetic-mqar"
FILL, EOT = "_", "<|endoftext|>"
ANSWER_RULE = "the target after a key id that already occurred earlier in the row is an answer"


@dataclass
class MQARConfig:
    pairs: int = opt(16, "key-value pairs N at the start of every sequence")
    keys: int = opt(64, "key ids K in the vocabulary (a sequence draws N distinct ones; K >= N)")
    values: int = opt(64, "value ids V in the vocabulary (a sequence draws N distinct ones; V >= N)")
    queries: int = opt(0, "keys asked again Q per sequence, each at most once, in random order; 0 = all N")
    context: int = opt(
        0,
        "tokens per sequence T >= 2N + 2Q: the query slots sit at random places after the pairs, "
        "the rest is the filler '_'; 0 = exactly 2N + 2Q (queries right after the pairs)",
    )
    docs: int = opt(20_000, "sequences (documents) to write")
    seed: int = opt(0, "seed of the sequences (give a held-out store another one)")

    def __post_init__(self):
        N = self.pairs
        if N < 1:
            raise ValueError(f"pairs={N} must be >= 1")
        if self.keys < N or self.values < N:
            raise ValueError(f"keys={self.keys} and values={self.values} must both be >= pairs={N}")
        if not 0 <= self.queries <= N:
            raise ValueError(f"queries={self.queries} must lie in 0..pairs={N} (0 = all)")
        if self.context and self.context < 2 * N + 2 * self.n_queries:
            raise ValueError(f"context={self.context} must be 0 or >= 2 * pairs + 2 * queries")
        if self.docs < 1:
            raise ValueError(f"docs={self.docs} must be >= 1")

    @property
    def n_queries(self) -> int:
        return self.queries or self.pairs

    @property
    def length(self) -> int:
        """Tokens per sequence."""
        return self.context or 2 * self.pairs + 2 * self.n_queries


@dataclass(frozen=True)
class Layout:
    """Token ids: keys 0..K-1, values K..K+V-1, then the filler and the end-of-text token."""

    keys: int
    values: int

    @property
    def value0(self) -> int:
        return self.keys

    @property
    def fill(self) -> int:
        return self.keys + self.values

    @property
    def eot(self) -> int:
        return self.keys + self.values + 1

    def as_dict(self) -> dict:
        return {
            "key_ids": [0, self.keys],
            "value_ids": [self.keys, self.keys + self.values],
            "fill": self.fill,
            "eot": self.eot,
        }


@dataclass
class MQARSamples:
    keys: np.ndarray  # (n, N) key ids, in pair order
    values: np.ndarray  # (n, N) value ids: values[:, i] belongs to keys[:, i]
    asked: np.ndarray  # (n, Q) the pair index asked by each query, in query order
    slots: np.ndarray  # (n, Q) position of each query key in the row (its answer follows)


def layout_of(cfg: MQARConfig) -> Layout:
    return Layout(cfg.keys, cfg.values)


def make_tokenizer(layout: Layout):
    """The word-level tokenizer of the layout: ``k00.. v00.. _ <|endoftext|>`` (zero-padded names, so a
    generated answer is never the prefix of another)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from contextlab.data.hf_tokenizer import HFTokenizer

    w = len(str(max(layout.keys, layout.values) - 1))
    vocab = {f"k{i:0{w}d}": i for i in range(layout.keys)}
    vocab |= {f"v{i:0{w}d}": layout.value0 + i for i in range(layout.values)}
    vocab |= {FILL: layout.fill, EOT: layout.eot}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=FILL))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    tok.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    return HFTokenizer(tok, f"mqar-k{layout.keys}-v{layout.values}", engine="hf")


def sample(cfg: MQARConfig, n: int, rng: np.random.Generator) -> MQARSamples:
    """n sequences: N distinct keys and values each, Q of the pairs asked in a random order, at random
    slots after the pairs when the context leaves room (else right after them)."""
    N, Q, T = cfg.pairs, cfg.n_queries, cfg.length
    keys = rng.random((n, cfg.keys)).argsort(axis=1)[:, :N]  # (n, N) distinct per row
    values = cfg.keys + rng.random((n, cfg.values)).argsort(axis=1)[:, :N]  # (n, N)
    asked = rng.random((n, N)).argsort(axis=1)[:, :Q]  # (n, Q) distinct pairs, random order
    room = T - 2 * N - 2 * Q  # filler tokens
    # Q sorted places among room + Q; slot i lies i places further on (every earlier slot is 2 tokens long)
    picks = (
        np.sort(rng.random((n, room + Q)).argsort(axis=1)[:, :Q], axis=1) if room else np.arange(Q)[None, :]
    )
    slots = 2 * N + picks + np.arange(Q)[None, :]  # (n, Q) or (1, Q)
    slots = np.broadcast_to(slots, (n, Q)).astype(np.int64)
    return MQARSamples(keys.astype(np.int64), values.astype(np.int64), asked.astype(np.int64), slots.copy())


def to_tokens(s: MQARSamples, cfg: MQARConfig) -> np.ndarray:
    """(n, T) token rows ``[k_1 v_1 .. k_N v_N, (filler and) q a slots]``."""
    n, N = s.keys.shape
    rows = np.full((n, cfg.length), cfg.keys + cfg.values, dtype=np.int64)  # the filler
    rows[:, 0 : 2 * N : 2], rows[:, 1 : 2 * N : 2] = s.keys, s.values
    r = np.arange(n)[:, None]
    rows[r, s.slots] = np.take_along_axis(s.keys, s.asked, axis=1)
    rows[r, s.slots + 1] = np.take_along_axis(s.values, s.asked, axis=1)
    return rows


def answer_positions(rows: np.ndarray, keys: int) -> np.ndarray:
    """(n, T) bool: the positions holding an answer (the token before them is a key id < ``keys`` seen
    earlier in the row): ``ANSWER_RULE``, applied to any rows."""
    rows = np.asarray(rows)
    n, T = rows.shape
    out = np.zeros((n, T), bool)
    for i in range(n):
        seen: set[int] = set()
        for t in range(T - 1):
            tok = int(rows[i, t])
            if tok < keys:
                out[i, t + 1] = tok in seen
                seen.add(tok)
    return out


def parse_rows(rows: np.ndarray, cfg: MQARConfig) -> MQARSamples:
    """The samples back from (n, T) token rows written with ``cfg`` (the inverse of ``to_tokens``)."""
    rows = np.asarray(rows, dtype=np.int64)
    N, Q = cfg.pairs, cfg.n_queries
    keys, values = rows[:, 0 : 2 * N : 2], rows[:, 1 : 2 * N : 2]  # (n, N)
    tail = rows[:, 2 * N :]
    slots = np.stack([2 * N + np.flatnonzero(r < cfg.keys) for r in tail])  # (n, Q): the query keys
    if slots.shape[1] != Q:
        raise UserError(f"rows hold {slots.shape[1]} queries, not the {Q} of their MQAR config")
    q = np.take_along_axis(rows, slots, axis=1)  # (n, Q) the query keys
    asked = (q[:, :, None] == keys[:, None, :]).argmax(-1)  # (n, Q) their pair index
    return MQARSamples(keys, values, asked, slots)


def distances(s: MQARSamples) -> np.ndarray:
    """(n, Q) tokens from each asked key's pair to its query: slot - 2 * pair index."""
    return s.slots - 2 * s.asked


# ---------------------------------------------------------------------------- stores


def store_meta(cfg: MQARConfig, tok) -> dict:
    """meta.json of an MQAR store: the tokenizer, the config, the id layout and the answer rule."""
    info = {
        "config": dataclasses.asdict(cfg),
        "layout": layout_of(cfg).as_dict(),
        "answer_rule": ANSWER_RULE,
        "length": cfg.length,
    }
    return {
        "tokenizer": tok.spec(),
        "dtype": "uint16",
        "source": {"kind": SOURCE_KIND, "config": dataclasses.asdict(cfg)},
        "mqar": info,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_mqar_store(
    cfg: MQARConfig,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    chunk: int = 20_000,
    progress: bool = True,
) -> Path:
    """Write ``cfg.docs`` sequences as a token store at ``out`` (the same seed gives the same bytes)."""
    from contextlab.data.synthetic_store import write_synthetic_store

    tok = make_tokenizer(layout_of(cfg))
    meta = store_meta(cfg, tok)

    def batches():
        rng = np.random.default_rng([cfg.seed, 2])
        for start in range(0, cfg.docs, chunk):
            s = sample(cfg, min(chunk, cfg.docs - start), rng)
            d = distances(s)
            yield (
                to_tokens(s, cfg),
                [{"id": start + i, "distances": d[i].tolist()} for i in range(len(s.keys))],
            )

    return write_synthetic_store(
        out,
        tok,
        meta,
        batches(),
        side_files={"mqar.json": meta["mqar"]},
        overwrite=overwrite,
        total=cfg.docs,
        desc="mqar",
        progress=progress,
    )


def mqar_of_store(store) -> MQARConfig:
    """The config of an MQAR store (a TokenStore); one clear line when the store is not one."""
    info = store.meta.get("mqar")
    if not info:
        raise UserError(
            f"store {store.path} holds no MQAR data; "
            "write one with `contextlab data synthetic mqar --out STORE`"
        )
    try:
        return MQARConfig(**info["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"store {store.path} has a malformed MQAR description ({exc}); write it again with "
            "`contextlab data synthetic mqar`"
        ) from None
