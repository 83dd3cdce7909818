"""Any Hugging Face causal LM as a contextlab training model: load, extend its RoPE, wrap, save.

``HFCausalLM`` gives a ``transformers`` model (Llama-, GPT-NeoX-, Qwen-style: anything
``AutoModelForCausalLM`` loads) the face objectives call on a contextlab GPT:
``model(idx, attn_mask=..., is_causal=...) -> GPTOutput`` with logits (and the last hidden
state when asked). The HF model sits unchanged under ``.hf``, so its state dict is HF's own
with an ``hf.`` prefix and ``save_pretrained`` writes the same format it was loaded from.

The trade-off: contextlab drives the model only through its public forward, so every
architecture ``transformers`` knows works, but only objectives that need nothing more than
causal next-token logits (CLM, FIM) can train it. Attention masks (document masking, a
bidirectional prefix, MLM) would need each architecture's private mask plumbing; asking for
one is a clear error, not a silent causal fallback.

RoPE extension of an HF model is a config change made before the weights load (the
rotary module computes its frequencies when built): position interpolation becomes
``rope_type = "linear"``, YaRN ``"yarn"`` (the same frequencies as ``models/rope.py``),
NTK-aware scaling and a CodeLlama base change a new ``rope_theta``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.utils import CONFIG_NAME

from contextlab.errors import UserError
from contextlab.io import follow_umask
from contextlab.models.gpt import GPTOutput
from contextlab.models.hf.checks import check_left_to_right, load_error
from contextlab.models.hf.custom_code import EXPORT
from contextlab.models.rope import ntk_base
from contextlab.models.special_tokens import with_lead, without_lead
from contextlab.outputs import staged_dir

LIMIT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)


class HFCausalLM(nn.Module):
    """A transformers causal LM behind the GPT forward signature; see the module docstring."""

    def __init__(self, hf: PreTrainedModel, lead: list[int] = ()):
        super().__init__()
        self.hf = hf
        self.config = hf.config  # the HF config (checkpoints store its dict)
        # the ids its tokenizer puts before every text (a BOS): put before every row, cut from every output
        self.lead = [int(i) for i in lead]

    @property
    def blocks(self) -> nn.ModuleList:
        """The decoder layers (FSDP shards one per layer)."""
        for path in (
            "model.layers",
            "gpt_neox.layers",
            "transformer.h",
            "model.decoder.layers",
            "gpt.blocks",
        ):
            mod = self.hf
            for part in path.split("."):
                mod = getattr(mod, part, None)
                if mod is None:
                    break
            if isinstance(mod, nn.ModuleList):
                return mod
        raise UserError(
            f"cannot find the decoder layers of {type(self.hf).__name__} for FSDP; use train.parallel=ddp"
        )

    def forward(
        self,
        idx: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        return_hidden: bool | list[int] = False,
    ) -> GPTOutput:
        if attn_mask is not None or not is_causal:
            raise UserError(
                "this objective needs an attention mask (document masking, a prefix or bidirectional "
                "attention), which Hugging Face models do not take through contextlab; use objective clm "
                "or fim with data.doc_mask=false"
            )
        if self.lead and position_ids is not None:
            raise UserError(
                "position offsets with a BOS before every row are not supported; use objective clm or fim"
            )
        if isinstance(position_ids, int):
            position_ids = torch.arange(position_ids, position_ids + idx.size(1), device=idx.device)[None]
        out = self.hf(
            input_ids=with_lead(idx, self.lead),
            position_ids=position_ids,
            use_cache=False,
            output_hidden_states=return_hidden is not False,
        )
        states = (
            None if out.hidden_states is None else [without_lead(t, self.lead) for t in out.hidden_states]
        )
        layers = None
        if return_hidden is not False:
            wanted = range(len(states)) if return_hidden is True else [i % len(states) for i in return_hidden]
            layers = [states[i] for i in wanted]
        return GPTOutput(
            without_lead(out.logits, self.lead), states[-1] if states is not None else None, layers
        )  # (B, T, V)

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            emb = self.hf.get_input_embeddings().weight
            out = self.hf.get_output_embeddings()
            n -= emb.numel()
            if out is not None and out.weight is not emb:
                n -= out.weight.numel()
        return n

    def flops_per_token(self, context: int) -> float:
        """Training FLOPs per token: 6 (non-embedding params + output layer) + 12 n_layer width T.

        The same count as ``contextlab.models.flops``; a row with a BOS before it runs T + 1 positions
        for its T tokens, so that position is counted too.
        """
        c = self.config
        width = int(getattr(c, "hidden_size", 0) or getattr(c, "n_embd", 0))
        n_layer = int(getattr(c, "num_hidden_layers", 0) or getattr(c, "n_layer", 0))
        vocab = int(self.hf.get_input_embeddings().weight.shape[0])
        T = context + len(self.lead)
        per_position = 6.0 * (self.num_params(True) + width * vocab) + 12.0 * n_layer * width * T
        return per_position * T / context

    def describe(self) -> str:
        return (
            f"HF {self.config.model_type} ({type(self.hf).__name__}), {self.num_params(False) / 1e6:.1f}M "
            f"parameters, vocab {self.config.vocab_size}, context {context_limit(self.config)}"
        )


# ---------------------------------------------------------------------------- config and RoPE


def read_hf_config(path: str | os.PathLike) -> PretrainedConfig:
    """The config of a local HF model folder (contextlab's own model types registered first)."""
    import contextlab.models.hf.custom_code  # noqa: F401  (registers contextlab-gpt and contextlab-contextlm)

    p = Path(path)
    if not (p / CONFIG_NAME).is_file():
        raise UserError(
            f"{p} is not a Hugging Face model folder (no config.json); pass the folder save_pretrained "
            "wrote or a contextlab run"
        )
    try:
        return AutoConfig.from_pretrained(p, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot read the model config in {p}: {str(e).strip().splitlines()[0]}") from None


def context_limit(config: PretrainedConfig) -> int:
    """The position limit a HF config declares (2048 when it declares none)."""
    return next(
        (int(getattr(config, k)) for k in LIMIT_KEYS if isinstance(getattr(config, k, None), int)), 2048
    )


def rope_params(config: PretrainedConfig) -> dict | None:
    """{rope_type, rope_theta, ...} of a RoPE model (transformers 5 ``rope_parameters`` or 4.x
    ``rope_theta`` + ``rope_scaling``); None for a model without rotary positions."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return dict(params)
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        return None
    scaling = dict(getattr(config, "rope_scaling", None) or {})
    return {
        "rope_type": scaling.pop("rope_type", scaling.pop("type", "default")),
        "rope_theta": theta,
        **scaling,
    }


def _rotary_dim(config: PretrainedConfig) -> int:
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    partial = (
        (rope_params(config) or {}).get("partial_rotary_factor") or getattr(config, "rotary_pct", 1.0) or 1.0
    )
    return int(head * partial)


def extend_hf_rope(
    config: PretrainedConfig,
    method: str,
    factor: float,
    original_context: int,
    new_context: int,
    new_base: float = 0.0,
    lead: int = 0,
) -> dict:
    """Rewrite ``config`` in place for RoPE context extension; returns the new rope parameters. The position
    limit becomes at least ``new_context`` + ``lead`` (the BOS its tokenizer puts before every row takes a
    position of its own: the limit is the context read plus it, as ``context_limit`` reads it back)."""
    params = rope_params(config)
    if params is None:
        raise UserError(
            f"{config.model_type} models have no rotary position embeddings (no rope_theta in the config); "
            "RoPE extension needs a RoPE model: set extend.method=none"
        )
    if params.get("rope_type", "default") != "default":
        raise UserError(
            f"the model already uses RoPE scaling {params['rope_type']!r}; extend the original model "
            "instead, or set extend.method=none"
        )
    theta = float(params["rope_theta"])
    if method == "pi":
        new = {"rope_type": "linear", "factor": factor}
    elif method == "yarn":
        new = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original_context}
    elif method == "ntk":
        new = {"rope_type": "default", "rope_theta": ntk_base(theta, factor, _rotary_dim(config))}
    elif method == "base":
        new = {"rope_type": "default", "rope_theta": new_base}
    else:
        raise ValueError(method)
    params = {**params, **new}
    if isinstance(getattr(config, "rope_parameters", None), dict):  # transformers >= 5
        config.rope_parameters = params
    else:  # transformers 4.x: theta and scaling are separate attributes
        config.rope_theta = params["rope_theta"]
        scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "rope_type")}
        config.rope_scaling = (
            {"rope_type": params["rope_type"], "type": params["rope_type"], **scaling}
            if params["rope_type"] != "default"
            else None
        )
    raise_position_limit(config, new_context + lead)
    return params


def raise_position_limit(config: PretrainedConfig, at_least: int) -> None:
    """The position limit ``config`` declares, raised to ``at_least`` (a RoPE model trained at a longer
    context without extension: its export said the old limit, and was read there)."""
    for key in LIMIT_KEYS:
        if isinstance(getattr(config, key, None), int):
            setattr(config, key, max(at_least, getattr(config, key)))
            break


# ---------------------------------------------------------------------------- load and save


def load_for_training(path: str | os.PathLike, config: PretrainedConfig, lead: list[int] = ()) -> HFCausalLM:
    """The HF model at ``path`` built with ``config`` (possibly RoPE-extended), fp32, train mode; ``lead``:
    the ids its tokenizer puts before every text, which every training row then gets too."""
    from safetensors import SafetensorError

    try:
        hf = AutoModelForCausalLM.from_pretrained(
            Path(path), config=config, local_files_only=True, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError) as e:
        raise UserError(load_error(path, e)) from None
    except (SafetensorError, RuntimeError, EOFError) as e:  # a weights file cut short or damaged
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        damaged = ("safetensors", "pytorchstreamreader", "unpickl", "eof", "header", "zip archive")
        if isinstance(e, RuntimeError) and not any(w in str(e).lower() for w in damaged):
            raise UserError(load_error(path, e)) from None  # another failure (a shape mismatch): as it is
        raise UserError(
            f"cannot load the model in {path} ({type(e).__name__}: {why}); its weights may be damaged or "
            "copied in part: copy or save the folder again"
        ) from None
    check_left_to_right(hf, path)
    return HFCausalLM(hf.train(), lead)


def from_checkpoint(config_dict: dict, weights: dict[str, Tensor]) -> PreTrainedModel:
    """Rebuild a trained HF model from a checkpoint's config dict and its ``hf.*`` weights (eval mode)."""
    import contextlab.models.hf.custom_code  # noqa: F401  (registers contextlab-gpt and contextlab-contextlm)

    d = dict(config_dict)
    config = AutoConfig.for_model(d.pop("model_type"), **d)
    hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k.removeprefix("hf."): v for k, v in weights.items() if k.startswith("hf.")}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    tied = (
        {k for k in missing if k.endswith(("lm_head.weight", "embed_out.weight"))}
        if getattr(config, "tie_word_embeddings", False)
        else set()
    )
    if set(missing) - tied or unexpected:
        raise UserError(
            f"the checkpoint does not match its Hugging Face config (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )
    if tied:
        hf.tie_weights()
    return hf.eval()


def config_dict(config: PretrainedConfig) -> dict:
    """A JSON-safe dict of a HF config (what checkpoints store)."""
    return json.loads(config.to_json_string(use_diff=False))


def save_hf(
    hf: PreTrainedModel,
    out_dir: str | os.PathLike,
    *,
    tokenizer_from: list[Path] = (),
    extra_config: dict | None = None,
    overwrite: bool = False,
    added_tokens: dict[str, int] | None = None,
    data_tokenizer: Path | None = None,
) -> Path:
    """save_pretrained into ``out_dir`` atomically, with the tokenizer files of the first folder with any.

    ``added_tokens`` (name -> id: tokens the objective appended, FIM's sentinels) are named in those
    files, so ``transformers`` encodes them as the ids the model trained with; the tokenizer the data
    was ingested with is then kept whole in ``tokenizer/`` (``data_tokenizer``, a saved contextlab
    tokenizer), which is the one contextlab reads the folder with, so the export still matches its
    training data."""
    from contextlab.models.hf.tokenizer import name_added_tokens

    out = Path(out_dir)
    with staged_dir(out, overwrite=overwrite, what="export folder", kind=EXPORT) as tmp:
        if extra_config:
            hf.config.contextlab = extra_config
        hf.save_pretrained(tmp, safe_serialization=True)
        follow_umask(tmp.glob("*.safetensors"))  # safetensors writes 0o600
        for folder in tokenizer_from:
            found = [
                f for f in TOKENIZER_FILES if (Path(folder) / f).is_file() and f != "generation_config.json"
            ]
            if found:
                for f in found:
                    shutil.copy2(Path(folder) / f, tmp / f)
                break
        if added_tokens:
            if not (tmp / "tokenizer.json").is_file() or data_tokenizer is None:
                raise UserError(
                    f"cannot name the tokens the objective added ({', '.join(added_tokens)}) in {out}: "
                    "the model's folder has no tokenizer.json, or the run has no tokenizer/ folder"
                )
            shutil.copytree(data_tokenizer, tmp / "tokenizer")
            try:
                name_added_tokens(tmp, added_tokens)
            except ValueError as exc:
                raise UserError(
                    f"cannot export to {out}: {exc} (the tokenizer knows that text already)"
                ) from None
    return out
