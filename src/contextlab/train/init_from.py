"""Continued pretraining: a run's first model from a contextlab run or a Hugging Face folder.

``init.source`` names where the weights come from:

- a contextlab run or checkpoint directory (or a contextlab Hugging Face export): the
  model keeps its shape and weights and becomes the architecture the run's objective
  trains (a GPT may continue as ContextLM or MTP: the extra modules start fresh, modules the
  new architecture lacks are dropped, both listed on the console). Any objective works.
- any other local Hugging Face causal LM folder: the model is loaded by ``transformers``
  and wrapped by ``models.hf_causal.HFCausalLM``; objectives that need only causal logits
  train it (see that module).

Either way the context becomes ``train.context``, and ``[extend]`` may rescale RoPE
(``models/rope.py``; for HF models through their config). The optimizer, schedule and
data order start fresh, so ``optim.warmup_steps`` is a fresh warm-up from the checkpoint;
resuming the continued run itself is the ordinary exact resume of its own checkpoints.

Trade-off: the source is read once when the run starts (and again on resume, before the
run's own checkpoint overwrites it), so a resumed run needs the source in place, but the
run directory holds no copy of a possibly large model it has not changed yet.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import shlex
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from contextlab.errors import UserError
from contextlab.models.gpt import GPT, GPTConfig, current_fields, describe_model

# group name -> substrings of parameter names (contextlab GPT and common HF names alike)
FREEZE_GROUPS: dict[str, tuple[str, ...]] = {
    "embeddings": ("wte.", "embed_tokens.", "embed_in.", "wpe.", "word_embeddings."),
    "lm_head": ("lm_head.", "embed_out."),
    "attention": (".attn.", ".self_attn.", ".attention."),
    "mlp": (".mlp.",),
    "norms": ("norm", "ln_"),
}


@dataclass
class InitModel:
    model: nn.Module  # a contextlab architecture, or HFCausalLM
    kind: str  # "contextlab" or "hf"
    meta: dict  # what every checkpoint records under "init"


def check_source(source: str, run_dir: str | Path | None = None) -> Path:
    """``init.source`` as a path, or one clear error when it does not exist (checked before the
    trainer reads any data, so this mistake is the one reported). ``run_dir``: the run being trained;
    one with checkpoints is a resume, which rebuilds its model from the source before loading its own
    weights, so the error says so."""
    from contextlab.rundir import latest_checkpoint

    src = Path(source)
    if not src.exists():
        latest = latest_checkpoint(run_dir) if run_dir is not None else None
        if latest is not None:
            raise UserError(
                f"init.source {src} does not exist, and {run_dir} (at {latest.name}) was started from it: a "
                "resume builds the model from its source, then loads the run's own weights; put the source "
                "back at that path to resume (another path is another config)"
            )
        raise UserError(
            f"init.source {src} does not exist; pass a contextlab run/checkpoint or a Hugging Face folder"
        )
    return src


def init_model(cfg, objective, store) -> InitModel:
    """The initial model of a continued run (see the module docstring); ``store`` is the training
    data's store."""
    from contextlab.inference import kind_of

    src = check_source(cfg.init.source)
    kind = kind_of(src)
    if kind == "hf":
        from contextlab.models.hf.causal import read_hf_config

        return _from_hf(cfg, objective, store, src, read_hf_config(src))
    if kind == "export":
        return _from_contextlab_export(cfg, objective, store, src)
    return _from_run(cfg, objective, store, src)


# ---------------------------------------------------------------------------- extension


