"""The training run config: ``[model]``, ``[data]``, ``[optim]``, ``[train]``, ``[objective]``.

Loaded from TOML and ``--set`` overrides (see ``contextlab.config``), written resolved to
``RUN/config.toml``. The budget is exactly one of steps, tokens, training FLOPs or minutes;
tokens per step stay constant when the context changes (rows per step = tokens per step /
context), which is what comparing training contexts at a fixed budget requires.

Renamed keys (``RENAMED`` on a section, e.g. ``train.seq_len`` -> ``train.context``) are
read under their new name, so old recipes and run directories keep working.

``config_hash`` (a resumed run must match it) covers only the values that differ from their
defaults, so an option added later with a default leaves every earlier run's hash as it was.
Trade-off: a default is then part of the meaning of every hash, so a default must never change
(its numbers would change without the hash noticing); add a new option instead. Hashes
written before this rule are still accepted through ``legacy_config_hash``. ``RESUME_FREE`` keys
(logging, threads, the parallel strategy, the budget, ...) are never hashed: they may change on
resume. A resume refused for any other key names the first one that differs, with both values
(``first_difference``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_type_hints

from contextlab.config import apply_overrides, from_dict, opt, parse_override, to_dict
from contextlab.errors import UserError


@dataclass
class ModelSection:
    size: str = opt(
        "tiny-4x256",
        "a model size, e.g. tiny-2x128, tiny-4x256, tiny-6x384, gpt2-small, pythia-160m (an unknown name "
        "lists them all); n_layer/n_head/n_embd override it",
    )
    n_layer: int | None = opt(None, "transformer blocks (overrides the size)")
    n_head: int | None = opt(None, "attention heads (overrides the size)")
    n_embd: int | None = opt(None, "width (overrides the size)")
    mlp: Literal["gelu", "swiglu"] = opt("gelu", "MLP kind")
    rope_base: float = opt(10000.0, "RoPE base")
    dropout: float = opt(0.0, "dropout probability")


@dataclass
class MixtureSource:
    packed: str = opt("", "a packed store (contextlab data pack --context train.context)")
    weight: float = opt(1.0, "share of the rows drawn from it (weights are normalised)")


@dataclass
class DataSection:
    store: str = opt(
        "",
        "token store to train on (contextlab data ingest ...); with data.packed, the store it was "
        "packed from when that moved (accepted by its content hash)",
    )
    val_store: str = opt("", "separate validation store; empty = hold out val_fraction of the documents")
    val_fraction: float = opt(
        0.02,
        "fraction held out for validation: of data.store's documents, or of a packed store's sequences when "
        "it was packed with --val-fraction 0 (one packed holding documents out validates on those)",
    )
    val_split: Literal["documents", "tail"] = opt(
        "documents",
        "documents (hold out whole documents) or tail (the last val_fraction of "
        "every document's tokens: for corpora of a few long documents)",
    )
    split_seed: int = opt(0, "seed of the train/validation split")
    train_tokens: int = opt(
        0,
        "train on only this many tokens of the training documents (taken in a seeded order, "
        "nested across sizes: the data-size axis of a sweep; epochs repeat them); 0 = all",
    )
    packed: str = opt(
        "",
        "packed store to train on (contextlab data pack --context train.context): its sequences "
        "are the rows; data.store may stay empty (the packed store knows its token store)",
    )
    mode: Literal["packed", "long_docs"] = opt(
        "packed",
        "packed (documents end to end with separators) or long_docs (every window of every "
        "document of >= context + 1 tokens, each rolled by a seeded offset, read column-major); "
        "with data.packed, the rows over the documents it was packed without (its validation rows)",
    )
    doc_mask: bool = opt(False, "block-diagonal attention: packed documents do not see each other")
    verify: bool = opt(
        True,
        "check the token stores' content hash and ids before training (one read of each store, "
        "remembered while its files are unchanged); false uses them as they are",
    )
    mixture: list[MixtureSource] = opt(
        [],
        "train on several packed stores with weights, e.g. [{packed=A, weight=0.5}, "
        "{packed=B, weight=0.5}]: every step has exactly those shares of rows (see "
        "data/mixture.py); replaces data.packed",
    )


@dataclass
class OptimSection:
    lr: float = opt(1e-3, "peak learning rate")
    min_lr_ratio: float = opt(0.1, "final learning rate as a fraction of the peak (cosine decay)")
    warmup_steps: int = opt(100, "linear warm-up steps")
    weight_decay: float = opt(0.1, "AdamW weight decay (matrices only)")
    beta1: float = opt(0.9, "AdamW beta1")
    beta2: float = opt(0.95, "AdamW beta2")
    eps: float = opt(1e-8, "AdamW epsilon")
    grad_clip: float = opt(1.0, "clip the global gradient norm to this; 0 = no clipping")


@dataclass
class TrainSection:
    RENAMED: ClassVar[dict[str, str]] = {"seq_len": "context"}
    # one size said two ways: a --set of either replaces the other one read from the file
    ALTERNATIVES: ClassVar[tuple[tuple[str, str], ...]] = (
        ("rows_per_step", "tokens_per_step"),
        ("val_rows", "val_tokens"),
    )

    out_dir: str = opt("runs/run", "run directory (checkpoints, metrics.jsonl, config.toml)")
    context: int = opt(
        256,
        "training context: the input tokens of a row (the model predicts each next token); 0 = the "
        "data's: a packed store's context, or with data.mode long_docs the length - 1 of documents "
        "that all have one length (synthetic tasks); not given, with data.packed or data.mixture: the "
        "context they were packed for",
    )
    tokens_per_step: int = opt(
        16384, "tokens per optimizer step, constant across contexts; 0 = unset (with rows_per_step)"
    )
    rows_per_step: int = opt(
        0,
        "rows per optimizer step instead of tokens_per_step (rows x context); 0 = unset; a --set of "
        "either one replaces the other one given in the TOML file",
    )
    micro_batch_rows: int = opt(0, "rows per forward pass per process; 0 = all of this process's rows")
    max_steps: int = opt(0, "budget: optimizer steps")
    max_tokens: int = opt(0, "budget: training tokens")
    max_flops: float = opt(0.0, "budget: training FLOPs (model + objective)")
    max_minutes: float = opt(0.0, "budget: wall-clock minutes")
    dtype: Literal["auto", "bf16", "fp32"] = opt(
        "auto",
        "bf16 (autocast), fp32, or auto: bf16 where the device multiplies it natively (a GPU that "
        "supports it, a CPU with AMX or AVX512-BF16), else fp32 (emulated bf16 is far slower); a "
        "resumed run keeps the precision it trained in",
    )
    compile: bool = opt(False, "torch.compile the model")
    device: Literal["auto", "cpu", "cuda"] = opt("auto", "auto (cuda when a GPU is visible), cpu or cuda")
    deterministic: bool = opt(
        False,
        "deterministic GPU kernels (a little slower): a rerun or a resumed GPU run "
        "repeats every bit; CPU runs are deterministic at a fixed thread count anyway",
    )
    parallel: Literal["ddp", "fsdp"] = opt(
        "ddp", "with torchrun: ddp or fsdp (checkpoints are full either way: a run resumes under either)"
    )
    threads: int = opt(0, "torch CPU threads; 0 = torch's default")
    seed: int = opt(0, "seed of the initialisation and the data order")
    log_every: int = opt(10, "steps between console/metrics lines")
    val_every: int = opt(100, "steps between validation losses; 0 = only at the end")
    val_tokens: int = opt(65536, "tokens in the fixed validation set; 0 = unset (with val_rows)")
    val_rows: int = opt(
        0,
        "rows in the fixed validation set instead of val_tokens; 0 = unset; a --set of either one "
        "replaces the other one given in the TOML file",
    )
    patience: int = opt(
        0,
        "early stopping: end the run when the validation loss has not improved for this many "
        "validations in a row (needs val_every); every new best is checkpointed and kept "
        "(RUN/checkpoints/step_N with N = best_step in metrics.jsonl), the newest checkpoint is the "
        "stopping step; 0 = train to the budget",
    )
    ckpt_every: int = opt(100, "steps between checkpoints; 0 = only at the end (and at a Ctrl-C or SIGTERM)")
    keep_last: int = opt(2, "checkpoints to keep")
    peak_flops: float = opt(
        0.0,
        "peak FLOP/s of one device for the MFU; 0 = the one `contextlab peak` measured and cached "
        "(no MFU is shown when there is none)",
    )
    tensorboard: bool = opt(False, "also write TensorBoard events (needs the tensorboard package)")
    progress: bool = opt(True, "show a progress bar")


@dataclass
class ObjectiveSection:
    name: str = opt(
        "clm",
        "objective: clm, mlm, span, prefix_lm, fim, mtp, ul2, contextlm, last_token, queries or recall "
        "(docs/objectives.md says what each trains)",
    )
    options: dict = opt({}, "the objective's own options (see its Options)")


@dataclass
class InitSection:
    source: str = opt(
        "",
        "start from this model instead of a fresh one: a contextlab run or checkpoint directory, "
        "or a local Hugging Face causal LM folder (the model shape then comes from it; [model] is ignored "
        "except dropout)",
    )
    step: int = opt(0, "checkpoint step when source is a contextlab run; 0 = its newest")
    freeze: list[str] = opt(
        [],
        "parameters to keep fixed: groups (embeddings, lm_head, attention, mlp, norms) or "
        "globs on parameter names (e.g. 'blocks.0.*')",
    )


@dataclass
class ExtendSection:
    method: Literal["none", "pi", "ntk", "yarn", "base"] = opt(
        "none",
        "RoPE context extension of the initial model: none, pi (position interpolation), ntk "
        "(NTK-aware), yarn, or base (a new RoPE base, as CodeLlama)",
    )
    factor: float = opt(
        0.0, "extension factor s for pi / ntk / yarn; 0 = train.context / the model's original context"
    )
    rope_base: float = opt(0.0, "method base: the new RoPE base (CodeLlama: 1e6)")
    original_context: int = opt(0, "the context the model was trained at; 0 = read it from the model")


@dataclass
class RunConfig:
    model: ModelSection = opt(factory=ModelSection, help="model shape")
    data: DataSection = opt(factory=DataSection, help="training data")
    optim: OptimSection = opt(factory=OptimSection, help="optimizer and schedule")
    train: TrainSection = opt(factory=TrainSection, help="budget, batch, precision, logging, checkpoints")
    objective: ObjectiveSection = opt(factory=ObjectiveSection, help="pretraining objective")
    init: InitSection = opt(factory=InitSection, help="continued pretraining: the model to start from")
    extend: ExtendSection = opt(factory=ExtendSection, help="RoPE context extension of the initial model")


# keys that may change between a run and its resumption without changing its numbers: where it
# is written and how it is logged, how a step is computed (the parallel strategy: checkpoints are
# full state dicts, so a DDP run resumes under FSDP as under another world size; threads, compile,
# deterministic kernels) and the budget (a new one is noted and recorded, see trainer.py)
LEGACY_RESUME_FREE = {("data", "verify")} | {
    ("train", k)
    for k in (
        "out_dir",
        "log_every",
        "val_every",
        "ckpt_every",
        "keep_last",
        "progress",
        "tensorboard",
        "compile",
        "threads",
        "peak_flops",
        "deterministic",
        "max_steps",
        "max_tokens",
        "max_flops",
        "max_minutes",
        "patience",
    )
}  # frozen: the legacy hash rule left out exactly these
RESUME_FREE = LEGACY_RESUME_FREE | {("train", "parallel")}


# values [model] and [optim] can take: (section, key, allowed, what the message asks for)
_RULES = [
    *[
        ("model", k, lambda v: v is None or v > 0, "a positive number")
        for k in ("n_layer", "n_head", "n_embd")
    ],
    ("model", "rope_base", lambda v: v > 0, "positive"),
    ("model", "dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("optim", "lr", lambda v: v > 0, "positive"),
    ("optim", "min_lr_ratio", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("optim", "warmup_steps", lambda v: v >= 0, "0 or more"),
    ("optim", "weight_decay", lambda v: v >= 0, "0 or more"),
    ("optim", "beta1", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("optim", "beta2", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("optim", "eps", lambda v: v > 0, "positive"),
    ("optim", "grad_clip", lambda v: v >= 0, "0 (no clipping) or more"),
]


def check_values(cfg: RunConfig) -> None:
    """Refuse a [model] shape or an [optim] value that cannot train, naming the key (the [train]
    budgets and shapes: ``budget.check_train``)."""
    for section, key, allowed, what in _RULES:
        value = getattr(getattr(cfg, section), key)
        if not allowed(value):
            raise UserError(f"{section}.{key} is {value}; it must be {what}")
    from contextlab.models.gpt import SIZES
    from contextlab.objectives import OBJECTIVES

    cls = OBJECTIVES.get(cfg.objective.name)
    if (
        cls is not None
    ):  # its options' names and values, before the run folder exists (not at the first batch)
        from_dict(cls.Options, dict(cfg.objective.options), prefix="objective.options")
    if cfg.model.size not in SIZES:
        raise UserError(f"unknown model size {cfg.model.size!r}; choose one of: {', '.join(SIZES)}")


def with_overrides(data: dict, overrides: list[str]) -> dict:
    """A run config read from TOML (``data``) with the ``--set`` ``overrides`` applied. The command line
    wins, also over the other key of a pair in ``TrainSection.ALTERNATIVES``: ``--set
    train.rows_per_step=33`` drops a ``tokens_per_step`` the file sets. Both keys of a pair given
    (not 0) on the command line is refused."""
    given = {tuple(parse_override(text)[0]): parse_override(text)[1] for text in overrides}
    out = apply_overrides(data, [])
    train = out.get("train")
    for pair in TrainSection.ALTERNATIVES:
        set_now = [k for k in pair if ("train", k) in given]
        if len(set_now) == 2 and all(given["train", k] not in (0, "0") for k in pair):
            raise UserError(f"set train.{pair[0]} or train.{pair[1]}, not both")
        if len(set_now) == 1 and isinstance(train, dict):
            train.pop(pair[1] if set_now[0] == pair[0] else pair[0], None)
    return apply_overrides(out, overrides)


def renamed_keys() -> dict[str, str]:
    """Every renamed run-config key as "section.old" -> "section.new" (sweep grids use it)."""
    hints = get_type_hints(RunConfig)
    return {
        f"{name}.{old}": f"{name}.{new}"
        for name, section in hints.items()
        for old, new in getattr(section, "RENAMED", {}).items()
    }


def config_hash(cfg: RunConfig) -> str:
    """Hash of everything that determines the numbers of a run (resume must match it).

    Only values that differ from their defaults are hashed (``RESUME_FREE`` keys never): an
    option added later with a default leaves the hash of every earlier run as it was."""
    d, defaults = _hashed(cfg), _hashed(type(cfg)())
    changed = {s: {k: v for k, v in sec.items() if v != defaults[s].get(k)} for s, sec in d.items()}
    return _sha({s: sec for s, sec in changed.items() if sec})


def config_hash_matches(cfg: RunConfig, recorded_hash: str | None) -> bool:
    """Whether a checkpoint recording ``recorded_hash`` was written under this config (the hash of
    today's rule, or of the legacy rule for runs written before it)."""
    return recorded_hash in (config_hash(cfg), legacy_config_hash(cfg))


def first_difference(before: RunConfig, now: RunConfig) -> tuple[str, Any, Any] | None:
    """The first key, in the config's own order, whose value differs between two run configs
    (``RESUME_FREE`` keys left out; objective options key by key): (``section.key``, its value
    before, its value now); None when they agree."""
    a, b = _hashed(before, read=True), _hashed(now, read=True)
    if "auto" in (a["train"].get("dtype"), b["train"].get("dtype")):  # the precision a run trained in is
        b["train"]["dtype"] = a["train"].get("dtype")  # its checkpoints' (state.json), checked by the resume
    return _first_difference(a, b, "")


def _first_difference(a: Any, b: Any, prefix: str) -> tuple[str, Any, Any] | None:
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return None if a == b else (prefix, a, b)
    for key in [*b, *(k for k in a if k not in b)]:
        found = _first_difference(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{prefix}.{key}".lstrip("."))
        if found:
            return found
    return None


_ABSENT = object()  # an objective option one of the two configs does not set


def describe_difference(
    recorded: dict, now: RunConfig, text: Callable[[Any], str] | None = None
) -> str | None:
    """None when ``now`` resumes the run whose config.toml holds ``recorded`` (``first_difference``);
    else why not, for one line: ``optim.lr 0.002 there, 0.005 now`` (values through ``text``,
    default ``shown``), or that the recorded config is not one this version reads."""
    try:
        before = from_dict(RunConfig, recorded)
    except UserError as exc:  # keys this version does not know: not this config
        return f"its config.toml is not one this version trains ({exc})"
    diff = first_difference(before, now)
    if diff is None:
        return None
    key, there, later = diff
    text = text or shown
    return f"{key} {text(there)} there, {text(later)} now"


def shown(value: Any) -> str:
    """A config value as a message shows it: numbers short, strings quoted (so an empty one shows)."""
    if value is _ABSENT:
        return "(not set)"
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, (str, bool, list, dict)) or value is None else str(value)


# ---------------------------------------------------------------------------- legacy hash rule
# Before the non-default rule, every key was hashed except these, left out while at their
# default (keys added after runs existed), and train.context was hashed as train.seq_len.
# Frozen here: runs and quickstart states written then hold such hashes.
LEGACY_LATER_KEYS = {
    ("data", "mixture"): [],
    ("data", "train_tokens"): 0,
    ("init", None): {"source": "", "step": 0, "freeze": []},
    ("extend", None): {"method": "none", "factor": 0.0, "rope_base": 0.0, "original_context": 0},
}
# the keys that existed then (a key added since is left out while at its default)
LEGACY_KEYS = {
    "model": "size n_layer n_head n_embd mlp rope_base dropout",
    "data": "store val_store val_fraction val_split split_seed train_tokens packed mode doc_mask mixture",
    "optim": "lr min_lr_ratio warmup_steps weight_decay beta1 beta2 eps grad_clip",
    "train": "out_dir seq_len tokens_per_step micro_batch_rows max_steps max_tokens max_flops "
    "max_minutes dtype compile device deterministic parallel threads seed log_every val_every "
    "val_tokens patience ckpt_every keep_last peak_flops tensorboard progress",
    "objective": "name options",
    "init": "source step freeze",
    "extend": "method factor rope_base original_context",
}


def legacy_config_hash(cfg: RunConfig) -> str:
    """The run-config hash as computed before the non-default rule (exactly, for every config
    that could be written then); runs from then resume with it."""
    d, defaults = _hashed(cfg, LEGACY_RESUME_FREE), _hashed(type(cfg)(), LEGACY_RESUME_FREE)
    d["train"]["seq_len"] = d["train"].pop("context")
    defaults["train"]["seq_len"] = defaults["train"].pop("context")
    for section, sec in d.items():
        known = LEGACY_KEYS.get(section, "").split()
        for key in [k for k in sec if k not in known and sec[k] == defaults[section][k]]:
            sec.pop(key)
    d = {section: sec for section, sec in d.items() if sec or section in LEGACY_KEYS}
    for (section, key), default in LEGACY_LATER_KEYS.items():
        if key is None and d.get(section) == default:
            d.pop(section)
        elif key is not None and d[section].get(key) == default:
            d[section].pop(key)
    return _sha(d)


def _hashed(cfg: RunConfig, free: set[tuple[str, str]] = RESUME_FREE, read: bool = False) -> dict:
    """The config as a dict of sections without the ``free`` keys (``RESUME_FREE``); with ``read``, its
    objective's options as the objective reads them (``_options_read``: for comparing two configs; the
    hashes keep the options as written, so that every recorded hash stays what it was)."""
    d = to_dict(cfg)
    for section, key in free:
        d[section].pop(key, None)
    if not read and d["train"].get("dtype") == "auto":  # hashed as bf16, the default before "auto":
        d["train"]["dtype"] = "bf16"  # recorded hashes stay; a resume keeps the precision it trained in
    objective = d.get("objective") or {}
    if read and objective.get("options"):
        objective["options"] = _options_read(objective.get("name", ""), objective["options"])
    return d


def _options_read(name: str, options: dict) -> dict:
    """An objective's options as it reads them: values converted to their types and those equal to
    the defaults left out, so that ``n_future = 4`` written out (the default) or ``"4"`` resumes a run
    written without it (they were compared as written: refused as another config). Options the
    objective does not read stay as given (its build refuses them)."""
    from contextlab.objectives import OBJECTIVES

    cls = OBJECTIVES.get(name)
    try:
        read = to_dict(from_dict(cls.Options, dict(options))) if cls is not None else None
    except UserError:
        read = None
    if read is None:
        return options
    defaults = to_dict(cls.Options())
    return {k: v for k, v in read.items() if v != defaults.get(k)}


def _sha(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
