"""Attention weights made visible, for analysis only: where each layer's attention goes.

The model attends through SDPA (``models/gpt.py``), which never forms the weights. Here forward
pre-hooks on every ``Attention`` module capture what it is called with (x, rope, attn_mask,
is_causal), recompute q, k, v through the module's own ``heads`` and form
softmax(q k^T / sqrt(hs) + mask) in fp32; a forward hook checks, on every call, that these
weights times v, through the module's output projection, reproduce the module's output
(``max_abs_diff`` in the result; a mismatch above ``CHECK_TOL``, relative for outputs larger than
1, stops the analysis: the weights would not be the model's). Training and every other
evaluation keep SDPA untouched. A Hugging Face model's weights are transformers' own, read under its
eager attention and checked against the attention it runs by default (``attention_hf.py``).

Per row and layer (heads averaged) this module keeps what the measures need
(``attention_measures.py`` turns it into numbers): attention received by each source
position j (the sum over queries i >= j of a[i, j]), the mass each query puts at distances
i - j in buckets [0], [1], [2, 3], [4, 7], ... (averaged over queries), the mean distance and
the entropy of the weights; and the head-averaged weight matrix of one sample row.

Trade-off: the weights of one layer are O(B nh T^2) fp32 memory and time, which is why this is
an analysis path run at a model's training context on a few hundred rows, not a kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import Tensor

import contextlab.analysis.attention_measures as M
import contextlab.eval.heldout as heldout
from contextlab import bars
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.models.gpt import GPT, Attention

CHECK_TOL = 1e-4  # largest |weights @ v - the module's output| accepted (fp32), times max(1, |output|)


def attention_weights(
    attn: Attention, x: Tensor, rope, attn_mask: Tensor | None, is_causal: bool
) -> tuple[Tensor, Tensor]:
    """The weights (B, nh, T, T) fp32 and the values (B, nh, T, hs) of ``attn`` called on x (B, T, C).

    attn_mask as ``Attention.forward`` takes it: None (causal when is_causal), a bool mask
    (True = may attend) or an additive float mask, broadcastable to (B, nh, T, T), that already
    holds its causal part.
    """
    q, k, v = (t.float() for t in attn.heads(x.float(), rope))  # (B, nh, T, hs)
    T = q.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, nh, T, T)
    if attn_mask is None:
        if is_causal:
            causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
    elif isinstance(attn_mask, Tensor):
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    else:
        raise UserError(
            f"analyze attention needs a dense mask, got {type(attn_mask).__name__}; run it on the CPU "
            "or with --device cpu (FlexAttention block masks are not materialised)"
        )
    return torch.softmax(scores, dim=-1), v  # rows sum to 1 over the keys each query may see


def module_output(attn: Attention, weights: Tensor, v: Tensor) -> Tensor:
    """What ``attn`` returns for these weights (B, nh, T, T) and values (B, nh, T, hs): (B, T, C)."""
    B, nh, T, hs = v.shape
    y = (weights @ v).transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, C)
    return attn.proj(y)


def _call_args(args: tuple, kwargs: dict):
    names = ("x", "rope", "attn_mask", "is_causal")
    given = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    return given["x"], given.get("rope"), given.get("attn_mask"), bool(given.get("is_causal", True))


class AttentionProbe:
    """Hooks on every ``Attention`` of ``model``: ``on_weights(name, weights (B, nh, T, T))`` per call.

    Use as a context manager; the hooks are removed on exit. ``max_abs_diff`` is the largest
    difference seen between weights @ v (through the output projection) and the module's output.
    """

    def __init__(self, model: torch.nn.Module, on_weights: Callable[[str, Tensor], None]):
        self.model, self.on_weights = model, on_weights
        self.max_abs_diff = 0.0
        self._pending: dict[str, tuple[Tensor, Tensor]] = {}
        self._handles: list = []

    def __enter__(self) -> AttentionProbe:
        for name, module in self.model.named_modules():
            if isinstance(module, Attention):
                self._handles.append(module.register_forward_pre_hook(self._pre(name), with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._post(name)))
        if not self._handles:
            raise UserError(f"{type(self.model).__name__} has no contextlab Attention module to analyse")
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, name: str):
        def hook(module, args, kwargs):
            self._pending[name] = attention_weights(module, *_call_args(args, kwargs))

        return hook

    def _post(self, name: str):
        def hook(module, args, output):
            weights, v = self._pending.pop(name)
            diff = float((module_output(module, weights, v) - output.float()).abs().max())
            scale = max(1.0, float(output.abs().max()))  # fp32 rounding grows with the output's size
            if not diff <= CHECK_TOL * scale:  # also catches NaN
                raise RuntimeError(
                    f"{name}: materialised attention differs from the model's output by {diff:.2e} "
                    f"(> {CHECK_TOL * scale:.0e}); the analysis path no longer matches the model's attention"
                )
            self.max_abs_diff = max(self.max_abs_diff, diff)
            self.on_weights(name, weights)

        return hook


def bucket_index(T: int, device=None) -> tuple[Tensor, Tensor]:
    """(bucket of distance i - j (T, T) long, 0 above the diagonal; the distance (T, T) fp32, >= 0)."""
    d = torch.arange(T, device=device)[:, None] - torch.arange(T, device=device)[None, :]  # (T, T)
    d = d.clamp(min=0)
    idx = torch.where(d > 0, torch.floor(torch.log2(d.clamp(min=1).double())).long() + 1, 0)
    return idx, d.float()


def bucket_mass(weights: Tensor, idx: Tensor) -> Tensor:
    """Each query's weight on each distance bucket: weights (B, T, T), idx = bucket_index(T)[0] ->
    (B, T, n_buckets); sums to 1 per query for causal weights."""
    B, T, _ = weights.shape
    n_buckets = len(M.distance_buckets(T))
    out = torch.zeros(B, T, n_buckets, dtype=weights.dtype, device=weights.device)
    return out.scatter_add_(2, idx.expand(B, T, T), weights)


@dataclass
class Layered:
    """Per-row measures of one group of attention modules (the blocks, or the ContextLM predictor)."""

    received: dict[int, list[np.ndarray]] = field(default_factory=dict)  # layer -> [(b, T)] per batch
    buckets: dict[int, list[np.ndarray]] = field(default_factory=dict)  # layer -> [(b, n_buckets)]
    distance: dict[int, list[np.ndarray]] = field(default_factory=dict)  # layer -> [(b,)] mean i - j
    entropy: dict[int, list[np.ndarray]] = field(default_factory=dict)  # layer -> [(b,)] nats
    sample: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> (T, T) the sample row

    def arrays(self) -> dict[str, np.ndarray]:
        """received (N, L, T), buckets (N, L, n_buckets), distance (N, L), entropy (N, L); layers sorted."""
        layers = sorted(self.received)
        stack = lambda d: np.stack([np.concatenate(d[k]) for k in layers], axis=1)
        return {k: stack(getattr(self, k)) for k in ("received", "buckets", "distance", "entropy")}


def _group_layer(name: str) -> tuple[str, int]:
    """'blocks.3.attn' -> ('blocks', 3); 'predictor.1.attn' -> ('predictor', 1)."""
    parts = name.split(".")
    i = next(k for k, p in enumerate(parts) if p.isdigit())
    return ".".join(parts[:i]), int(parts[i])


class Collector:
    """The ``on_weights`` of an AttentionProbe: reduces each call's weights to the per-row measures."""

    def __init__(self, sample_row: int):
        self.groups: dict[str, Layered] = {}
        self.sample_row = sample_row
        self.row0 = 0  # global index of the current batch's first row
        self._index: dict[int, tuple[Tensor, Tensor]] = {}

    def __call__(self, name: str, w: Tensor) -> None:
        group, layer = _group_layer(name)
        g = self.groups.setdefault(group, Layered())
        B, _, T, _ = w.shape
        if T not in self._index:
            self._index[T] = bucket_index(T, w.device)
        idx, dist = self._index[T]
        wm = w.mean(1)  # (B, T, T) head-averaged
        mass = bucket_mass(wm, idx)  # (B, T, n_buckets)
        ent = -torch.special.xlogy(w, w).sum(-1).mean((1, 2))  # (B,) nats, mean over heads and queries
        for store, value in (
            (g.received, wm.sum(1)),  # (B, T): sum over queries i of a[i, j]
            (g.buckets, mass.mean(1)),  # (B, n_buckets): mean over queries
            (g.distance, (wm * dist).sum(-1).mean(-1)),  # (B,)
            (g.entropy, ent),
        ):
            store.setdefault(layer, []).append(value.double().cpu().numpy())
        if self.row0 <= self.sample_row < self.row0 + B:
            g.sample[layer] = wm[self.sample_row - self.row0].double().cpu().numpy()


