"""Hugging Face interop: export a contextlab model, load any local HF causal LM, load exports back.

A contextlab export in its own format is a ``save_pretrained`` folder (``config.json`` +
``model.safetensors``) of one of two model types: ``contextlab-gpt`` (a ``GPT``; an MTP model
exports its next-token GPT, see ``models/hf/export.py``) and ``contextlab-contextlm`` (a
``ContextLM``, whose predictor feeds every prediction). The transformers implementation of both
is ``models/hf/remote/modeling_contextlab.py``, which imports only torch and transformers: every
export carries a copy of it and an ``auto_map``, so ``from_pretrained(dir,
trust_remote_code=True)`` loads it where contextlab is not installed. Its parameters keep
contextlab's names under ``gpt.``, so the state dict maps 1:1. The config.json keys are the
model config's fields (``tie_embeddings`` under HF's name). (A GPT of the Llama shape is
exported as a native Llama folder instead: ``models/hf/llama.py``.)

Registration, the trade-off: inside contextlab the same classes are registered with
``AutoConfig`` / ``AutoModelForCausalLM`` when this module is imported (idempotent), so
contextlab's own loaders (``load_hf_causal_lm``) read exports, old ones without ``auto_map``
included, without executing code from the folder. The subclasses here only add conversions to
and from contextlab's dataclass configs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_NAME

import contextlab
from contextlab.errors import UserError
from contextlab.io import follow_umask
from contextlab.models.contextlm import ContextLM, ContextLMConfig, ContextLMOptions
from contextlab.models.gpt import GPT, GPTConfig, current_fields
from contextlab.models.hf.checks import check_left_to_right, load_error
from contextlab.models.hf.remote import REMOTE_DIR, REMOTE_FILES
from contextlab.models.hf.remote import configuration_contextlab as remote_config
from contextlab.models.hf.remote import modeling_contextlab as remote
from contextlab.outputs import OutputKind, staged_dir

MODEL_TYPE = "contextlab-gpt"
CONTEXTLM_TYPE = "contextlab-contextlm"
_GPT_FIELDS = [f.name for f in dataclasses.fields(GPTConfig)]
_HF_NAME = {"tie_embeddings": "tie_word_embeddings"}  # GPTConfig field -> config.json key


class ContextlabGPTConfig(remote_config.ContextlabGPTConfig):
    """The GPTConfig fields as a transformers config (plus HF's standard attribute names)."""

    def __init__(self, **kwargs):  # transformers 5 replaces a config subclass's missing __init__
        super().__init__(**kwargs)

    @classmethod
    def from_gpt_config(cls, cfg: GPTConfig, **kwargs) -> ContextlabGPTConfig:
        return cls(**{_HF_NAME.get(k, k): v for k, v in dataclasses.asdict(cfg).items()}, **kwargs)

    def to_gpt_config(self) -> GPTConfig:
        return GPTConfig(**{k: getattr(self, _HF_NAME.get(k, k)) for k in _GPT_FIELDS})


class ContextlabContextLMConfig(remote_config.ContextlabContextLMConfig, ContextlabGPTConfig):
    """ContextlabGPTConfig plus ContextLMOptions' fields (chunk_size, predictor_layers, ...)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def to_arch_config(self) -> ContextLMConfig:
        options = {f.name: getattr(self, f.name) for f in dataclasses.fields(ContextLMOptions)}
        return ContextLMConfig(**dataclasses.asdict(self.to_gpt_config()), **options)


class ContextlabGPTForCausalLM(remote.ContextlabGPTForCausalLM):
    config_class = ContextlabGPTConfig


class ContextlabContextLMForCausalLM(remote.ContextlabContextLMForCausalLM):
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
    """Write a GPT or a ContextLM as a custom-code HF folder (config.json with auto_map +
    model.safetensors + the modeling files [+ tokenizer/]) atomically.

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
    with staged_dir(out, overwrite=overwrite, what="export folder", kind=EXPORT) as tmp:
        write_remote_code_model(model, tmp, extra_config)
        if tokenizer_dir is not None:
            shutil.copytree(tokenizer_dir, tmp / "tokenizer")
    return out


def is_export(folder: Path) -> bool:
    """Whether ``folder`` holds a contextlab export: a config.json with the "contextlab" entry every
    export writes (``provenance``); what ``--overwrite`` of an export may replace."""
    try:
        return isinstance(json.loads((Path(folder) / CONFIG_NAME).read_text()).get("contextlab"), dict)
    except (OSError, ValueError, AttributeError):
        return False


EXPORT = OutputKind(  # what --overwrite of an export may replace
    "a contextlab export (a folder written by `contextlab export`)",
    is_export,
    (
        "config.json",
        "generation_config.json",
        "*.safetensors",
        "*.safetensors.index.json",
        "*.py",
        "tokenizer",
        "tokenizer*.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "chat_template.*",
        "report.html",  # `contextlab report` of the folder: a page it writes again
    ),
)


def provenance(extra_config: dict | None) -> dict:
    """The "contextlab" entry of an export's config.json: format and code versions, then extra_config."""
    return {
        "format_version": contextlab.FORMAT_VERSION,
        "contextlab_version": contextlab.__version__,
        **(extra_config or {}),
    }


def write_remote_code_model(
    model: GPT, folder: Path, extra_config: dict | None = None, **config_extra
) -> None:
    """config.json (with auto_map), model.safetensors and the modeling files of ``model`` into ``folder``."""
    wrapper = ContextlabContextLMForCausalLM if isinstance(model, ContextLM) else ContextlabGPTForCausalLM
    config = wrapper.config_class.from_gpt_config(
        model.config, contextlab=provenance(extra_config), **config_extra
    )
    hf_model = wrapper(config).to(next(model.parameters()).dtype)  # saved in the model's dtype
    hf_model.gpt.load_state_dict(model.state_dict(), strict=True)
    hf_model.save_pretrained(folder, safe_serialization=True)
    follow_umask(folder.glob("*.safetensors"))  # safetensors writes 0o600
    names = {"AutoConfig": type(config).__mro__[1], "AutoModelForCausalLM": wrapper.__mro__[1]}
    cfg = json.loads((folder / CONFIG_NAME).read_text())
    cfg["auto_map"] = {
        auto: f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}" for auto, cls in names.items()
    }
    (folder / CONFIG_NAME).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for name in REMOTE_FILES:
        shutil.copyfile(REMOTE_DIR / name, folder / name)


