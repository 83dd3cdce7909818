"""One face for every model an evaluation can score: contextlab runs and Hugging Face folders.

``load_model(path)`` accepts a contextlab run directory, a checkpoint directory, a
contextlab Hugging Face export, or any local Hugging Face causal LM folder, and returns a
``ModelAdapter`` with the model's own tokenizer (a contextlab ``Tokenizer``) and the few
operations evaluations need: per-token log-probabilities, hidden states of one layer,
continuation scores, greedy generation. Everything runs under ``torch.no_grad`` in eval
mode; ``dtype="bf16"`` wraps the forward in autocast (CPU or CUDA). Weights saved in half precision
(most Hugging Face checkpoints are bf16) are computed in fp32 under ``dtype="fp32"``, as the result
records (the upcast is exact; it doubles their memory, which a note says); bf16 weights stay bf16 under
``dtype="bf16"``.

Trade-offs:

- The forward passes belong to a backend chosen once, from ``ModelInfo.kind``
  (``contextlab.eval.backends``): contextlab models run as the plain GPT with the output layer
  applied in row chunks; Hugging Face models return their logits in one piece. The adapter
  adds what is the same for both, and evaluations never reach into the model.
- Variable-length batches are right-padded without an attention mask: in a causal model a
  position never sees what comes after it, so padding on the right changes nothing that
  is read back (this holds for RoPE and absolute positions alike).
- Candidate answers share their prompt: it runs once into a KV cache that each candidate in
  turn continues (``score_continuations``), so a task with k candidates reads each long prompt
  once, not k times, and holds one cache, not k; the numbers are those of whole-sequence scoring
  up to rounding (the tests check it).
- Greedy generation runs with a KV cache (contextlab models: ``inference/decode.py``; Hugging Face
  models: their own cache); it gives the tokens of greedy decoding that re-runs the whole
  sequence at every step (the tests check it), in time linear in the answer's length.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from contextlab.data.tokenizers import Tokenizer
from contextlab.errors import ContextLengthWarning, UserError
from contextlab.eval.backends import BACKENDS
from contextlab.eval.backends.base import chunked_logprobs, logprob_chunk
from contextlab.inference.open import ModelInfo
from contextlab.inference.sampling import Sampling


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
        self.saved_dtype = _weights_dtype(model)
        if self.saved_dtype in (torch.float16, torch.bfloat16) and (
            dtype == "fp32" or self.saved_dtype == torch.float16  # fp16 under bf16 autocast: fp32 weights
        ):
            _note_upcast(info, self.saved_dtype, dtype)
            model = model.float()
        self.model = model.eval().to(device)
        self.tokenizer = tokenizer
        self.info = info
        self.dtype = dtype
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.backend = BACKENDS[info.kind](self.model, self.autocast, info.lm_prefix)  # decided once, here
        self._warned_length = False
        self._whole_sequences = False  # set when the backend cannot share a prompt's cache

    # ------------------------------------------------------------------ basics
    @property
    def context(self) -> int:
        return self.info.context

    @property
    def vocab_size(self) -> int:
        return self.backend.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def autocast(self):
        if self.dtype == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def require_lm(self, what: str) -> None:
        """Refuse, in one line, ``what`` (an evaluation scoring next-token predictions) for a model
        whose training objective makes it no left-to-right language model (MLM, span corruption)."""
        if self.info.not_lm:
            raise UserError(
                f"{what} scores {self.info.id} as a left-to-right language model, but it was trained "
                f"with {self.info.not_lm}; evaluate a run of a causal objective (clm, prefix_lm, fim, "
                "mtp, contextlm, ul2)"
            )

    def check_length(self, T: int, what: str = "the input", fix: str = "shorten the input") -> None:
        """Refuse sequences an absolute-position model cannot take; warn (once) when a RoPE model goes
        beyond. ``what`` names the sequence and ``fix`` the caller's own option that shortens it (an
        evaluation calls this once, with its longest sequence, before its first forward pass, so the
        one warning names the longest prompt and how to stay within the context)."""
        if self.context < T and not self.info.extends_beyond:
            raise UserError(
                f"{what} runs {self.info.id} on {T:,} tokens but it supports at most {self.context:,}; {fix}"
            )
        if self.context < T and not self._warned_length:
            self._warned_length = True
            warnings.warn(
                f"{what} runs {self.info.id} on {T:,} tokens, but it was trained at context {self.context:,} "
                "and its RoPE was not extended to "
                f"{T:,}: positions past {self.context:,} are extrapolated and "
                f"usually score much worse; {fix}",
                ContextLengthWarning,
                stacklevel=3,
            )

    def _as_batch(self, ids) -> Tensor:
        t = torch.as_tensor(np.asarray(ids, dtype=np.int64) if not isinstance(ids, Tensor) else ids)
        return (t[None] if t.dim() == 1 else t).to(self.device, torch.long)

    # ------------------------------------------------------------------ forward passes
    @torch.no_grad()
    def logits(self, ids) -> Tensor:
        """Logits (B, T, V) for token ids (B, T) or (T,), in the compute dtype."""
        idx = self._as_batch(ids)
        self.check_length(idx.size(1))
        return self.backend.logits(idx)

    @torch.no_grad()
    def token_logprobs(self, ids) -> Tensor:
        """log p(ids[:, t+1] | ids[:, :t+1]) for every t: fp32 (B, T-1), one forward pass."""
        idx = self._as_batch(ids)
        B, T = idx.shape
        self.check_length(T - 1)  # the last token is only a target: the forward sees T-1 tokens
        rows = self.backend.output_rows(idx[:, :-1])  # logits of the B*(T-1) positions
        chunk = logprob_chunk(self.vocab_size)
        return chunked_logprobs(rows, idx[:, 1:].reshape(-1), self.autocast, chunk).view(B, T - 1)

    @torch.no_grad()
    def last_token_logprobs(self, ids) -> Tensor:
        """log p(ids[:, -1] | ids[:, :-1]): fp32 (B,), what ``token_logprobs(ids)[:, -1]`` gives with the
        output layer applied at the last position only (a last-token loss at l visible tokens cost l
        rows of a 50k-id output layer: the visible-context curve of a GPT-NeoX of 6.5M parameters spent
        82% of a profile there)."""
        idx = self._as_batch(ids)
        self.check_length(idx.size(1) - 1)  # the last token is only a target
        logits = self.backend.last_logits(idx[:, :-1])  # (B, V)
        return -F.cross_entropy(logits.float(), idx[:, -1], reduction="none")

    @torch.no_grad()
    def hidden_states(self, ids, layer: int = -1) -> Tensor:
        """Residual stream after block ``layer`` (0 = embeddings, -1 = last block, before the final
        norm), fp32 (B, T, C)."""
        idx = self._as_batch(ids)
        self.check_length(idx.size(1))
        return self.backend.hidden_states(idx, layer, self.info.id).float()

    @torch.no_grad()
    def features_and_last_logprob(self, ids, layer: int, position: int) -> tuple[Tensor, Tensor]:
        """ids (B, T+1): (hidden state after block ``layer`` at ``position`` of the first T tokens, fp32
        (B, C); log p(last token | the T before it), fp32 (B,)). A contextlab model does it in one pass."""
        idx = self._as_batch(ids)
        self.check_length(idx.size(1) - 1)
        states, lp = self.backend.layer_and_last_logprob(idx, layer, self.info.id)
        return states[:, position].float(), lp

    # ------------------------------------------------------------------ scoring and generation
    @torch.no_grad()
    def score_continuations(self, prompt: Sequence[int], candidates: Sequence[Sequence[int]]) -> np.ndarray:
        """Sum of log p(candidate tokens | prompt) for each candidate, float64. The prompt runs once and
        each candidate continues its KV cache: one long forward pass for k candidates instead of k, and
        the memory of one cache; a model whose cache cannot be shared scores whole sequences."""
        prompt, cands = list(prompt), [list(c) for c in candidates]
        if any(len(c) == 0 for c in cands):
            raise ValueError("a candidate continuation is empty")
        shared = None if self._whole_sequences else getattr(self.backend, "continuation_logprobs", None)
        if shared is None or not prompt:
            return self.score_spans([(prompt + c, len(prompt)) for c in cands])
        lengths = [len(c) for c in cands]
        self.check_length(len(prompt) + max(lengths) - 1)
        conts = torch.zeros(len(cands), max(lengths), dtype=torch.long)
        for r, c in enumerate(cands):
            conts[r, : len(c)] = torch.as_tensor(c, dtype=torch.long)
        prefix = torch.as_tensor(prompt, dtype=torch.long, device=self.device)
        lp = shared(prefix, conts.to(self.device), lengths)
        if lp is None:  # this model's cache cannot be shared: whole sequences from now on
            self._whole_sequences = True
            return self.score_spans([(prompt + c, len(prompt)) for c in cands])
        lp = lp.cpu().numpy().astype(np.float64)
        return np.array([lp[r, :n].sum() for r, n in enumerate(lengths)])

    @torch.no_grad()
    def score_and_generate(
        self, prompt: Sequence[int], candidates: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[np.ndarray, list[int]] | None:
        """``score_continuations`` and the greedy answer (``generate_many``'s: up to max_new_tokens,
        ending at end-of-text) of one prompt from one prefill. None when this model's cache cannot
        serve both (the caller scores and generates apart)."""
        self.require_lm("generation")
        prompt, cands = list(prompt), [list(c) for c in candidates]
        shared = None if self._whole_sequences else getattr(self.backend, "continue_prompt", None)
        if shared is None or not prompt or not cands or any(len(c) == 0 for c in cands):
            return None
        lengths = [len(c) for c in cands]
        self.check_length(len(prompt) + max(max(lengths), max_new_tokens) - 1)
        conts = torch.zeros(len(cands), max(lengths), dtype=torch.long)
        for r, c in enumerate(cands):
            conts[r, : len(c)] = torch.as_tensor(c, dtype=torch.long)
        prefix = torch.as_tensor(prompt, dtype=torch.long, device=self.device)
        stop = [i for i in (self.tokenizer.eot_id,) if i is not None]
        done = shared(prefix, conts.to(self.device), lengths, max_new_tokens, stop)
        if done is None:
            return None
        lp = done[0].cpu().numpy().astype(np.float64)
        return np.array([lp[r, :n].sum() for r, n in enumerate(lengths)]), done[1]

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
        prompt = list(prompt)
        if max_new_tokens <= 0:
            return []
        self.check_length(len(prompt))
        n = [0]

        def on_token(row: int, token: int) -> None:  # the length of the next forward's sequence
            n[0] += 1
            if n[0] < max_new_tokens:
                self.check_length(len(prompt) + n[0])

        return self.backend.generate(prompt, max_new_tokens, list(stop), on_token)

    @torch.no_grad()
    def generate_many(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        sampling: Sampling | None = None,
        stop_strings: Sequence[str] = (),
        on_token: Callable[[int, int], None] | None = None,
        speculative: bool = False,
    ) -> list[list[int]]:
        """Continuations of several prompts (ids) in one batch: a contextlab model with its KV cache
        (``inference/decode.py``), a Hugging Face model with ``transformers``' generate (``use_cache=True``).
        A row ends at the tokenizer's end-of-text (not kept), at a stop string (kept) or after
        max_new_tokens; ``on_token(row, id)`` streams (Hugging Face models: one prompt at a time).
        ``speculative``: greedy self-speculative decoding of an MTP run (inference/speculative.py)."""
        self.require_lm("generation")
        if not prompts:
            return []
        self.check_length(
            max(len(p) for p in prompts) + max_new_tokens - 1,
            "the longest prompt with its new tokens",
            "shorten the prompt or lower --max-new-tokens",
        )
        stop_ids = [i for i in (self.tokenizer.eot_id,) if i is not None]
        sampling = sampling or Sampling()
        run = self._speculative(sampling) if speculative else self.backend.generate_many
        rows, decode = [list(p) for p in prompts], self.tokenizer.decode
        return run(rows, max_new_tokens, sampling, stop_ids, list(stop_strings), decode, on_token)

    def _speculative(self, sampling: Sampling):
        """The backend's self-speculative decoder (``generate_many``'s arguments); one-line errors for
        what it cannot do."""
        run = getattr(self.backend, "generate_speculative", None)
        if run is None:
            raise UserError(
                f"speculative decoding needs a contextlab MTP run, {self.info.id} is a Hugging Face model "
                "(exports keep head 1 only); pass the run directory or drop --speculative"
            )
        if not sampling.greedy:
            raise UserError(
                "speculative decoding is greedy only (its output equals plain greedy decoding); "
                "drop --temperature or drop --speculative"
            )
        return run


# ---------------------------------------------------------------------- loading


def _weights_dtype(model: torch.nn.Module) -> torch.dtype | None:
    """The dtype most of a model's floating-point weights are in (None: it has none)."""
    counts: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.get) if counts else None


