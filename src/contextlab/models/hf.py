"""Hugging Face interop: export a contextlab model, load any local HF causal LM, load exports back.

An export is an ordinary ``save_pretrained`` folder (``config.json`` + ``model.safetensors``)
of one of two model types: ``contextlab-gpt`` (a ``GPT``; an MTP model exports its
next-token GPT, see ``models/hf_archs.py``) and ``contextlab-contextlm`` (a ``ContextLM``,
whose predictor feeds every prediction). ``ContextlabGPTForCausalLM`` wraps the model under
the attribute ``gpt``, so the state dict maps 1:1 (keys gain a ``gpt.`` prefix) and logits
are bit-for-bit those of contextlab. The config.json keys are the model config's fields
(``tie_embeddings`` under HF's name): the dataclasses stay their one declaration.

Registration, the trade-off: ``transformers`` finds architectures only through its own
table or through ``trust_remote_code`` (it has no plugin entry points), so it cannot
discover the contextlab types by itself. Importing this module registers both with
``AutoConfig`` / ``AutoModelForCausalLM`` (idempotent); after ``import contextlab.models.hf``
a plain ``AutoModelForCausalLM.from_pretrained(export_dir)`` works without
``trust_remote_code``, and no modeling code is copied into the folder. We chose this
explicit import over hidden import-order tricks; contextlab's own loaders
(``load_hf_causal_lm``) always register first.

Generation re-runs the full sequence at every step (no KV cache): correct and simple,
O(T^2) per sequence, fine for the short samples contextlab generates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

import contextlab
from contextlab.errors import UserError
from contextlab.io import staged_dir
from contextlab.models.contextlm import ContextLM, ContextLMConfig, ContextLMOptions
from contextlab.models.gpt import GPT, GPTConfig, current_fields

MODEL_TYPE = "contextlab-gpt"
CONTEXTLM_TYPE = "contextlab-contextlm"
_GPT_FIELDS = [f.name for f in dataclasses.fields(GPTConfig)]
_HF_NAME = {"tie_embeddings": "tie_word_embeddings"}  # GPTConfig field -> config.json key
_current_keys = current_fields  # config.json keys of older exports (block_size) under their current names


class ContextlabGPTConfig(PretrainedConfig):
    """The GPTConfig fields as a transformers config (plus HF's standard attribute names)."""

    model_type = MODEL_TYPE
    attribute_map = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "context",
        "tie_embeddings": "tie_word_embeddings",
    }

    def __init__(self, tie_word_embeddings=True, use_cache=False, **kwargs):
        # every GPTConfig field, its default from the dataclass; rope_extension, rope_factor and
        # rope_original_context (models/rope.py) are named so transformers' own rope logic never reads them
        kwargs = _current_keys(kwargs)
        _take_fields(self, GPTConfig, kwargs, skip=("tie_embeddings",))
        self.use_cache = use_cache  # no KV cache
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    @classmethod
    def from_gpt_config(cls, cfg: GPTConfig, **kwargs) -> ContextlabGPTConfig:
        return cls(**{_HF_NAME.get(k, k): v for k, v in dataclasses.asdict(cfg).items()}, **kwargs)

    def to_gpt_config(self) -> GPTConfig:
        return GPTConfig(**{k: getattr(self, _HF_NAME.get(k, k)) for k in _GPT_FIELDS})

    def build_model(self) -> GPT:
        """A fresh contextlab model of this config (from_pretrained then loads its weights)."""
        return GPT(self.to_gpt_config())


class ContextlabContextLMConfig(ContextlabGPTConfig):
    """ContextlabGPTConfig plus ContextLMOptions' fields (chunk_size, predictor_layers, ...)."""

    model_type = CONTEXTLM_TYPE

    def __init__(self, **kwargs):
        _take_fields(self, ContextLMOptions, kwargs)
        super().__init__(**kwargs)

    def to_arch_config(self) -> ContextLMConfig:
        options = {f.name: getattr(self, f.name) for f in dataclasses.fields(ContextLMOptions)}
        return ContextLMConfig(**dataclasses.asdict(self.to_gpt_config()), **options)

    def build_model(self) -> ContextLM:
        return ContextLM(self.to_arch_config())


def _take_fields(config: PretrainedConfig, cls: type, kwargs: dict, skip: tuple[str, ...] = ()) -> None:
    """Set each field of dataclass ``cls`` on ``config`` from kwargs (popped) or the field's default."""
    for f in dataclasses.fields(cls):
        if f.name not in skip:
            setattr(config, f.name, kwargs.pop(f.name, f.default))


