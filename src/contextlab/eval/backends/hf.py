"""The Hugging Face backend: any local causal LM folder, and a run that continued one.

The model is called as ``transformers`` models are (``input_ids``, ``output_hidden_states``);
the opener (``contextlab.inference``) loads it with the folder's ``tokenizer.json``.
Trade-off: such models return their logits in one piece (they compute them anyway), so only
the log-softmax is chunked, and a layer plus the last token's log-probability take two
forward passes: any causal LM works, at the price of a second forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from contextlab.errors import UserError
from contextlab.eval.backends.base import Autocast, chunked_logprobs, logprob_chunk


class HFBackend:
    def __init__(self, model: torch.nn.Module, autocast: Autocast, lm_prefix=()):
        if lm_prefix:
            raise UserError(
                "a continued Hugging Face model that runs left to right only after mode tokens (UL2) "
                "cannot be evaluated yet; evaluate a run trained with another objective"
            )
        self.model = model
        self.autocast = autocast

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def logits(self, idx: Tensor) -> Tensor:
        with self.autocast():
            return self.model(input_ids=idx).logits[..., : self.vocab_size]

    def output_rows(self, idx: Tensor) -> Callable[[int, int], Tensor]:
        logits = self.logits(idx)
        logits = logits.reshape(-1, logits.size(-1))  # (B*T, V)
        return lambda a, b: logits[a:b]

    def hidden_states(self, idx: Tensor, layer: int, what: str) -> Tensor:
        with self.autocast():
            states = self.model(input_ids=idx, output_hidden_states=True).hidden_states
            if not -len(states) <= layer < len(states):
                raise UserError(f"layer {layer} does not exist; {what} has {len(states) - 1} blocks")
            return states[layer]

    def layer_and_last_logprob(self, idx: Tensor, layer: int, what: str) -> tuple[Tensor, Tensor]:
        h = self.hidden_states(idx[:, :-1], layer, what)
        rows, chunk = self.output_rows(idx[:, :-1]), logprob_chunk(self.vocab_size)
        lp = chunked_logprobs(rows, idx[:, 1:].reshape(-1), self.autocast, chunk)
        return h, lp.view(idx.size(0), -1)[:, -1]

    def generate_many(
        self, prompts, max_new_tokens, sampling, stop_ids, stop_strings, detokenize, on_token
    ) -> list[list[int]]:
        """Several prompts at once through ``transformers``' generate (``hf_generate.py``)."""
        from contextlab.eval.backends.hf_generate import hf_generate_many

        return hf_generate_many(
            self.model,
            prompts,
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
        from transformers.modeling_outputs import CausalLMOutputWithPast

        # transformers >= 5.24 calls the cache ``cache``, earlier versions ``past_key_values``
        name = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
        ids = torch.as_tensor([list(prompt)], device=self.model.device)  # (1, T)
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
