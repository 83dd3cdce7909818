"""``open_model``: a run, a checkpoint, a contextlab export or any local HF causal LM folder ->
(model, tokenizer, ``ModelInfo``), in eval mode.

What a path is gets decided once (``kind_of``): a checkpoint folder, a run (its newest
checkpoint, or ``step``), a contextlab export (``contextlab-gpt`` or the Llama form of one,
loaded back as the GPT it was; ``contextlab-contextlm``, as the ContextLM it was: either way with
the run's own tokenizer, by the spec the export records) or another Hugging Face folder (loaded
by ``transformers``).
A run that continued a Hugging Face model opens as that model. ``ModelInfo`` says which
backend runs the model (``kind``: "contextlab" or "hf"), its context, its tokenizer and
whether, and after which tokens, it runs left to right. Damaged or partial folders end in
one line that names the file and the fix. Trade-off: an HF folder's config.json is read
before ``transformers`` is imported, so runs and checkpoints open without importing it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from contextlab.data.tokenizers import HFTokenizer, Tokenizer
from contextlab.errors import UserError
from contextlab.inference.checkpoint import Checkpoint, left_to_right, read_checkpoint
from contextlab.inference.tokenizer import hf_tokenizer_file, tokenizer_from_spec
from contextlab.rundir import HF_CONFIG, TOKENIZER, is_checkpoint, is_hf_folder, tokenizer_dirs
from contextlab.weights import check_readable


@dataclass
class ModelInfo:
    """What a result file records about the model."""

    id: str  # the path as given
    kind: str  # "contextlab" or "hf": which backend runs it
    path: str  # resolved checkpoint or model folder
    architecture: str  # GPT shape or the HF model_type
    n_params: int
    context: int  # training context (contextlab) or position limit (HF; less the BOS it gets, lm_prefix)
    extends_beyond: bool  # positions beyond context are allowed (RoPE)
    tokenizer: dict = field(default_factory=dict)  # the tokenizer spec (with its hash)
    step: int | None = None
    objective: str = "clm"  # what it was trained with (an HF model: a causal LM)
    lm_prefix: list[int] = field(default_factory=list)  # ids before plain text to run it left to right
    not_lm: str = ""  # why it cannot be run as a left-to-right LM at all ("" = it can)
    assumed_context: bool = False  # an HF config.json that names no position limit: ``context`` is assumed


def kind_of(path: str | os.PathLike) -> str:
    """ "checkpoint", "run", "export" (a contextlab export) or "hf" (another Hugging Face folder)."""
    p = _existing(path)
    if is_hf_folder(p):
        return "export" if _is_export(read_config_json(p)) else "hf"
    return "checkpoint" if is_checkpoint(p) else "run"


def _existing(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(
            f"model not found: {p}; pass a contextlab run directory or a Hugging Face model folder"
        )
    return p


def open_model(
    path: str | os.PathLike,
    step: int | None = None,
    *,
    device: str = "cpu",
    dtype=None,
) -> tuple[nn.Module, Tokenizer, ModelInfo]:
    """The model at ``path`` (see the module docstring), on ``device``, its weights in ``dtype``
    (a torch dtype; None keeps them as saved)."""
    p = _existing(path)
    if is_hf_folder(p):  # its config.json says export or any causal LM: read once, in _read_folder
        model, tok, info = _read_folder(p)
        if step is not None and step != info.step:  # --step was ignored in silence
            which = (
                f"an export of step {info.step}" if info.step is not None else "a Hugging Face model folder"
            )
            raise UserError(
                f"{path} is {which}, which holds one set of weights; --step {step} picks a checkpoint of a "
                "run: give the run folder with --step, or leave --step out"
            )
    else:
        model, tok, info = _open_checkpoint(read_checkpoint(p, step), p)
    info.id = str(path)
    return model.to(device=device, dtype=dtype).eval(), tok, info


# ---------------------------------------------------------------------------- runs and checkpoints


def _open_checkpoint(ckpt: Checkpoint, path: Path):
    model = ckpt.build()  # a contextlab architecture, or the HF model a run continued
    tok = tokenizer_from_spec(ckpt.tokenizer, tokenizer_dirs(ckpt.dir), f"run {path}")
    info = _info(model, path, ckpt.dir, tok)
    info.step = ckpt.step
    prefix, info.not_lm = ckpt.left_to_right()
    info.objective, info.lm_prefix = ckpt.objective, prefix or []
    trained = (ckpt.state.get("init") or {}).get("context")
    if info.kind == "hf" and trained and _rotary(model):  # a continued RoPE model: the context it trained
        info.context = int(trained)  # at (its position limit bounds absolute positions only)
    if info.kind == "contextlab":  # UL2's [S] takes one of the context's positions (a continued Hugging
        info.context -= len(info.lm_prefix)  # Face model's BOS is added before its rows, past them)
    return model, tok, info


def _info(model, path: Path, where: Path, tok: Tokenizer, config: dict | None = None) -> ModelInfo:
    """The record of an opened model: run by the contextlab backend when it is a contextlab
    architecture, else by the Hugging Face one (``config``: an HF folder's config.json)."""
    from contextlab.models.gpt import GPT, describe_model

    if not isinstance(model, GPT):
        return _hf_info(model, path, where, tok, config)
    return ModelInfo(
        id=str(path),
        kind="contextlab",
        path=str(where.resolve()),  # absolute: a result's reproduce line runs from anywhere
        architecture=describe_model(model),
        n_params=model.num_params(False),
        context=int(model.config.context),
        extends_beyond=True,
        tokenizer=tok.spec(),
    )


def _hf_info(model, path: Path, where: Path, tok: Tokenizer, config: dict | None = None) -> ModelInfo:
    from contextlab.models.hf.causal import context_limit

    return ModelInfo(
        id=str(path),
        kind="hf",
        path=str(where.resolve()),  # absolute: a result's reproduce line runs from anywhere
        architecture=str(model.config.model_type),
        n_params=sum(t.numel() for t in model.parameters()),
        context=context_limit(model.config),
        extends_beyond=_has_rope(config if config is not None else model.config.to_dict()),  # a continued
        # GPT-2 run has absolute positions too: it cannot be read past them
        tokenizer=tok.spec(),
    )


# ---------------------------------------------------------------------------- Hugging Face folders


def read_config_json(p: Path) -> dict:
    """A Hugging Face folder's config.json, or one line saying the folder is damaged."""
    try:
        cfg = json.loads((p / HF_CONFIG).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{p / HF_CONFIG} is not valid JSON ({type(exc).__name__}: {str(exc)[:80]}); the folder "
            "is damaged or was copied in part: copy or save it again"
        ) from None
    if not isinstance(cfg, dict):
        raise UserError(f"{p / HF_CONFIG} is not a JSON object; the folder is damaged: copy or save it again")
    return cfg


def _is_export(cfg: dict) -> bool:
    from contextlab.models.hf.custom_code import is_contextlab_export  # imports transformers: HF folders only

    return is_contextlab_export(cfg)


def _read_folder(p: Path):
    """A Hugging Face folder, opened as a contextlab export or any causal LM by its config.json (read
    once), with unreadable weights reported as one line."""
    from safetensors import SafetensorError

    cfg = read_config_json(p)
    opener = _open_export if _is_export(cfg) else _open_hf
    check_readable(f for f in p.rglob("*") if f.is_file())  # not "damaged": one this user may not read
    try:
        return opener(p, cfg)
    except (SafetensorError, OSError, ValueError, RuntimeError, EOFError) as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(
            f"cannot load the model in {p} ({type(exc).__name__}: {why}); its weights may be damaged "
            "or copied in part: copy or save the folder again"
        ) from None


def _open_export(p: Path, cfg: dict):
    """A contextlab export, run as the model it was (a GPT or a ContextLM) with the run's tokenizer."""
    from contextlab.models.hf.custom_code import gpt_from_hf_export

    model = gpt_from_hf_export(p)
    provenance = cfg.get("contextlab") or {}
    tok = tokenizer_from_spec(provenance.get("contextlab_tokenizer") or {}, [p / TOKENIZER], f"export {p}")
    info = _info(model, p, p, tok)
    info.step = provenance.get("contextlab_step")
    info.objective = provenance.get("contextlab_objective") or "clm"
    prefix, info.not_lm = left_to_right({"objective": info.objective})  # exports of older versions
    info.lm_prefix = prefix or []
    if info.kind == "contextlab":
        info.context -= len(info.lm_prefix)  # text positions, as for the run
    return model, tok, info


def require_hf_tokenizer(p: Path) -> Path:
    """The tokenizer.json of Hugging Face folder ``p``, or one line saying to save it (checked before
    any weights load: a command given two models says so before minutes of loading the first)."""
    tok_file = hf_tokenizer_file(p)
    if tok_file is None:
        raise UserError(
            f"{p} has no tokenizer.json; save the model's fast tokenizer beside it "
            "(tokenizer.save_pretrained(folder))"
        )
    return tok_file


def assumed_context_note(info: ModelInfo) -> str:
    """What a reader must know of a model whose config.json names no position limit ("" otherwise)."""
    if not info.assumed_context:
        return ""
    from contextlab.models.hf.causal import LIMIT_KEYS

    return (
        f"its config.json names no position limit ({', '.join(LIMIT_KEYS)}): its context is taken to be "
        f"{info.context:,}, the default of its config class; if it was trained at a shorter one, measure "
        "within that (profile --context N; an evaluation's --length or --lengths)"
    )


def _say_assumed_context(info: ModelInfo, cfg: dict, p: Path) -> None:
    """A config.json with no position limit read as its class's default limit (2,048 for Llama) in
    silence: a model trained at 300 positions was profiled at 2,048."""
    import warnings

    from contextlab.errors import ContextLengthWarning
    from contextlab.models.hf.causal import LIMIT_KEYS

    if any(isinstance(cfg.get(k), int) for k in LIMIT_KEYS):
        return
    info.assumed_context = True
    warnings.warn(ContextLengthWarning(f"{p}: {assumed_context_note(info)}"), stacklevel=2)


def _open_hf(p: Path, cfg: dict):
    """Any local Hugging Face causal LM folder with its tokenizer.json."""
    from contextlab.models.hf.custom_code import load_hf_causal_lm

    tok_file = require_hf_tokenizer(p)
    tok = HFTokenizer.from_file(tok_file, name=p.name)
    model = load_hf_causal_lm(p)
    if tok.vocab_size > int(model.config.vocab_size):
        raise UserError(
            f"{p}: the tokenizer has {tok.vocab_size} ids but the model only {model.config.vocab_size}; "
            "save the tokenizer that belongs to this model"
        )
    info = _info(model, p, p, tok, cfg)
    info.architecture = str(cfg.get("model_type"))
    _say_assumed_context(info, cfg, p)
    provenance = cfg.get("contextlab") or {}  # a model contextlab continued and exported: how it trained
    lead = tok.leading_special_ids()
    if provenance.get("contextlab_objective"):
        info.step = provenance.get("contextlab_step")
        info.objective = provenance["contextlab_objective"]
        prefix, info.not_lm = left_to_right({"objective": info.objective})
        # continued with its tokenizer's BOS before every row (runs from before that: without)
        lead = lead if provenance.get("contextlab_lead") == "tokenizer" else []
        info.lm_prefix = lead + (prefix or [])
        info.context -= len(lead)
    else:  # a checkpoint trained elsewhere saw its tokenizer's BOS before every text: so does every input
        info.lm_prefix = lead
        info.context -= len(info.lm_prefix)  # its positions, less the ones the BOS takes
        if info.lm_prefix and str(p.resolve()) not in _BOS_NOTED:
            _BOS_NOTED.add(str(p.resolve()))  # once per model in a process (a profile opens it often)
            names = " ".join(tok.decode([i]) for i in info.lm_prefix)
            print(
                f"note: {p}'s tokenizer puts {names} before every text, so every input starts with it, as "
                f"the model was trained; positions count the text after it ({info.context:,} of its "
                f"{info.context + len(info.lm_prefix):,} positions)",
                file=sys.stderr,
            )
    return model, tok, info


_BOS_NOTED: set[str] = set()


def _rotary(model) -> bool:
    """Whether a transformers model has rotary positions (its config names a RoPE)."""
    from contextlab.models.hf.causal import rope_params

    return rope_params(model.config) is not None


def _has_rope(cfg: dict) -> bool:
    return (
        "rope_theta" in cfg
        or "rope_scaling" in cfg
        or "rope_parameters" in cfg  # transformers 4.x / 5
        or cfg.get("position_embedding_type") == "rotary"
    )