_UPCAST_NOTED: set[str] = set()


def _note_upcast(info: ModelInfo, saved: torch.dtype, dtype: str) -> None:
    """Once per model in a process: its half-precision weights are computed in fp32."""
    if info.path in _UPCAST_NOTED:
        return
    _UPCAST_NOTED.add(info.path)
    name = {torch.float16: "float16", torch.bfloat16: "bfloat16"}[saved]
    hint = " (--dtype bf16 keeps bf16 weights as saved)" if saved == torch.bfloat16 else ""
    print(
        f"note: {info.path}'s weights are saved in {name}; they are computed in fp32 (--dtype {dtype}), "
        f"the precision the results record, at twice their saved memory{hint}",
        file=sys.stderr,
    )


def in_memory_adapter(
    model: torch.nn.Module, tokenizer: Tokenizer, name: str, *, batch_size: int = 8, dtype: str = "fp32"
) -> ModelAdapter:
    """A ModelAdapter for a contextlab model built in this process (controls, tests, benchmarks),
    run as a contextlab model whose positions may go past its context (RoPE)."""
    info = ModelInfo(
        id=name,
        kind="contextlab",
        path="-",
        architecture=name,
        n_params=sum(p.numel() for p in model.parameters()),
        context=int(model.config.context),
        extends_beyond=True,
        tokenizer=tokenizer.spec(),
    )
    return ModelAdapter(model, tokenizer, info, dtype=dtype, batch_size=batch_size)


def load_model(
    path: str | os.PathLike,
    *,
    dtype: str = "fp32",
    batch_size: int = 8,
    device: str = "cpu",
    step: int | None = None,
) -> ModelAdapter:
    """A contextlab run/checkpoint/export or a local HF model folder (``inference.open_model``)
    -> ModelAdapter."""
    from contextlab.inference import open_model

    model, tok, info = open_model(path, step, device=device)
    return ModelAdapter(model, tok, info, dtype=dtype, batch_size=batch_size, device=device)
