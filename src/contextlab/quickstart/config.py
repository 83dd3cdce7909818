"""The quickstart's typed config, read from a recipe TOML (the packaged ``recipe.toml`` by default).

Every number the quickstart uses lives in the recipe, none in the code: the corpus split,
the packings, one shared run config (``[base]``, exactly what ``contextlab train`` takes)
and the runs that differ from it (``[runs.NAME]``: objective, packing, objective options),
and the evaluation options. ``--set`` overrides any key, and the whole recipe is checked
before anything runs: an unknown key, a run asking for a packing that is not made, or a
run config the trainer would reject fails in a second with one line naming the key.

Trade-off: runs are a table of named tables rather than a TOML array, so that
``--set runs.gpt.packing=ep`` can reach them; their order is the recipe's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from contextlab.config import apply_overrides, from_dict, opt, read_toml, tomllib
from contextlab.errors import UserError

RECIPE_NAME = "recipe.toml"
EVALS = ("contextwise", "bayes-fit", "niah")  # the evaluations of every run, in this order
TRAIN_STORE = "stdlib"  # OUT/stdlib: the training code (packed into OUT/packed/METHOD)
OWN_STORE = "corpus"  # OUT/corpus: the training part of a corpus of the user's (corpus.source)


@dataclass
class CorpusSection:
    source: str = opt(
        "",
        "the corpus trained on and held out from: a folder of text or code files (read as `contextlab data "
        "ingest` reads one, undecodable bytes replaced); empty = the Python standard library",
    )
    vocab: int = opt(
        4096,
        "size of the BPE vocabulary of every store: trained on the embedded books, or with corpus.source "
        "on the corpus's training files",
    )
    code_include: list[str] = opt(["**/*.py"], "files of the corpus to read (globs on the path inside it)")
    heldout: list[str] = opt(
        ["test/**/*.py"],
        "files of the corpus held out of training (globs on the path inside it); the evaluations read them",
    )
    exclude: list[str] = opt(
        [], 'corpus.source: files left out of both (globs), e.g. ["SOURCE.*", "README*"] for notes'
    )

    def __post_init__(self) -> None:
        if self.vocab < 260:
            raise ValueError(
                f"corpus.vocab must be at least 260 (the bytes and a few merges), got {self.vocab}"
            )
        if not self.heldout:
            raise ValueError("corpus.heldout needs at least one glob: the evaluations need held-out files")


@dataclass
class PackSection:
    methods: list[str] = opt(
        ["ep", "splice"], "packings of the training code (contextlab data pack --method)"
    )
    retriever: Literal["bm25", "dense", "repo"] = opt("bm25", "retriever of splice/icp")
    k: int = opt(1, "splice: related documents retrieved per popped document")
    seed: int = opt(0, "packing seed")


@dataclass
class RunSpec:
    objective: str = opt("clm", "objective (contextlab.objectives.OBJECTIVES)")
    packing: str = opt("splice", "which packed store to train on (one of pack.methods)")
    options: dict = opt({}, "the objective's own options")


@dataclass
class EvalSection:
    dtype: Literal["fp32", "bf16"] = opt("fp32", "evaluation precision")
    batch_size: int = opt(8, "sequences per forward pass")
    contextwise: dict = opt({}, "options of `contextlab eval contextwise` (data: the held-out code)")
    bayes_fit: dict = opt({}, "options of `contextlab eval bayes-fit` (data: the held-out code)")
    niah: dict = opt({}, "options of `contextlab eval niah` (haystack: the embedded books)")


@dataclass
class QuickstartConfig:
    corpus: CorpusSection = opt(factory=CorpusSection, help="what is ingested and held out")
    pack: PackSection = opt(factory=PackSection, help="how the training code is packed")
    base: dict = opt({}, "the run config shared by every run (TOML tables model, data, optim, train)")
    runs: dict = opt({}, "NAME = {objective, packing, options}: the runs, in this order")
    eval: EvalSection = opt(factory=EvalSection, help="evaluation options")


def packaged_recipe() -> str:
    """The text of the recipe shipped inside the package."""
    return resources.files("contextlab.quickstart").joinpath(RECIPE_NAME).read_text(encoding="utf-8")


def load_recipe(path: str | Path | None = None, overrides: list[str] = ()) -> QuickstartConfig:
    """Read a recipe (default: the packaged one), apply ``--set`` overrides and check it all."""
    if path is None:
        data = tomllib.loads(packaged_recipe())
    else:
        data = read_toml(path)
    cfg = from_dict(QuickstartConfig, apply_overrides(data, list(overrides)))
    runs = {}
    for name, spec in cfg.runs.items():
        if not isinstance(spec, dict):
            raise UserError(f"runs.{name} must be a table (objective, packing, options)")
        runs[name] = from_dict(RunSpec, spec, prefix=f"runs.{name}")
        if runs[name].packing not in cfg.pack.methods:
            raise UserError(
                f"runs.{name}.packing is {runs[name].packing!r} but the quickstart packs only "
                f"{', '.join(cfg.pack.methods)}; set pack.methods or runs.{name}.packing"
            )
    if not runs:
        raise UserError("the recipe has no [runs.NAME] table; add at least one run")
    cfg.runs = runs
    from contextlab.eval import EVALS as REGISTRY

    for name in EVALS:
        from_dict(REGISTRY[name].options, eval_options(cfg, name), prefix=f"eval.{name.replace('-', '_')}")
    from contextlab.objectives import OBJECTIVES

    for name, spec in runs.items():  # the trainer's own checks, before anything runs
        if spec.objective not in OBJECTIVES:
            raise UserError(
                f"runs.{name}.objective: unknown objective {spec.objective!r}; choose one of "
                f"{', '.join(OBJECTIVES)}"
            )
        from_dict(OBJECTIVES[spec.objective].Options, dict(spec.options), prefix=f"runs.{name}.options")
        run_config(cfg, name, Path("quickstart-check"))
    return cfg


def train_store(cfg: QuickstartConfig) -> str:
    """The folder name, in OUT, of the store the runs train on."""
    return OWN_STORE if cfg.corpus.source else TRAIN_STORE


def eval_options(cfg: QuickstartConfig, name: str) -> dict:
    """The recipe's options of evaluation ``name`` (``bayes-fit`` lives under ``eval.bayes_fit``)."""
    return dict(getattr(cfg.eval, name.replace("-", "_")))


def run_config(cfg: QuickstartConfig, name: str, out: Path):
    """The full RunConfig of run ``name`` whose artifacts live under ``out``."""
    from contextlab.train.config import RunConfig

    spec: RunSpec = cfg.runs[name]
    data = apply_overrides(cfg.base, [])
    data.setdefault("data", {})["packed"] = str(out / "packed" / spec.packing)
    data["data"]["store"] = str(
        out / train_store(cfg)
    )  # the packed store's own store; names the tokenizer for evals
    data.setdefault("train", {})["out_dir"] = str(out / "runs" / name)
    data["objective"] = {"name": spec.objective, "options": dict(spec.options)}
    try:
        return from_dict(RunConfig, data)
    except UserError as exc:
        raise UserError(f"run {name}: {exc}") from None