def resolve_extension(ext, original_context: int, new_context: int) -> tuple[str, float]:
    """(method, factor) of the run's ``[extend]`` section, checked."""
    if ext.method == "base" and ext.rope_base <= 0:
        raise UserError("extend.method=base needs the new base: set extend.rope_base (CodeLlama: 1e6)")
    factor = float(ext.factor or new_context / original_context)
    if ext.method in ("pi", "ntk", "yarn") and factor <= 1.0:
        raise UserError(
            f"extend.factor is {factor:g}: train.context ({new_context}) is not longer than the model's "
            f"context ({original_context}); raise train.context or set extend.factor"
        )
    fits = new_context / original_context
    if ext.method in ("pi", "ntk", "yarn") and ext.factor and abs(factor - fits) > 1e-9 * fits:
        print(  # accepted in silence, and transformers then warned on loading the export
            f"note: extend.factor {factor:g} scales the model's {original_context:,} positions for "
            f"{factor * original_context:,.0f}, and train.context {new_context:,} needs factor {fits:g}: it "
            "trains at its context with positions scaled for the other, and an export's config holds both "
            "(transformers warns on loading it that they disagree); leave extend.factor out to fit it"
        )
    return ext.method, factor


def _note_plain_extrapolation(
    method: str, original: int, new_context: int, factor: float | None = None
) -> None:
    """One line on how the context the run trains at relates to the model's: extended (which method,
    which factor), or past it with unscaled RoPE; nothing when it is not longer."""
    if method == "none" and new_context > original:
        print(
            f"note: training at context {new_context} beyond the model's {original} with unscaled RoPE; "
            "set extend.method (pi, ntk, yarn or base) to extend it"
        )
    elif method not in ("none", "kept"):
        how = f"{method}, factor {factor:g}" if method in ("pi", "ntk", "yarn") else "a new RoPE base"
        print(f"RoPE extended ({how}) from the model's context {original} to train.context {new_context}")


# ---------------------------------------------------------------------------- contextlab sources


def _from_run(cfg, objective, store, src: Path) -> InitModel:
    from contextlab.inference import read_checkpoint
    from contextlab.models.archs import HF_ARCH

    ckpt = read_checkpoint(src, cfg.init.step or None)
    state = ckpt.state
    if ckpt.arch == HF_ARCH:
        raise UserError(
            f"{src} continued a Hugging Face model; export it "
            f"(contextlab export {shlex.quote(str(src))} --out DIR) and start from that folder"
        )
    if state.get("tokenizer_hash") != store.tokenizer_hash:
        from contextlab import rundir

        run = rundir.run_of(ckpt.dir)
        saved = run / rundir.TOKENIZER  # a run carries a copy of its tokenizer
        spec = f"dir:{saved}" if saved.is_dir() else "store:STORE (the store it trained on)"
        raise UserError(
            f"{src} was trained with tokenizer {state.get('tokenizer', {}).get('name')!r}, not the one of "
            f"{store.path}; ingest the data with the model's tokenizer: contextlab data ingest SOURCE "
            f"--tokenizer {shlex.quote(spec) if saved.is_dir() else spec} --out STORE"
        )
    obj_w = ckpt.objective_weights()
    if obj_w and state.get("objective") == objective.name:
        objective.load_state_dict(obj_w, strict=False)  # the objective's own modules, when it is the same one
    meta = {
        "source": str(src.resolve()),
        "kind": "contextlab",
        "checkpoint": str(ckpt.dir.resolve()),
        "step": ckpt.step,
        "arch": ckpt.arch,
        "objective": state.get("objective"),
    }
    return _continue_gpt(cfg, objective, state["model_config"], ckpt.model_weights(), meta)


def _from_contextlab_export(cfg, objective, store, src: Path) -> InitModel:
    from contextlab.inference.open import read_config_json
    from contextlab.models.hf.custom_code import gpt_from_hf_export

    prov = read_config_json(src).get("contextlab") or {}
    tok = prov.get("contextlab_tokenizer") or {}
    if tok.get("hash") and tok["hash"] != store.tokenizer_hash:
        raise UserError(
            f"{src} was trained with tokenizer {tok.get('name')!r}, not the one of {store.path}; ingest "
            "the data with the model's tokenizer"
        )
    gpt = gpt_from_hf_export(src)
    meta = {"source": str(src.resolve()), "kind": "contextlab-export", "step": prov.get("contextlab_step")}
    return _continue_gpt(cfg, objective, dataclasses.asdict(gpt.config), gpt.state_dict(), meta)