def _check_model_dir(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"model folder {p} does not exist; pass a local Hugging Face model folder")
    if not (p / CONFIG_NAME).is_file():
        raise UserError(
            f"{p} is not a Hugging Face model folder (no config.json); pass the folder save_pretrained wrote"
        )
    return p


def load_hf_causal_lm(path: str | os.PathLike, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """Load any local HF causal LM folder (contextlab exports included), in eval mode, offline."""
    p = _check_model_dir(path)
    register_with_transformers()
    kwargs = {"dtype": dtype} if dtype is not None else {}
    trust = refuse_remote_code(p)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            p, local_files_only=True, trust_remote_code=trust, **kwargs
        )
    except (OSError, ValueError, KeyError) as e:
        raise UserError(load_error(p, e)) from e
    check_left_to_right(model, p)
    return model.eval()


TRUST_REMOTE_CODE = "CONTEXTLAB_TRUST_REMOTE_CODE"  # =1: run a model folder's own modeling code


def refuse_remote_code(p: Path) -> bool:
    """Whether to let transformers run the modeling code of folder ``p`` (its config.json's
    ``auto_map``): only when the user said so in ``CONTEXTLAB_TRUST_REMOTE_CODE=1``; otherwise one line
    naming the files and that switch (transformers asked "Do you wish to run the custom code? [y/N]"
    on the terminal, and failed without a word of how to say yes)."""
    try:
        cfg = json.loads((p / CONFIG_NAME).read_text())
        auto = cfg.get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return False
    if not auto or is_contextlab_export(cfg):  # an export's code is contextlab's own, registered above
        return False
    if os.environ.get(TRUST_REMOTE_CODE) == "1":
        return True
    names = [v for entry in (auto.values() if isinstance(auto, dict) else []) for v in _listed(entry)]
    files = sorted({v.split("--")[-1].split(".")[0] + ".py" for v in names})
    if _native(cfg.get("model_type")):  # transformers runs its own class of the type (as it does unasked)
        print(
            f"note: {p} maps to modeling code of its own ({', '.join(files)}); transformers' own "
            f"{cfg.get('model_type')} classes run it instead (set {TRUST_REMOTE_CODE}=1 to run the "
            "folder's code)",
            file=sys.stderr,
        )
        return False
    raise UserError(
        f"{p} runs on its own Python code ({', '.join(files) or 'auto_map in config.json'}), which "
        f"contextlab does not run unasked: read it, then set {TRUST_REMOTE_CODE}=1 to run it (as "
        "trust_remote_code=True does in transformers)"
    )


