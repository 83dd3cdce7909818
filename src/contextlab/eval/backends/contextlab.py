"""The contextlab backend: a contextlab model (run, checkpoint or export) run as the plain GPT.

GPT, ContextLM and MTP models all give next-token logits through ``trunk`` (final normed
hidden states and any requested layer) and ``unembed`` (the output layer). A model that runs
left to right only after a few tokens (UL2 after its ``[S]`` mode token) gets them put before
every input and their positions cut from every output, so evaluations never see them. Trade-off: the
output layer is applied in row chunks, so the full (B, T, V) logits in fp32 never exist at
once, and a layer's state and the last token's log-probability come from one trunk pass.
Opening such models is ``contextlab.inference``'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from contextlab.errors import UserError
from contextlab.eval.backends.base import Autocast, chunked_logprobs, logprob_chunk
from contextlab.models.special_tokens import with_lead, without_lead


class ContextlabBackend:
    def __init__(self, model: torch.nn.Module, autocast: Autocast, lm_prefix: Sequence[int] = ()):
        self.model = model
        self.autocast = autocast
        self.lead = list(lm_prefix)
        self.speculative_stats = None  # SpeculativeStats of this backend's speculative decoding, if any

    def _in(self, idx: Tensor) -> Tensor:
        return with_lead(idx, self.lead)

    def _out(self, t: Tensor) -> Tensor:
        return without_lead(t, self.lead)

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def logits(self, idx: Tensor) -> Tensor:
        with self.autocast():
            return self._out(self.model(self._in(idx)).logits)

    def output_rows(self, idx: Tensor) -> Callable[[int, int], Tensor]:
        with self.autocast():
            hidden, _ = self.model.trunk(self._in(idx))  # (B, T, C), final norm applied
        h = self._out(hidden).reshape(-1, hidden.size(-1))  # (B*T, C)
        return lambda a, b: self.model.unembed(h[a:b])  # (b-a, V), called under autocast

    def last_logits(self, idx: Tensor) -> Tensor:
        with self.autocast():
            hidden, _ = self.model.trunk(self._in(idx))  # (B, T, C), final norm applied
            return self.model.unembed(hidden[:, -1])  # (B, V)

    def continuation_logprobs(self, prefix: Tensor, conts: Tensor, lengths: list[int]) -> Tensor | None:
        """fp32 (k, L) log p(conts[i, j] | prefix, conts[i, :j]) for j < lengths[i], for a prefix (P,) and k
        right-padded continuations (k, L) (entries past a row's length are unused): the prefix runs once
        into a KV cache, then each continuation in turn appends to it and is rolled back (``truncate``),
        so memory stays one cache whatever k is and the numbers are those of k full forward passes up to
        rounding. None for a model without a KV cache (the caller scores whole sequences)."""
        done = self.continue_prompt(prefix, conts, lengths)
        return None if done is None else done[0]

    def continue_prompt(
        self, prefix: Tensor, conts: Tensor, lengths: list[int], new_tokens: int = 0, stop_ids=()
    ) -> tuple[Tensor, list[int]] | None:
        """``continuation_logprobs``, then up to ``new_tokens`` of greedy decoding from the same prefill
        (ending at a ``stop_ids`` token, not kept): one pass over a long prompt serves both."""
        new_cache = getattr(self.model, "new_cache", None)
        if new_cache is None:
            return None
        k, L = conts.shape
        pre = self._in(prefix[None])
        cache = new_cache(1, pre.size(1) + max(L, new_tokens))
        with self.autocast():
            first, _ = self.model.trunk(pre, cache=cache)  # (1, P, C)
            hidden = first[:, -1:].expand(k, L, -1).clone()  # row i, column 0 predicts conts[i, 0]
            for i, n in enumerate(lengths):
                if n > 1:
                    rest, _ = self.model.trunk(conts[i : i + 1, : n - 1], cache=cache)  # (1, n - 1, C)
                    hidden[i, 1:n] = rest[0]
                    cache.truncate(pre.size(1))
            generated = self._greedy(first[:, -1], cache, new_tokens, set(stop_ids))
        h = hidden.reshape(k * L, -1)
        rows = lambda a, b: self.model.unembed(h[a:b])  # called under autocast
        lp = chunked_logprobs(rows, conts.reshape(-1), self.autocast, logprob_chunk(self.vocab_size))
        return lp.view(k, L), generated

    def _greedy(self, last: Tensor, cache, new_tokens: int, stop_ids: set[int]) -> list[int]:
        """Greedy tokens after a prefilled ``cache`` whose last final state is ``last`` (1, C)."""
        out: list[int] = []
        logits = self.model.unembed(last).float()  # (1, V)
        while len(out) < new_tokens:
            token = int(logits[0].argmax())
            if token in stop_ids:
                break
            out.append(token)
            if len(out) < new_tokens:
                step = torch.tensor([[token]], device=last.device)
                hidden, _ = self.model.trunk(step, cache=cache)  # (1, 1, C)
                logits = self.model.unembed(hidden[:, -1]).float()
        return out

    def _check_layer(self, layer: int, what: str) -> None:
        """One line for a layer the model does not have (the trunk took it modulo n_layer + 1, so
        layer 4 of a 2-block model was read as layer 1 and recorded as 4), as the HF backend says it."""
        n = self.model.config.n_layer
        if not -(n + 1) <= layer <= n:
            raise UserError(
                f"layer {layer} does not exist; {what} has {n} blocks (layers 0 = embeddings to {n}, or "
                f"-{n + 1} to -1 from the end)"
            )

    def hidden_states(self, idx: Tensor, layer: int, what: str) -> Tensor:
        self._check_layer(layer, what)
        with self.autocast():
            _, layers = self.model.trunk(self._in(idx), return_hidden=[layer])
        return self._out(layers[0])

    def layer_and_last_logprob(self, idx: Tensor, layer: int, what: str) -> tuple[Tensor, Tensor]:
        self._check_layer(layer, what)
        with self.autocast():  # one pass: the layer's state and the final state's last-token logits
            hidden, layers = self.model.trunk(self._in(idx[:, :-1]), return_hidden=[layer])  # (b, T, C)
            logits = self.model.unembed(hidden[:, -1])  # (b, V)
        lp = torch.log_softmax(logits.float(), dim=-1).gather(1, idx[:, -1:])[:, 0]  # (b,)
        return self._out(layers[0]), lp

    def _decode(self, fn, prompts, max_new_tokens: int, **kw) -> list[list[int]]:
        """``fn`` (a decoder of ``contextlab.inference``) on this model, after its prefix tokens."""
        return fn(self.model, prompts, max_new_tokens, lead=self.lead, autocast=self.autocast, **kw)

    def generate(
        self, prompt: Sequence[int], max_new_tokens: int, stop: Sequence[int], on_token
    ) -> list[int]:
        """Greedy continuation with the model's KV cache (inference/decode.py)."""
        from contextlab.inference.decode import generate

        return self._decode(generate, [list(prompt)], max_new_tokens, stop_ids=stop, on_token=on_token)[0]

    def generate_many(
        self, prompts, max_new_tokens, sampling, stop_ids, stop_strings, detokenize, on_token
    ) -> list[list[int]]:
        """Several prompts in one left-padded batch with the KV cache (inference/decode.py)."""
        from contextlab.inference.decode import generate

        stops = dict(stop_ids=stop_ids, stop_strings=stop_strings, detokenize=detokenize, on_token=on_token)
        return self._decode(generate, prompts, max_new_tokens, sampling=sampling, **stops)

    def generate_speculative(
        self, prompts, max_new_tokens, sampling, stop_ids, stop_strings, detokenize, on_token
    ) -> list[list[int]]:
        """Greedy continuations by self-speculative decoding of an MTP model (inference/speculative.py);
        the same arguments as ``generate_many`` (``sampling`` is greedy: the adapter checks it)."""
        from contextlab.inference.speculative import SpeculativeStats, speculative_generate

        if self.speculative_stats is None:  # summed over the batches of one command
            self.speculative_stats = SpeculativeStats(int(getattr(self.model.config, "n_future", 1)))
        stops = dict(stop_ids=stop_ids, stop_strings=stop_strings, detokenize=detokenize, on_token=on_token)
        return self._decode(
            speculative_generate, prompts, max_new_tokens, stats=self.speculative_stats, **stops
        )