def check_model(adapter, what: str) -> torch.nn.Module:
    """The model inside ``adapter`` (a contextlab GPT, or a transformers model whose attention modules are
    found), or one line saying why it cannot be analysed."""
    from contextlab.analysis.attention_hf import attention_modules

    model = adapter.model
    if adapter.info.kind == "hf":
        attention_modules(model, f"{what}: {adapter.info.id}")
    elif not isinstance(model, GPT):
        raise UserError(f"{what}: {adapter.info.id} ({type(model).__name__}) is not a model it can read")
    if adapter.info.lm_prefix and adapter.info.kind != "hf":  # a transformers model's BOS is read, then cut
        raise UserError(
            f"{what}: {adapter.info.id} reads text only after its mode tokens {adapter.info.lm_prefix} "
            f"(objective {adapter.info.objective}); analyze attention reads models that take plain text"
        )
    return model


@torch.no_grad()
def collect(adapter, tokens: np.ndarray, sample_row: int = 0, progress: bool = True) -> tuple[dict, float]:
    """Run the model on tokens (N, T) in fp32, batch by batch: ({group: per-row arrays}, max_abs_diff)."""
    from contextlab.analysis.attention_hf import HFAttentionProbe

    model = check_model(adapter, "analyze attention")
    collector = Collector(sample_row)
    rows = adapter.batch_size
    if isinstance(model, GPT):
        probe, forward = AttentionProbe(model, collector), model.trunk
    else:
        what = f"analyze attention: {adapter.info.id}"
        probe = HFAttentionProbe(model, collector, what, lead=adapter.info.lm_prefix)
        forward = probe.run
    with probe:
        bar = bars.bar(
            range(0, len(tokens), rows),
            desc=f"attention {adapter.info.id}",
            disable=None if progress else True,
        )
        for a in bar:
            collector.row0 = a
            idx = torch.as_tensor(tokens[a : a + rows], dtype=torch.long, device=adapter.device)
            forward(idx)  # no autocast (a contextlab model in fp32); the hooks see every attention call
    out = {}
    for name, g in collector.groups.items():
        out[name] = {**g.arrays(), "sample": np.stack([g.sample[k] for k in sorted(g.sample)])}
    shares = getattr(probe, "lead_share", None)
    if shares:  # the mean attention each layer gave the BOS the model read first (cut from the rest)
        out["lead_share"] = np.array([np.mean(shares[k]) for k in sorted(shares)])
    return out, probe.max_abs_diff


