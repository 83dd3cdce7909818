"""Hugging Face export of the GPT variants (ContextLM, MTP), on top of ``contextlab.models.hf``.

- MTP: the next-token model (trunk + head 1 + final norm + unembedding) *is* a GPT, so it
  is exported as an ordinary ``contextlab-gpt`` folder; the extra heads are training-only.
- ContextLM: the predictor feeds every prediction, so it gets its own model type
  ``contextlab-contextlm``: ``ContextlabContextLMForCausalLM`` is the GPT wrapper holding a
  ``ContextLM`` under the same ``gpt`` attribute (weights map 1:1, logits bit for bit,
  ``generate`` works without a KV cache like the GPT's).

Importing this module registers ``contextlab-contextlm`` with ``AutoConfig`` /
``AutoModelForCausalLM`` (as importing ``hf`` does for the GPT). The export reuses
``export_to_hf`` into a private folder, switches its model type, then renames it into
place, so a crash never leaves a half export nor a ContextLM labelled as a plain GPT.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from transformers import AutoConfig, AutoModelForCausalLM

from contextlab.io import staged_dir
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.gpt import GPTConfig
from contextlab.models.hf import _HF_NAME, ContextlabGPTConfig, ContextlabGPTForCausalLM, export_to_hf
from contextlab.models.mtp import MTPModel

CONTEXTLM_TYPE = "contextlab-contextlm"
_EXTRA = [f.name for f in dataclasses.fields(ContextLMConfig) if f.name not in GPTConfig.__dataclass_fields__]


class ContextlabContextLMConfig(ContextlabGPTConfig):
    """ContextlabGPTConfig plus ContextLM's chunk_size, predictor_layers, encoder_layers, fusion."""

    model_type = CONTEXTLM_TYPE

    def __init__(self, chunk_size=4, predictor_layers=2, encoder_layers=0, fusion="gated", **kwargs):
        self.chunk_size, self.predictor_layers = chunk_size, predictor_layers
        self.encoder_layers, self.fusion = encoder_layers, fusion
        super().__init__(**kwargs)

    def to_arch_config(self) -> ContextLMConfig:
        fields = {k: getattr(self, _HF_NAME.get(k, k)) for k in GPTConfig.__dataclass_fields__}
        return ContextLMConfig(**fields, **{k: getattr(self, k) for k in _EXTRA})


class ContextlabContextLMForCausalLM(ContextlabGPTForCausalLM):
    """transformers face of a ContextLM (same forward, loss and generate as the GPT wrapper)."""

    config_class = ContextlabContextLMConfig

    def __init__(self, config: ContextlabContextLMConfig, gpt: ContextLM | None = None):
        super().__init__(config, gpt=gpt if gpt is not None else ContextLM(config.to_arch_config()))


def register_archs_with_transformers() -> None:
    AutoConfig.register(CONTEXTLM_TYPE, ContextlabContextLMConfig, exist_ok=True)
    AutoModelForCausalLM.register(ContextlabContextLMConfig, ContextlabContextLMForCausalLM, exist_ok=True)


register_archs_with_transformers()


def export_arch_to_hf(
    model,
    out_dir: str | os.PathLike,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    extra_config: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Export a GPT, an MTPModel (as its next-token GPT) or a ContextLM as a HF folder."""
    model = getattr(model, "_orig_mod", model)
    if isinstance(model, MTPModel):
        extra = {**(extra_config or {}), "arch": "mtp", "trained_heads": model.config.n_future}
        return export_to_hf(
            model.to_gpt(), out_dir, tokenizer_dir=tokenizer_dir, extra_config=extra, overwrite=overwrite
        )
    if not isinstance(model, ContextLM):
        return export_to_hf(
            model, out_dir, tokenizer_dir=tokenizer_dir, extra_config=extra_config, overwrite=overwrite
        )
    out = Path(out_dir)
    with staged_dir(out, overwrite=overwrite, what="export folder") as staged:
        export_to_hf(
            model,
            staged,
            tokenizer_dir=tokenizer_dir,
            extra_config={**(extra_config or {}), "arch": "contextlm"},
        )
        cfg_file = staged / "config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["model_type"] = CONTEXTLM_TYPE
        cfg["architectures"] = [ContextlabContextLMForCausalLM.__name__]
        cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out