def _continue_gpt(cfg, objective, fields: dict, weights: dict, meta: dict) -> InitModel:
    from contextlab.models.archs import build_arch

    fields = current_fields(fields)  # checkpoints written before a GPTConfig field was renamed
    base = {f.name: fields[f.name] for f in dataclasses.fields(GPTConfig) if f.name in fields}
    src_cfg = GPTConfig(**base)
    new_context = cfg.train.context
    original = cfg.extend.original_context or src_cfg.rope_original_context or src_cfg.context
    method, factor = resolve_extension(cfg.extend, original, new_context)
    if method != "none" and src_cfg.rope_extension != "none":
        raise UserError(
            f"the source is already extended with {src_cfg.rope_extension!r}; set extend.method=none to "
            "keep that extension, or start from the original model"
        )
    _note_plain_extrapolation(
        method if src_cfg.rope_extension == "none" else "kept", original, new_context, factor
    )
    base.update(
        context=new_context,
        dropout=cfg.model.dropout,
        vocab_size=max(src_cfg.vocab_size, objective.vocab_size),
    )
    if method in ("pi", "ntk", "yarn"):
        base.update(rope_extension=method, rope_factor=factor, rope_original_context=original)
    elif method == "base":
        base.update(rope_base=cfg.extend.rope_base)
    model = build_arch(objective.arch, GPTConfig(**base), **objective.arch_options())
    fresh, dropped = _load_matching(model, weights)
    if fresh or dropped:
        print(
            f"note: {meta['source']} -> {objective.arch}: {len(fresh)} tensors start fresh "
            f"({', '.join(fresh[:4])}{', ...' if len(fresh) > 4 else ''}), {len(dropped)} are not used "
            f"({', '.join(dropped[:4])}{', ...' if len(dropped) > 4 else ''})"
        )
    meta.update(
        extension=method,
        factor=factor if method in ("pi", "ntk", "yarn") else None,
        original_context=original,
        context=new_context,
    )
    return InitModel(model, "contextlab", meta)


def _load_matching(model: nn.Module, weights: dict) -> tuple[list[str], list[str]]:
    """Copy ``weights`` into ``model``: equal shapes as they are, embedding rows up to the smaller
    vocabulary."""
    own = model.state_dict()
    merged, dropped = dict(own), []
    for k, v in weights.items():
        if k not in own:
            dropped.append(k)
        elif own[k].shape == v.shape:
            merged[k] = v
        elif (
            v.dim() == own[k].dim()
            and own[k].shape[1:] == v.shape[1:]
            and k.endswith(("wte.weight", "lm_head.weight"))
        ):
            rows = min(v.shape[0], own[k].shape[0])  # a vocabulary grown by an objective's special tokens
            merged[k] = own[k].clone()
            merged[k][:rows] = v[:rows]
        else:
            raise UserError(
                f"the source's {k} has shape {tuple(v.shape)} but the new model needs "
                f"{tuple(own[k].shape)}; continue with the same model shape"
            )
    model.load_state_dict(merged)
    tied_head = getattr(getattr(model, "config", None), "tie_embeddings", False)
    fresh = [k for k in own if k not in weights and not (tied_head and k.endswith("lm_head.weight"))]
    return fresh, dropped


# ---------------------------------------------------------------------------- Hugging Face sources