def _native(model_type) -> bool:
    """Whether transformers has classes of its own for ``model_type`` (Llama, Phi: a folder's auto_map
    is then an older copy of them, or a change to them that the user asks for by name)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


def _listed(entry) -> list[str]:
    """An auto_map entry's class paths (a tokenizer's is a list, with None for a missing one)."""
    return [str(v) for v in (entry if isinstance(entry, list) else [entry]) if v]


def is_gpt_export(cfg: dict) -> bool:
    """Whether a config.json is a contextlab GPT export: ``contextlab-gpt``, or the Llama form of one."""
    provenance = cfg.get("contextlab") or {}
    return cfg.get("model_type") == MODEL_TYPE or (
        cfg.get("model_type") == "llama" and isinstance(provenance.get("gpt_config"), dict)
    )


def is_contextlab_export(cfg: dict) -> bool:
    """Whether a config.json is a contextlab export that loads back as the model it was: a GPT
    export (either form) or a ``contextlab-contextlm`` one."""
    return is_gpt_export(cfg) or cfg.get("model_type") == CONTEXTLM_TYPE


def gpt_from_hf_export(path: str | os.PathLike) -> GPT:
    """Load a contextlab export back into the model it was, with its exact weights as saved: a
    plain GPT (either form), or a ContextLM (a GPT subclass) from a ``contextlab-contextlm`` folder."""
    from contextlab.models.archs import build_from_fields
    from contextlab.models.hf.llama import gpt_state_from_llama
    from contextlab.weights import read_safetensors as load_file

    p = _check_model_dir(path)
    cfg = current_fields(json.loads((p / CONFIG_NAME).read_text()))
    if not is_contextlab_export(cfg):
        raise UserError(
            f"{p} holds a {cfg.get('model_type')!r} model, not a contextlab export; "
            "use load_hf_causal_lm for other Hugging Face models"
        )
    weights = p / SAFE_WEIGHTS_NAME
    if not weights.is_file():
        raise UserError(f"{p} has no model.safetensors; re-export the model with export_to_hf")
    if cfg["model_type"] == "llama":  # the exact GPTConfig rides along in the provenance
        config = GPTConfig(**current_fields(cfg["contextlab"]["gpt_config"]))
        state = gpt_state_from_llama(load_file(weights), config)
        model = GPT(config)
    else:
        fields = {k: cfg[_HF_NAME.get(k, k)] for k in _GPT_FIELDS if _HF_NAME.get(k, k) in cfg}
        if cfg["model_type"] == CONTEXTLM_TYPE:  # the ContextLM's own options sit beside the GPT's
            fields.update(
                {f.name: cfg[f.name] for f in dataclasses.fields(ContextLMOptions) if f.name in cfg}
            )
        model = build_from_fields("contextlm" if cfg["model_type"] == CONTEXTLM_TYPE else "gpt", fields)
        prefix = ContextlabGPTForCausalLM.base_model_prefix + "."
        state = {k.removeprefix(prefix): v for k, v in load_file(weights).items()}
    if model.config.tie_embeddings:
        state.setdefault("lm_head.weight", state["wte.weight"])  # tied: saved once
    model.load_state_dict(state, strict=True)
    return model
