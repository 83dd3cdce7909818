"""Attention weights of a Hugging Face model, for analysis only: transformers' own.

A transformers model attends through SDPA (or a flash kernel), which never forms the weights. For
the analysis the model is switched to its eager attention (``set_attn_implementation("eager")``,
put back on exit), under which every attention module returns the weights it multiplies the values
by; a forward hook on each decoder layer's attention module hands them to ``on_weights`` one layer
at a time (``output_attentions`` would keep every layer's (B, nh, T, T) at once). Eager attention is
another kernel than the one the model runs by default, so the first batch also runs as the model
runs it: the largest difference between the base model's last hidden states under the two is
``max_abs_diff`` (the analysis's ``max_abs_diff_vs_model``), and when the difference's root mean
square is above ``CHECK_TOL`` of the states' (``CHECK_TOL_LOW`` for weights in bf16 or fp16, whose
two kernels round differently: 1.4% of the largest state in a 4-layer Llama) the analysis stops, as
the contextlab path does when its recomputed weights do not reproduce the module's output (here in
one line, a failed step of a profile: the disagreement is the model's code's, not contextlab's). The
weights are read in the dtype the model was loaded in (a bf16 checkpoint stays bf16), then averaged
in fp32.

Trade-off: the attention modules are found by their class name (``...Attention``, the outermost
such module of each numbered layer), which is how transformers names them; a model whose attention
module is named otherwise, or returns no weights under eager attention, is refused in one line
rather than read some other way.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from torch import Tensor

from contextlab.errors import UserError
from contextlab.models.special_tokens import with_lead

CHECK_TOL = 1e-4  # largest rms(eager - default) / rms(default) of the last hidden states, fp32 weights
CHECK_TOL_LOW = 5e-2  # the same for weights in bf16 or fp16


def attention_modules(model: torch.nn.Module, what: str) -> dict[int, tuple[str, torch.nn.Module]]:
    """{layer number: (name, module)}: the outermost module named ``...Attention`` of every numbered layer
    of ``model.base_model``; one line when there is none, or two in one layer (not a decoder's)."""
    found: dict[int, tuple[str, torch.nn.Module]] = {}
    for name, module in getattr(model, "base_model", model).named_modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        if any(name.startswith(f"{outer}.") for outer, _ in found.values()):
            continue  # inside an attention module already kept
        layer = next((int(p) for p in name.split(".") if re.fullmatch(r"\d+", p)), None)
        if layer is None:
            continue
        if layer in found:
            raise UserError(
                f"{what}: layer {layer} of {type(model).__name__} has two attention modules "
                f"({found[layer][0]}, {name}); analyze attention reads decoder-only models"
            )
        found[layer] = (name, module)
    if not found:
        raise UserError(
            f"{what}: {type(model).__name__} has no module named ...Attention in numbered layers; analyze "
            "attention cannot find where it attends"
        )
    return found


class HFAttentionProbe:
    """Hooks on the attention module of every decoder layer of a transformers model, run eager:
    ``on_weights("blocks.<layer>.attn", weights (B, nh, T, T))`` per layer; ``run(idx)`` runs the base model.

    Use as a context manager; the hooks are removed and the model's attention put back on exit.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        on_weights: Callable[[str, Tensor], None],
        what: str,
        lead: list[int] = (),
    ):
        self.model, self.on_weights, self.what = model, on_weights, what
        self.lead = list(lead)  # tokens the model reads first (its BOS): run, then cut from the weights
        self.lead_share: dict[int, list[float]] = {}  # layer -> per batch, the mean attention they take
        self.max_abs_diff = 0.0
        self._modules = attention_modules(model, what)
        self._original = getattr(model.config, "_attn_implementation", None) or "eager"
        self._handles: list = []
        self._checked = False
        self._active = False

    def __enter__(self) -> HFAttentionProbe:
        self._set("eager")
        for layer, (name, module) in sorted(self._modules.items()):
            self._handles.append(module.register_forward_hook(self._hook(layer, name)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._set(self._original)

    def _set(self, implementation: str) -> None:
        try:
            self.model.set_attn_implementation(implementation)
        except (AttributeError, ValueError, ImportError) as e:
            raise UserError(
                f"{self.what}: {type(self.model).__name__} cannot switch to its {implementation} attention "
                f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); analyze attention reads the "
                "weights eager attention forms"
            ) from None

    def _hook(self, layer: int, name: str):
        def hook(module, args, output):
            if not self._active:
                return
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if not isinstance(weights, Tensor) or weights.dim() != 4 or weights.size(-1) != weights.size(-2):
                raise UserError(
                    f"{self.what}: {name} ({type(module).__name__}) returns no attention weights under "
                    "eager attention; analyze attention cannot read them"
                )
            weights = weights.float()
            if self.lead:  # the text's queries over the text's keys, renormalised; the lead's share kept
                n = len(self.lead)
                self.lead_share.setdefault(layer, []).append(float(weights[..., n:, :n].sum(-1).mean()))
                weights = weights[..., n:, n:]
                weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-30)
            self.on_weights(f"blocks.{layer}.attn", weights)

        return hook

    def _states(self, idx: Tensor) -> Tensor:
        out = self.model.base_model(input_ids=with_lead(idx, self.lead))
        return (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]).float()

    def run(self, idx: Tensor) -> None:
        """The base model on ``idx`` (B, T), eager, every layer's weights handed on; the first call
        also compares it with the model's own attention."""
        if not self._checked:
            self._set(self._original)
            reference = self._states(idx)
            self._set("eager")
        self._active = True
        try:
            states = self._states(idx)
        finally:
            self._active = False
        if not self._checked:
            self._checked = True
            self.max_abs_diff = float((states - reference).abs().max())
            rms = lambda t: float(t.double().pow(2).mean().sqrt())
            relative = rms(states - reference) / max(rms(reference), 1e-12)
            low = next(self.model.parameters()).dtype in (torch.bfloat16, torch.float16)
            tol = CHECK_TOL_LOW if low else CHECK_TOL
            if not relative <= tol:  # also catches NaN; the model's (its eager code's), not ours: one line
                raise UserError(
                    f"{self.what}: {type(self.model).__name__} under eager attention differs from its "
                    f"{self._original} attention by {relative:.1e} of its last hidden states (root mean "
                    f"square; more than {tol:.0e}); the weights read would not be the model's"
                )