# ---------------------------------------------------------------------------------------
# The analysis: rows, both models, the numbers


@dataclass
class Options:
    rows: int = opt(256, "rows (pieces of held-out documents) to average over; 0 = all that qualify")
    length: int = opt(
        0, "tokens per row (documents shorter are skipped); 0 = the model's context (the smaller of two)"
    )
    pieces_per_doc: int = opt(1, "consecutive rows cut from one long document at most; 0 = as many as fit")
    chunk: int = opt(0, "chunk size of the per-chunk percent change; 0 = the ContextLM's w (4 if none)")
    per_layer: bool = opt(False, "plot every layer's attention received, not only the average")
    sample_row: int = opt(0, "the row shown token by token (the seed's Figure 6)")
    plot_tokens: int = opt(48, "tokens of the sample row in the per-token figure")
    top_tokens: int = opt(10, "token ids listed with the largest gain and loss of attention")
    min_count: int = opt(20, "a token id is listed only if it occurs at least this often in the rows")
    split: Literal["all", "run"] = opt(
        "all",
        "all: rows from every document of --data; run: only from what model A's run held out for "
        "validation (see eval --split)",
    )
    heldout_of: str = heldout.of_option()


@dataclass
class Rows:
    tokens: np.ndarray  # (N, T) int64
    docs: np.ndarray  # (N,) the document of each row (its cluster for intervals)
    data: dict  # what was read: store and hash, or the text's hash


