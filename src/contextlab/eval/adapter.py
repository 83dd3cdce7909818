"""One face for every model an evaluation can score: contextlab runs and Hugging Face folders.

``load_model(path)`` accepts a contextlab run directory, a checkpoint directory, a
contextlab Hugging Face export, or any local Hugging Face causal LM folder, and returns a
``ModelAdapter`` with the model's own tokenizer (a contextlab ``Tokenizer``) and the few
operations evaluations need: per-token log-probabilities, hidden states of one layer,
continuation scores, greedy generation. Everything runs under ``torch.no_grad`` in eval
mode; ``dtype="bf16"`` wraps the forward in autocast (CPU or CUDA).

Trade-offs:

- contextlab models (runs and exports alike) run as the plain ``GPT``: the hidden states
  come from ``GPT.trunk`` and the output layer is applied in row chunks, so the full
  (B, T, V) logits in fp32 never exist at once. Hugging Face models return their logits in
  one piece (they compute them anyway); the log-softmax is still done in fp32 chunks.
- Variable-length batches are right-padded without an attention mask: in a causal model a
  position never sees what comes after it, so padding on the right changes nothing that
  is read back (this holds for RoPE and absolute positions alike).
- Greedy generation re-runs the whole sequence at every step (no KV cache, as in the
  contextlab model itself): simple, exact, fine for answers of a few dozen tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from contextlab.data.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, load_saved_tokenizer
from contextlab.errors import UserError


class ContextLengthWarning(UserWarning):
    """An evaluation runs a model beyond the context it was trained (or extended) for."""


LOGPROB_CHUNK = 4096  # rows (tokens) per fp32 log-softmax chunk: bounds memory to chunk x vocab floats


@dataclass
class ModelInfo:
    """What a result file records about the model."""

    id: str  # the path as given
    kind: str  # "contextlab" or "hf"
    path: str  # resolved checkpoint or model folder
    architecture: str  # GPT shape or the HF model_type
    n_params: int
    max_context: int  # training context (contextlab) or position limit (HF)
    extends_beyond: bool  # positions beyond max_context are allowed (RoPE)
    tokenizer: dict = field(default_factory=dict)  # the tokenizer spec (with its hash)
    step: int | None = None


class ModelAdapter:
    """A causal LM plus its tokenizer; see the module docstring. Build with ``load_model``."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        info: ModelInfo,
        *,
        dtype: str = "fp32",
        batch_size: int = 8,
        device: str = "cpu",
    ):
        if dtype not in ("fp32", "bf16"):
            raise UserError(f"dtype {dtype!r} is unknown; use fp32 or bf16")
        self.model = model.eval().to(device)
        self.tokenizer = tokenizer
        self.info = info
        self.dtype = dtype
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.is_gpt = info.kind == "contextlab"
        self._warned_length = False

    # ------------------------------------------------------------------ basics
    @property
    def max_context(self) -> int:
        return self.info.max_context

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def autocast(self):
        if self.dtype == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def check_length(self, T: int, what: str = "the input", fix: str = "choose shorter lengths") -> None:
        """Refuse sequences an absolute-position model cannot take; warn (once) when a RoPE model goes beyond."""
        if self.max_context < T and not self.info.extends_beyond:
            raise UserError(
                f"{what} has {T} tokens but {self.info.id} supports at most {self.max_context}; {fix}"
            )
        if self.max_context < T and not self._warned_length:
            self._warned_length = True
            warnings.warn(
                f"{self.info.id} was trained at context {self.max_context} and has no RoPE extension to "
                f"{T} tokens: positions past {self.max_context} are extrapolated and usually score much "
                f"worse; extend it first (contextlab train --init-from MODEL --set extend.method=yarn "
                f"--set train.seq_len={T})",
                ContextLengthWarning,
                stacklevel=3,
            )

    def _as_batch(self, ids) -> Tensor:
        t = torch.as_tensor(np.asarray(ids, dtype=np.int64) if not isinstance(ids, Tensor) else ids)
        return (t[None] if t.dim() == 1 else t).to(self.device, torch.long)

    # ------------------------------------------------------------------ forward passes
    @torch.no_grad()
    def _hidden(self, idx: Tensor) -> Tensor:
        """Final (normed) hidden states (B, T, C) of a contextlab GPT."""
        with self.autocast():
            hidden, _ = self.model.trunk(idx)
        return hidden

    @torch.no_grad()
    def logits(self, ids) -> Tensor:
        """Logits (B, T, V) for token ids (B, T) or (T,), in the compute dtype."""
        idx = self._as_batch(ids)
        self.check_length(idx.size(1))
        with self.autocast():
            if self.is_gpt:
                return self.model(idx).logits
            return self.model(input_ids=idx).logits[..., : self.vocab_size]

    @property
    def vocab_size(self) -> int:
        if self.is_gpt:
            return self.model.config.vocab_size
        return int(self.model.config.vocab_size)

    @torch.no_grad()
    def token_logprobs(self, ids) -> Tensor:
        """log p(ids[:, t+1] | ids[:, :t+1]) for every t: fp32 (B, T-1), one forward pass."""
        idx = self._as_batch(ids)
        B, T = idx.shape
        self.check_length(T - 1)  # the last token is only a target: the forward sees T-1 tokens
        targets = idx[:, 1:].reshape(-1)  # (B*(T-1),)
        if self.is_gpt:
            h = self._hidden(idx[:, :-1]).reshape(B * (T - 1), -1)  # (N, C)
            rows = lambda a, b: self.model.unembed(h[a:b])
        else:
            logits = self.logits(idx[:, :-1]).reshape(B * (T - 1), -1)  # (N, V)
            rows = lambda a, b: logits[a:b]
        out = torch.empty(B * (T - 1), dtype=torch.float32, device=idx.device)
        for a in range(0, out.numel(), LOGPROB_CHUNK):
            b = min(a + LOGPROB_CHUNK, out.numel())
            with self.autocast():
                chunk = rows(a, b)
            out[a:b] = -F.cross_entropy(
                chunk.float(), targets[a:b], reduction="none"
            )  # fused log_softmax+gather
        return out.view(B, T - 1)

    @torch.no_grad()
    def hidden_states(self, ids, layer: int = -1) -> Tensor:
        """Residual stream after block ``layer`` (0 = embeddings, -1 = last block, before the final norm), fp32 (B, T, C)."""
        idx = self._as_batch(ids)
        self.check_length(idx.size(1))
        with self.autocast():
            if self.is_gpt:
                _, layers = self.model.trunk(idx, return_hidden=[layer])
                h = layers[0]
            else:
                out = self.model(input_ids=idx, output_hidden_states=True)
                states = out.hidden_states
                if not -len(states) <= layer < len(states):
                    raise UserError(
                        f"layer {layer} does not exist; {self.info.id} has {len(states) - 1} blocks"
                    )
                h = states[layer]
        return h.float()

    # ------------------------------------------------------------------ scoring and generation
    @torch.no_grad()
    def score_continuations(self, prompt: Sequence[int], candidates: Sequence[Sequence[int]]) -> np.ndarray:
        """Sum of log p(candidate tokens | prompt) for each candidate (batched, right-padded), float64."""
        prompt = list(prompt)
        seqs = [prompt + list(c) for c in candidates]
        if any(len(c) == 0 for c in candidates):
            raise ValueError("a candidate continuation is empty")
        return self.score_spans([(s, len(prompt)) for s in seqs])

    @torch.no_grad()
    def score_spans(self, items: Sequence[tuple[Sequence[int], int]]) -> np.ndarray:
        """For each (ids, start): sum of log p(ids[t] | ids[:t]) over t >= start (start >= 1)."""
        order = sorted(range(len(items)), key=lambda i: -len(items[i][0]))  # similar lengths together
        out = np.zeros(len(items))
        for a in range(0, len(order), self.batch_size):
            batch = [items[i] for i in order[a : a + self.batch_size]]
            T = max(len(s) for s, _ in batch)
            idx = torch.zeros(len(batch), T, dtype=torch.long)
            for r, (s, _) in enumerate(batch):
                idx[r, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
            lp = self.token_logprobs(idx).cpu().numpy()  # (b, T-1); lp[:, t-1] scores token t
            for r, (s, start) in enumerate(batch):
                out[order[a + r]] = float(lp[r, start - 1 : len(s) - 1].astype(np.float64).sum())
        return out

    @torch.no_grad()
    def generate(self, prompt: Sequence[int], max_new_tokens: int, stop: Sequence[int] = ()) -> list[int]:
        """Greedy continuation of ``prompt`` (ids), at most max_new_tokens, stopping at any ``stop`` id."""
        ids = list(prompt)
        out: list[int] = []
        for _ in range(max_new_tokens):
            nxt = int(self.logits(ids)[0, -1].float().argmax())
            if nxt in stop:
                break
            out.append(nxt)
            ids.append(nxt)
        return out


# ---------------------------------------------------------------------- loading


def load_model(
    path: str | os.PathLike,
    *,
    dtype: str = "fp32",
    batch_size: int = 8,
    device: str = "cpu",
    step: int | None = None,
) -> ModelAdapter:
    """A contextlab run/checkpoint dir or a local HF model folder -> ModelAdapter."""
    p = Path(path)
    if not p.exists():
        raise UserError(
            f"model not found: {p}; pass a contextlab run directory or a Hugging Face model folder"
        )
    if (p / "config.json").is_file() and not (p / "state.json").is_file():
        model, tok, info = _load_hf_folder(p)
    else:
        model, tok, info = _load_contextlab_run(p, step)
    info.id = str(path)
    return ModelAdapter(model, tok, info, dtype=dtype, batch_size=batch_size, device=device)


def _load_contextlab_run(path: Path, step: int | None):
    from contextlab.models.gpt import describe_model
    from contextlab.models.loading import load_trained_model
    from contextlab.rundir import tokenizer_dirs

    model, state, ckpt = load_trained_model(path, step)
    spec = state.get("tokenizer") or {}
    tok = _tokenizer_from_spec(
        spec,
        tokenizer_dirs(ckpt),
        f"run {path}",
    )
    if state.get("arch") == "hf":  # a continued Hugging Face model: run it as one
        from contextlab.models.hf_causal import context_limit

        info = ModelInfo(
            id=str(path),
            kind="hf",
            path=str(ckpt),
            architecture=str(model.config.model_type),
            n_params=sum(t.numel() for t in model.parameters()),
            max_context=context_limit(model.config),
            extends_beyond=True,
            tokenizer=tok.spec(),
            step=state.get("step"),
        )
        return model, tok, info
    info = ModelInfo(
        id=str(path),
        kind="contextlab",
        path=str(ckpt),
        architecture=describe_model(model),
        n_params=model.num_params(False),
        max_context=int(model.config.block_size),
        extends_beyond=True,
        tokenizer=tok.spec(),
        step=state.get("step"),
    )
    return model, tok, info


def _tokenizer_from_spec(spec: dict, folders: list[Path], what: str) -> Tokenizer:
    """The tokenizer a spec describes: rebuilt (byte) or loaded from the first folder whose hash matches."""
    if spec.get("kind") == "byte":
        tok: Tokenizer = ByteTokenizer(spec.get("special_tokens") or None)
        if tok.hash == spec.get("hash"):
            return tok
    for d in folders:
        if (d / "tokenizer_spec.json").is_file():
            tok = load_saved_tokenizer(d)
            if not spec.get("hash") or tok.hash == spec["hash"]:
                return tok
    raise UserError(
        f"cannot find the tokenizer of {what} ({spec.get('name')}, hash {str(spec.get('hash'))[:8]}); "
        "put the training store back where the run's config says (or copy STORE/tokenizer to RUN/tokenizer)"
    )


def _load_hf_folder(p: Path):
    cfg = json.loads((p / "config.json").read_text())
    from contextlab.models import hf

    if cfg.get("model_type") == hf.MODEL_TYPE:  # a contextlab export: run it as the plain GPT
        from contextlab.models.gpt import describe_model

        model = hf.gpt_from_hf_export(p)
        spec = (cfg.get("contextlab") or {}).get("contextlab_tokenizer") or {}
        tok = _tokenizer_from_spec(spec, [p / "tokenizer"], f"export {p}")
        info = ModelInfo(
            id=str(p),
            kind="contextlab",
            path=str(p),
            architecture=describe_model(model),
            n_params=model.num_params(False),
            max_context=int(model.config.block_size),
            extends_beyond=True,
            tokenizer=tok.spec(),
            step=(cfg.get("contextlab") or {}).get("contextlab_step"),
        )
        return model, tok, info
    tok_file = next(
        (f for f in (p / "tokenizer.json", p / "tokenizer" / "tokenizer.json") if f.is_file()), None
    )
    if tok_file is None:
        raise UserError(
            f"{p} has no tokenizer.json; save the model's fast tokenizer beside it "
            "(tokenizer.save_pretrained(folder))"
        )
    tok = HFTokenizer.from_file(tok_file, name=p.name)
    model = hf.load_hf_causal_lm(p)
    limit = next(
        (
            int(cfg[k])
            for k in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")
            if isinstance(cfg.get(k), int)
        ),
        2048,
    )
    rope = (
        "rope_theta" in cfg
        or "rope_scaling" in cfg
        or "rope_parameters" in cfg  # transformers 4.x / 5
        or cfg.get("position_embedding_type") == "rotary"
    )
    info = ModelInfo(
        id=str(p),
        kind="hf",
        path=str(p),
        architecture=str(cfg.get("model_type")),
        n_params=sum(t.numel() for t in model.parameters()),
        max_context=limit,
        extends_beyond=rope,
        tokenizer=tok.spec(),
    )
    if tok.vocab_size > int(model.config.vocab_size):
        raise UserError(
            f"{p}: the tokenizer has {tok.vocab_size} ids but the model only {model.config.vocab_size}; "
            "save the tokenizer that belongs to this model"
        )
    return model, tok, info
