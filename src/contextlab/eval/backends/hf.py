"""The Hugging Face backend: any local causal LM folder, and a run that continued one.

The model is called as ``transformers`` models are (``input_ids``, ``output_hidden_states``);
the opener (``contextlab.inference``) loads it with the folder's ``tokenizer.json``.
Log-probabilities of many positions (``output_rows``) come from the model's base (its layers and
final norm) with its own output layer applied a chunk of rows at a time, as the contextlab backend
does: a whole forward would return every logit at once, and 8 rows of 32,768 tokens of a 50k
vocabulary are 53 GB of fp32 (a Qwen2 profile died there). That is the model's own answer only if
its logits are nothing but the output layer of the base's last state; some scale or cap them
after it (Gemma 2's soft cap, Cohere's scale), so the first call checks the two ways agree on 8
tokens and a model where they do not gets its whole logits, as before. A layer's states and the
last token's log-probability come from one forward pass that computes the last position's logits
only (``logits_to_keep``).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

import torch
from torch import Tensor

from contextlab.errors import UserError
from contextlab.eval.backends.base import Autocast, chunked_logprobs, logprob_chunk
from contextlab.models.special_tokens import with_lead, without_lead


def cache_name() -> str:
    """What ``transformers`` calls a model's KV cache (argument and output): ``cache`` from 5.24 on,
    ``past_key_values`` before."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class HFBackend:
    def __init__(self, model: torch.nn.Module, autocast: Autocast, lm_prefix=()):
        self.model = model
        self.autocast = autocast
        self.lead = list(lm_prefix)  # put before every input, cut from every output (a BOS, a mode token)
        # whether the model computes only its last positions' logits when asked (transformers >= 4.45)
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._plain_head: bool | None = None  # logits = output layer(base's last state)? (checked once)

    def _in(self, idx: Tensor) -> Tensor:
        return with_lead(idx, self.lead)

    def _out(self, t: Tensor) -> Tensor:
        return without_lead(t, self.lead)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def logits(self, idx: Tensor) -> Tensor:
        with self.autocast():
            return self._out(self.model(input_ids=self._in(idx)).logits)[..., : self.vocab_size]

    def output_rows(self, idx: Tensor) -> Callable[[int, int], Tensor]:
        if self._plain_head is None:
            self._plain_head = self._head_is_plain(idx[:1, :8])
        if not self._plain_head:  # the model's own logits, whole
            logits = self.logits(idx)
            logits = logits.reshape(-1, logits.size(-1))  # (B*T, V)
            return lambda a, b: logits[a:b]
        head = self.model.get_output_embeddings()
        with self.autocast():
            hidden = self._base_states(idx)  # (B, T, C), the final norm applied
        h = hidden.reshape(-1, hidden.size(-1))  # (B*T, C)
        return lambda a, b: head(h[a:b])[:, : self.vocab_size]  # (b-a, V), called under autocast

    def _base_states(self, idx: Tensor) -> Tensor:
        out = self.model.base_model(input_ids=self._in(idx))
        return self._out(out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0])

    def _head_is_plain(self, idx: Tensor) -> bool:
        """Whether the model's logits are its output layer applied to its base's last states: checked on
        ``idx`` (a few tokens) against the whole forward; any failure to take that path is a no."""
        head = self.model.get_output_embeddings()
        if head is None or self.model.base_model is self.model:
            return False
        try:
            with self.autocast():
                mine = head(self._base_states(idx))[..., : self.vocab_size].float()
                theirs = self.logits(idx).float()
        except (TypeError, AttributeError, ValueError, RuntimeError):
            return False
        return mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=1e-3, atol=1e-3)

    def last_logits(self, idx: Tensor) -> Tensor:
        keep = {"logits_to_keep": 1} if self.keeps_logits else {}  # else the model computes them all
        with self.autocast():
            return self.model(input_ids=self._in(idx), **keep).logits[:, -1, : self.vocab_size]  # (B, V)

    def continuation_logprobs(self, prefix: Tensor, conts: Tensor, lengths: list[int]) -> Tensor | None:
        """As the contextlab backend's: the prefix (P,) runs once with ``use_cache=True`` (only its last
        position's logits when the model takes ``logits_to_keep``); each continuation then runs on a copy
        of that cache (at most two caches in memory, whatever k is). None when the model returns no
        ``transformers`` Cache (the caller scores whole sequences)."""
        done = self.continue_prompt(prefix, conts, lengths)
        return None if done is None else done[0]

    def continue_prompt(
        self, prefix: Tensor, conts: Tensor, lengths: list[int], new_tokens: int = 0, stop_ids=()
    ) -> tuple[Tensor, list[int]] | None:
        """``continuation_logprobs``, then up to ``new_tokens`` of greedy decoding from the same prefill
        (ending at a ``stop_ids`` token, not kept) on the cache the continuations leave untouched."""
        from transformers import Cache

        k, L = conts.shape
        keep = {"logits_to_keep": 1} if self.keeps_logits else {}
        name = cache_name()
        with self.autocast():
            out = self.model(input_ids=self._in(prefix[None]), use_cache=True, **keep)
            past = out.get(name) if hasattr(out, "get") else None
            if (max(lengths) > 1 or new_tokens > 1) and not isinstance(past, Cache):
                return None
            first = out.logits[0, -1, : self.vocab_size]  # (V,) predicts each continuation's first token
            logits = first.expand(k, L, -1).clone()
            longer = [i for i, n in enumerate(lengths) if n > 1]
            for i in longer:
                n = lengths[i]
                last = i == longer[-1] and new_tokens <= 1
                cache = past if last else copy.deepcopy(past)  # the last user may use it up
                rest = self.model(input_ids=conts[i : i + 1, : n - 1], use_cache=True, **{name: cache}).logits
                logits[i, 1:n] = rest[0, :, : self.vocab_size]
            generated = self._greedy(first, past, new_tokens, set(stop_ids))
        flat = logits.reshape(k * L, -1)
        rows = lambda a, b: flat[a:b]
        lp = chunked_logprobs(rows, conts.reshape(-1), self.autocast, logprob_chunk(self.vocab_size))
        return lp.view(k, L), generated

    def _greedy(self, logits: Tensor, past, new_tokens: int, stop_ids: set[int]) -> list[int]:
        """Greedy tokens after a prefill whose last logits are ``logits`` (V,) and whose cache is ``past``."""
        out: list[int] = []
        name = cache_name()
        while len(out) < new_tokens:
            token = int(logits.float().argmax())
            if token in stop_ids:
                break
            out.append(token)
            if len(out) < new_tokens:
                step = torch.tensor([[token]], device=logits.device)
                res = self.model(input_ids=step, use_cache=True, **{name: past})
                logits = res.logits[0, -1, : self.vocab_size]
                past = res.get(name) if hasattr(res, "get") else past
        return out

    def _states_and_last_logits(self, idx: Tensor, layer: int, what: str) -> tuple[Tensor, Tensor]:
        """One forward: the residual stream after block ``layer`` (B, T, C) and the last position's
        logits (B, V) (only those computed, when the model takes ``logits_to_keep``)."""
        keep = {"logits_to_keep": 1} if self.keeps_logits else {}
        with self.autocast():
            out = self.model(input_ids=self._in(idx), output_hidden_states=True, **keep)
        states = out.hidden_states
        if not -len(states) <= layer < len(states):
            raise UserError(f"layer {layer} does not exist; {what} has {len(states) - 1} blocks")
        return self._out(states[layer]), out.logits[:, -1, : self.vocab_size]

    def hidden_states(self, idx: Tensor, layer: int, what: str) -> Tensor:
        return self._states_and_last_logits(idx, layer, what)[0]

    def layer_and_last_logprob(self, idx: Tensor, layer: int, what: str) -> tuple[Tensor, Tensor]:
        h, logits = self._states_and_last_logits(idx[:, :-1], layer, what)  # one pass for both
        return h, torch.log_softmax(logits.float(), dim=-1).gather(1, idx[:, -1:])[:, 0]

    def generate_many(
        self, prompts, max_new_tokens, sampling, stop_ids, stop_strings, detokenize, on_token
    ) -> list[list[int]]:
        """Several prompts at once through ``transformers``' generate (``hf_generate.py``)."""
        from contextlab.eval.backends.hf_generate import hf_generate_many

        return hf_generate_many(
            self.model,
            [self.lead + list(p) for p in prompts],
            max_new_tokens,
            sampling,
            stop_ids,
            stop_strings,
            detokenize,
            on_token,
            self.autocast,
        )

    def generate(self, prompt, max_new_tokens: int, stop, on_token) -> list[int]:
        """Greedy continuation with the model's own cache (``use_cache=True``); a model that returns
        no cache gets the whole sequence at every step."""
        name = cache_name()
        ids = torch.as_tensor([self.lead + list(prompt)], device=self.model.device)  # (1, T)
        out: list[int] = []
        step_in, past = ids, None
        for _ in range(max_new_tokens):
            with self.autocast():
                res = self.model(input_ids=step_in, use_cache=True, **{name: past})
            nxt = int(res.logits[0, -1, : self.vocab_size].float().argmax())
            if nxt in stop:
                break
            out.append(nxt)
            on_token(0, nxt)
            ids = torch.cat([ids, ids.new_tensor([[nxt]])], dim=1)
            past = res.get(name) if hasattr(res, "get") else None
            step_in = ids if past is None else ids[:, -1:]
        return out