def _from_hf(cfg, objective, store, src: Path, hf_config) -> InitModel:
    from contextlab.models.hf.causal import (
        context_limit,
        extend_hf_rope,
        load_for_training,
        raise_position_limit,
        rope_params,
    )

    lead = _check_hf_tokenizer(src, store, int(hf_config.vocab_size))
    if objective.arch != "gpt":
        raise UserError(
            f"objective {objective.name} trains the {objective.arch} architecture; a Hugging Face model "
            "continues with objectives on a plain causal LM (clm, fim)"
        )
    if cfg.data.doc_mask:
        raise UserError(
            "data.doc_mask needs attention masks, which Hugging Face models do not take through "
            "contextlab; set data.doc_mask=false"
        )
    limit = context_limit(hf_config)
    original = cfg.extend.original_context or limit
    new_context = cfg.train.context
    method, factor = resolve_extension(cfg.extend, original, new_context)
    rope = None
    if method != "none":
        rope = extend_hf_rope(
            hf_config, method, factor, original, new_context, cfg.extend.rope_base, lead=len(lead)
        )
        _note_plain_extrapolation(method, original, new_context, factor)
    elif new_context > limit:
        if rope_params(hf_config) is None:
            raise UserError(
                f"{src} has absolute positions for at most {limit} tokens but train.context is "
                f"{new_context}; lower train.context"
            )
        _note_plain_extrapolation(method, limit, new_context)
        raise_position_limit(hf_config, new_context + len(lead))  # the context it trains at, exported so
    model = load_for_training(src, hf_config, lead)
    if objective.vocab_size > model.hf.get_input_embeddings().weight.shape[0]:
        model.hf.resize_token_embeddings(objective.vocab_size)  # the objective's special tokens
    meta = {
        "source": str(src.resolve()),
        "kind": "hf",
        "model_type": hf_config.model_type,
        "extension": method,
        "factor": factor if method in ("pi", "ntk", "yarn") else None,
        "original_context": original,
        "context": new_context,
        "rope": rope,
        "lead": lead,
    }
    return InitModel(model, "hf", meta)


def _check_hf_tokenizer(src: Path, store, model_vocab: int) -> list[int]:
    """The store must be tokenized with the model's tokenizer (checked by hash when the folder has one).
    Returns the ids that tokenizer puts before every text (its BOS; [] for none or no tokenizer.json):
    the model saw them first in pretraining, so every training row gets them too."""
    from contextlab.inference.tokenizer import hf_tokenizer_file

    tok_file = hf_tokenizer_file(src)
    if tok_file is not None:
        from contextlab.data.tokenizers import HFTokenizer

        tok = HFTokenizer.from_file(tok_file)
        if store.tokenizer_hash not in (tok.hash, tok.legacy_hash):  # stores ingested before the id hash
            raise UserError(
                f"{store.path} was not tokenized with the tokenizer of {src}; ingest the data with "
                f"--tokenizer {shlex.quote(f'hf:{tok_file}')}"
            )
        lead = tok.leading_special_ids()
        if lead:
            names = " ".join(tok.decode([i]) for i in lead)
            print(f"note: {src}'s tokenizer puts {names} before every text: every training row gets it too")
        return lead
    elif int(store.tokenizer_spec["vocab_size"]) > model_vocab:
        raise UserError(
            f"{store.path} has {store.tokenizer_spec['vocab_size']} token ids but {src} only "
            f"{model_vocab}; ingest the data with the model's tokenizer"
        )
    else:
        print(f"note: {src} has no tokenizer.json: cannot check that {store.path} uses the model's tokenizer")
    return []


# ---------------------------------------------------------------------------- freezing and bookkeeping


def freeze_parameters(model: nn.Module, patterns: list[str]) -> int:
    """Turn off gradients for the named groups / name globs; returns the number of frozen parameters."""
    frozen = 0
    names = [n for n, _ in model.named_parameters()]
    for pat in patterns:
        if pat in FREEZE_GROUPS:
            hit = lambda n, subs=FREEZE_GROUPS[pat]: any(s in n for s in subs)
        else:
            hit = lambda n, pat=pat: fnmatch.fnmatchcase(n, pat)
        matched = [n for n in names if hit(n)]
        if not matched:
            raise UserError(
                f"init.freeze: {pat!r} matches no parameter; use a group ({', '.join(FREEZE_GROUPS)}) or a "
                f"glob on names such as {names[0]!r}"
            )
        for n, p in model.named_parameters():
            if n in matched and p.requires_grad:
                p.requires_grad_(False)
                frozen += p.numel()
    return frozen


def describe(model: nn.Module) -> str:
    return describe_model(model) if isinstance(model, GPT) else model.describe()


def is_hf(model: nn.Module) -> bool:
    return not isinstance(model, GPT)