def read_rows(adapter, options: Options, data: str | None, text: str | None, length: int = 0) -> Rows:
    """The rows to analyse: pieces of the store's documents (as ``contextwise`` cuts them) or the text;
    ``length`` the default tokens per row (0: the model's context) when --length is not given."""
    from contextlab.eval.base import open_store
    from contextlab.eval.pieces import sequences
    from contextlab.eval.results import text_hash

    L = options.length or length or adapter.context
    if (data is None) == (text is None):
        raise UserError("give the rows to analyse: --data STORE or --text TEXT (one of them)")
    if text is not None and options.split == "run":
        raise UserError(
            "--split run reads the part of a run's token store it held out, not --text; leave one out"
        )
    if text is not None:
        ids = adapter.encode(text)[:L]
        if len(ids) < 2:
            raise UserError("--text encodes to fewer than 2 tokens; give a longer text")
        rows = np.asarray([ids], dtype=np.int64)
        return Rows(rows, np.zeros(1, np.int64), {"text": text, "hash": text_hash(text), "tokens": len(ids)})
    store = open_store(data, adapter, "analyze attention", kinds=("parity", "mqar"), split=options.split)
    view, held = heldout.documents(store, adapter.info.path, options.split, of=options.heldout_of)
    pieces = sequences(view, L, options.rows, options.pieces_per_doc)
    if not pieces:
        which = " held out by the run" if held else ""
        raise UserError(f"no document of {store.path}{which} has {L} tokens; lower --length")
    tokens = np.stack([np.asarray(view.doc(d)[s : s + L], dtype=np.int64) for d, s in pieces])
    docs = heldout.in_store(view, pieces)[:, 0]
    return Rows(tokens, docs, {"store": str(store.path), "hash": store.hash, "rows": len(pieces), **held})


def announce_rows(rows: Rows, options: Options, from_store: bool) -> None:
    """The settings line: the rows read (how many, of how many tokens, from how many documents, which
    split), with a note when the store gave fewer rows than --rows asks (a user's default 256 were 6)."""
    from contextlab.eval import progress

    N, T = rows.tokens.shape
    n_docs = len(set(rows.docs.tolist()))
    note = None
    if from_store and options.rows and options.rows > N:
        per = options.pieces_per_doc
        one = n_docs == 1
        note = (
            f"{N:,} row{'s' * (N != 1)}, not the {options.rows:,} asked: {n_docs:,} "
            f"document{'s' * (not one)} of {T:,} tokens or more"
            + (  # the command named: a profile runs this step under options of its own
                f" give{'s' * one} {per} row{'s' * (per != 1)} {'' if one else 'each '}at most "
                "(`analyze attention --pieces-per-doc 0` cuts as many as fit)"
                if per
                else f" hold{'s' * one} no more"
            )
        )
    progress.announce(
        "attention",
        {
            "rows": f"{N:,} of {T:,} tokens",
            "documents": n_docs if from_store else None,
            "split": rows.data.get("split") if from_store else None,
            "note": note,
        },
    )


def decoder_layers(model: torch.nn.Module, n_layers: int) -> list[int]:
    """The blocks the token decoder runs, of the ``n_layers`` whose attention was read: after a
    ContextLM's encoder blocks, else all."""
    first = getattr(model.config, "encoder_layers", 0) if isinstance(model, GPT) else 0
    return list(range(first, n_layers))


def chunk_size(options: Options, models: list[torch.nn.Module]) -> int:
    if options.chunk:
        return options.chunk
    return next(
        (m.config.chunk_size for m in models if isinstance(m, GPT) and hasattr(m.config, "chunk_size")), 4
    )


