"""Export a GPT of the Llama shape as a native ``LlamaForCausalLM`` folder (no custom code).

A contextlab GPT with a SwiGLU MLP computes exactly what ``transformers``' Llama computes:
pre-norm RMSNorm blocks, rotary positions in the half-split convention (Llama's
``rotate_half`` rotates the pairs (x[i], x[i + hs/2]) as ``models/rope.py`` does), attention
scaled by 1/sqrt(hs), ``silu(gate) * up`` and a final RMSNorm. Only the weight layout differs:

- the fused ``qkv`` rows (3C, C) are q, k, v back to back (the forward views them as
  (3, nh, hs)), so they split into ``q_proj`` / ``k_proj`` / ``v_proj``;
- the fused SwiGLU ``up`` rows (2H, C) are gate then value (``h.chunk(2)``), so they split
  into ``gate_proj`` / ``up_proj``;
- the embedding and output rows beyond ``vocab_size`` (padding to a multiple of 64) are
  dropped: contextlab slices its logits to ``vocab_size``, so the padded rows must not exist
  in the export, where they would take probability mass.

RoPE extensions map to Llama's rope parameters: none -> default, pi -> "linear", ntk -> the
default type with ``rope_theta`` raised to ``models/rope.py``'s ``ntk_base`` (the same
frequencies by construction), yarn -> "yarn" (the same ramp, boundaries and attention factor;
the tests compare logits). Biases map to ``attention_bias`` / ``mlp_bias``.

Trade-off: only models that Llama expresses exactly are exported this way (``llama_compatible``
says why not otherwise); every other shape keeps its own modeling code (``models/hf/remote``).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from contextlab.io import follow_umask
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.rope import ntk_base


def llama_compatible(model) -> str:
    """ "" when ``model`` is a plain GPT that Llama computes exactly, else the reason it is not."""
    if type(model) is not GPT:
        return f"a {type(model).__name__} is not a plain GPT"
    if model.config.mlp != "swiglu":
        return f"its MLP is {model.config.mlp}, Llama's is swiglu"
    return ""


def llama_config(cfg: GPTConfig, **extra):
    """The ``LlamaConfig`` computing what ``cfg`` computes (rope extension included)."""
    from transformers import LlamaConfig

    rope = {"rope_type": "default", "rope_theta": float(cfg.rope_base)}
    original = int(cfg.rope_original_context or cfg.context)
    if cfg.rope_extension == "pi":
        rope.update(rope_type="linear", factor=float(cfg.rope_factor))
    elif cfg.rope_extension == "ntk":
        rope["rope_theta"] = float(ntk_base(cfg.rope_base, cfg.rope_factor, cfg.head_dim))
    elif cfg.rope_extension == "yarn":
        rope.update(
            rope_type="yarn",
            factor=float(cfg.rope_factor),
            original_max_position_embeddings=original,
            beta_fast=32.0,
            beta_slow=1.0,
        )
    return LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.n_embd,
        intermediate_size=cfg.mlp_dim,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_head,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.context,
        rms_norm_eps=cfg.norm_eps,
        rope_parameters=rope,
        attention_bias=cfg.bias,
        mlp_bias=cfg.bias,
        tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        **extra,
    )


def llama_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The GPT's weights under Llama's names, fused matrices split, padded vocabulary rows dropped."""
    cfg, sd = model.config, model.state_dict()
    C, H, V = cfg.n_embd, cfg.mlp_dim, cfg.vocab_size
    out = {"model.embed_tokens.weight": sd["wte.weight"][:V], "model.norm.weight": sd["final_norm.weight"]}
    out["lm_head.weight"] = sd["lm_head.weight"][:V]
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    for i in range(cfg.n_layer):
        src, dst = f"blocks.{i}.", f"model.layers.{i}."
        out[dst + "input_layernorm.weight"] = sd[src + "norm1.weight"]
        out[dst + "post_attention_layernorm.weight"] = sd[src + "norm2.weight"]
        for kind in kinds:
            q, k, v = sd[src + f"attn.qkv.{kind}"].split(C, dim=0)  # rows: q, k, v (3C, ...)
            gate, value = sd[src + f"mlp.up.{kind}"].split(H, dim=0)  # rows: gate, value (2H, ...)
            out[dst + f"self_attn.q_proj.{kind}"] = q
            out[dst + f"self_attn.k_proj.{kind}"] = k
            out[dst + f"self_attn.v_proj.{kind}"] = v
            out[dst + f"self_attn.o_proj.{kind}"] = sd[src + f"attn.proj.{kind}"]
            out[dst + f"mlp.gate_proj.{kind}"] = gate
            out[dst + f"mlp.up_proj.{kind}"] = value
            out[dst + f"mlp.down_proj.{kind}"] = sd[src + f"mlp.down.{kind}"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def gpt_state_from_llama(weights: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """The inverse of ``llama_state_dict``: a GPT state dict (padded vocabulary rows zero)."""
    V, P = cfg.vocab_size, cfg.padded_vocab_size

    def padded(t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t, t.new_zeros(P - V, t.size(1))]) if P > V else t

    out = {
        "wte.weight": padded(weights["model.embed_tokens.weight"]),
        "final_norm.weight": weights["model.norm.weight"],
    }
    out["lm_head.weight"] = padded(weights.get("lm_head.weight", weights["model.embed_tokens.weight"]))
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    for i in range(cfg.n_layer):
        src, dst = f"model.layers.{i}.", f"blocks.{i}."
        out[dst + "norm1.weight"] = weights[src + "input_layernorm.weight"]
        out[dst + "norm2.weight"] = weights[src + "post_attention_layernorm.weight"]
        for kind in kinds:
            attn = [weights[src + f"self_attn.{n}_proj.{kind}"] for n in "qkv"]
            out[dst + f"attn.qkv.{kind}"] = torch.cat(attn)
            out[dst + f"attn.proj.{kind}"] = weights[src + f"self_attn.o_proj.{kind}"]
            up = [weights[src + f"mlp.{n}_proj.{kind}"] for n in ("gate", "up")]
            out[dst + f"mlp.up.{kind}"] = torch.cat(up)
            out[dst + f"mlp.down.{kind}"] = weights[src + f"mlp.down_proj.{kind}"]
    return out


def save_llama(model: GPT, folder: str | os.PathLike, **config_extra) -> Path:
    """Write ``model`` (llama_compatible) as a ``LlamaForCausalLM`` folder into ``folder`` (must exist)."""
    from transformers import LlamaForCausalLM

    config = llama_config(model.config, **config_extra)
    llama = LlamaForCausalLM(config).to(model.wte.weight.dtype)  # saved in the model's dtype
    llama.load_state_dict(llama_state_dict(model), strict=True)
    if config.tie_word_embeddings:
        llama.tie_weights()
    llama.save_pretrained(folder, safe_serialization=True)
    follow_umask(Path(folder).glob("*.safetensors"))  # safetensors writes 0o600
    return Path(folder)