class ContextlabGPTForCausalLM(PreTrainedModel, GenerationMixin):
    """transformers face of a contextlab GPT: logits, loss with the usual shift, generate()."""

    config_class = ContextlabGPTConfig
    base_model_prefix = "gpt"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    # transformers 5 maps tied target -> source; 4.x lists the tied keys
    _tied_weights_keys = (
        {"gpt.lm_head.weight": "gpt.wte.weight"}
        if int(transformers.__version__.split(".")[0]) >= 5
        else ["gpt.lm_head.weight"]
    )

    def __init__(self, config: ContextlabGPTConfig, gpt: GPT | None = None):
        super().__init__(config)
        self.gpt = gpt if gpt is not None else config.build_model()
        self.post_init()
        self.generation_config.use_cache = False

    def _init_weights(self, module):
        pass  # GPT initialises itself in its constructor; from_pretrained then loads every weight

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # there is no KV cache: generate must not create one

    def get_input_embeddings(self):
        return self.gpt.wte

    def get_output_embeddings(self):
        return self.gpt.lm_head

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}  # the full sequence, every step

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ):
        T = input_ids.size(1)
        attn_mask = None
        if attention_mask is not None and not bool(attention_mask.all()):  # padding (generate pads left)
            keep = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T) real keys
            pads_see_themselves = torch.eye(T, dtype=torch.bool, device=input_ids.device)  # no NaN rows
            attn_mask = keep | pads_see_themselves  # (B, 1, T, T); the model adds causality
            if position_ids is None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        out = self.gpt(
            input_ids,
            attn_mask=attn_mask,
            position_ids=position_ids,
            return_hidden=bool(output_hidden_states),
        )
        loss = None
        if labels is not None:  # predict token t+1 from positions <= t
            logits = out.logits[:, :-1].float()
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        # HF convention: n_layer + 1 states, embeddings first, the last one after the final norm
        hidden_states = (*out.layers[:-1], out.hidden) if output_hidden_states else None
        result = CausalLMOutputWithPast(loss=loss, logits=out.logits, hidden_states=hidden_states)
        use_dict = return_dict if return_dict is not None else self.config.return_dict
        return result if use_dict else result.to_tuple()


class ContextlabContextLMForCausalLM(ContextlabGPTForCausalLM):
    """transformers face of a ContextLM (same forward, loss and generate as the GPT wrapper)."""

    config_class = ContextlabContextLMConfig


def register_with_transformers() -> None:
    """Make AutoConfig / AutoModelForCausalLM know both contextlab model types (safe to call again)."""
    for config, model in (
        (ContextlabGPTConfig, ContextlabGPTForCausalLM),
        (ContextlabContextLMConfig, ContextlabContextLMForCausalLM),
    ):
        AutoConfig.register(config.model_type, config, exist_ok=True)
        AutoModelForCausalLM.register(config, model, exist_ok=True)


register_with_transformers()


def export_to_hf(
    model: GPT,
    out_dir: str | os.PathLike,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    extra_config: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a GPT or a ContextLM as a HF folder (config.json + model.safetensors [+ tokenizer/]) atomically.

    The folder is built beside out_dir and renamed into place, so a crash never leaves half
    an export. extra_config (provenance: tokenizer hash, resolved run config, ...) is stored
    under the "contextlab" key of config.json, with the format and code versions.
    """
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model shares the parameters
    out = Path(out_dir)
    if tokenizer_dir is not None and not Path(tokenizer_dir).is_dir():
        raise UserError(
            f"tokenizer folder {tokenizer_dir} does not exist; pass the folder holding the tokenizer files"
        )
    provenance = {
        "format_version": contextlab.FORMAT_VERSION,
        "contextlab_version": contextlab.__version__,
        **(extra_config or {}),
    }
    wrapper = ContextlabContextLMForCausalLM if isinstance(model, ContextLM) else ContextlabGPTForCausalLM
    config = wrapper.config_class.from_gpt_config(model.config, contextlab=provenance)
    with staged_dir(out, overwrite=overwrite, what="export folder") as tmp:
        wrapper(config, gpt=model).save_pretrained(tmp, safe_serialization=True)
        if tokenizer_dir is not None:
            shutil.copytree(tokenizer_dir, tmp / "tokenizer")
    return out


def _check_model_dir(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"model folder {p} does not exist; pass a local Hugging Face model folder")
    if not (p / "config.json").is_file():
        raise UserError(
            f"{p} is not a Hugging Face model folder (no config.json); pass the folder save_pretrained wrote"
        )
    return p


def load_hf_causal_lm(path: str | os.PathLike, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """Load any local HF causal LM folder (contextlab exports included), in eval mode, offline."""
    p = _check_model_dir(path)
    register_with_transformers()
    kwargs = {"dtype": dtype} if dtype is not None else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot load a causal LM from {p}: {first_line}") from e
    return model.eval()


def gpt_from_hf_export(path: str | os.PathLike) -> GPT:
    """Load a contextlab export back into a plain GPT (exact weights, fp32 or the saved dtype)."""
    from safetensors.torch import load_file

    p = _check_model_dir(path)
    cfg = _current_keys(json.loads((p / "config.json").read_text()))
    if cfg.get("model_type") != MODEL_TYPE:
        raise UserError(
            f"{p} holds a {cfg.get('model_type')!r} model, not a contextlab export; "
            "use load_hf_causal_lm for other Hugging Face models"
        )
    config = GPTConfig(**{k: cfg[_HF_NAME.get(k, k)] for k in _GPT_FIELDS if _HF_NAME.get(k, k) in cfg})
    weights = p / "model.safetensors"
    if not weights.is_file():
        raise UserError(f"{p} has no model.safetensors; re-export the model with export_to_hf")
    prefix = ContextlabGPTForCausalLM.base_model_prefix + "."
    state = {k.removeprefix(prefix): v for k, v in load_file(weights).items()}
    model = GPT(config)
    if config.tie_embeddings:
        state.setdefault("lm_head.weight", state["wte.weight"])  # tied: saved once
    model.load_state_dict(state, strict=True)
    return model