def _model_part(adapter, arrays: dict, diff: float) -> dict:
    model = adapter.model
    out = {
        "id": adapter.info.id,
        "architecture": type(model).__name__,
        "max_abs_diff_vs_model": diff,
        "blocks": M.summarise(arrays["blocks"], decoder_layers(model, arrays["blocks"]["received"].shape[1])),
    }
    if "predictor" in arrays:  # ContextLM: the predictor's attention over chunks (distances in chunks)
        out["predictor"] = M.summarise(arrays["predictor"], list(range(len(model.predictor))))
    if "lead_share" in arrays:
        out["bos"] = {
            "ids": adapter.info.lm_prefix,
            "share_by_layer": arrays["lead_share"].tolist(),
            "note": "the model read its tokenizer's BOS before every row, as it was trained; the weights "
            "above are the text's queries over the text's keys, renormalised to sum to 1, and "
            "share_by_layer is the mean attention each layer gave the BOS",
        }
    return out


def _models(adapter, compare) -> list[torch.nn.Module]:
    """The model of A (and B), refused in one line when not analysable or not comparable."""
    from contextlab.data.tokenizers import check_same_tokenizer

    adapters = [adapter] + ([compare] if compare is not None else [])
    models = [check_model(a, f"model {k}") for a, k in zip(adapters, "AB")]
    if compare is not None:
        check_same_tokenizer(
            adapter.tokenizer.spec(),
            compare.tokenizer.spec(),
            f"model A {adapter.info.id}",
            f"model B {compare.info.id}",
            fix="compare two models trained with the same tokenizer",
        )
    return models


def _comparison(blocks: list[dict], layers: dict, w: int, rows: Rows, decode, options: Options) -> dict:
    a, b = blocks
    comp = M.compare(a, b, layers["a"], layers["b"], w, rows.docs)
    ra, rb = (x["received"][:, layers[k]].mean(1) for x, k in ((a, "a"), (b, "b")))  # (N, T) each
    comp["tokens"] = M.token_moves(ra, rb, rows.tokens, decode, options.top_tokens, options.min_count)
    return comp


def run(
    adapter, options: Options, data: str | None = None, text: str | None = None, compare=None, progress=True
):
    """Analyse model ``adapter`` (A) and, if given, ``compare`` (B, the reference) on the same rows."""
    from contextlab.eval.base import EvalOutput

    models = _models(adapter, compare)
    adapters = [adapter] + ([compare] if compare is not None else [])
    # both models read the rows: by default the smaller context, as a profile measures
    rows = read_rows(adapter, options, data, text, length=min(a.context for a in adapters))
    N, T = rows.tokens.shape
    if not 0 <= options.sample_row < N:
        raise UserError(f"--sample-row {options.sample_row} is not one of the {N} rows; choose 0..{N - 1}")
    for a in adapters:
        a.check_length(T, "each row", "lower --length")  # a given --length may pass a context
    announce_rows(rows, options, data is not None)
    w = chunk_size(options, models)
    collected = [collect(a, rows.tokens, options.sample_row, progress) for a in adapters]
    blocks = [arr["blocks"] for arr, _ in collected]
    layers = {k: decoder_layers(m, x["received"].shape[1]) for k, m, x in zip("ab", models, blocks)}
    samples = {k: x["sample"] for k, x in zip("ab", blocks)}
    ids, decode = rows.tokens[options.sample_row].tolist(), adapter.tokenizer.decode
    results = {
        "length": T,
        "rows": N,
        "documents": len(set(rows.docs.tolist())),
        "chunk": w,
        "buckets": [{"from": lo, "to": hi} for lo, hi in M.distance_buckets(T)],
        "models": {k: _model_part(a, arr, diff) for k, a, (arr, diff) in zip("ab", adapters, collected)},
        "sample": M.sample_section(samples, layers, w, ids, decode, options.plot_tokens),
    }
    if compare is not None:
        results["comparison"] = _comparison(blocks, layers, w, rows, decode, options)
    arrays = {
        f"{k}_{n}": v.astype(np.float32) for k, x in zip("ab", blocks) for n, v in x.items() if n != "sample"
    }
    arrays |= {"tokens": rows.tokens, "docs": rows.docs}
    return EvalOutput({"summary": M.headline(results), **results}, rows.data, arrays=arrays)
