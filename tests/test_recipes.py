"""Every recipe in recipes/ is valid before it meets a machine: each training config it makes loads, and each
evaluation command it runs parses with its options. The GPU recipes run where a typo costs minutes of
borrowed GPU time and is found only there, so they are checked here, on the CPU, with nothing trained."""

from __future__ import annotations

import importlib

import pytest

from contextlab.cli.eval import _parser
from contextlab.cli.train import load_run_config
from contextlab.config import dataclass_from_args, from_dict, read_toml
from contextlab.eval import EVALS
from contextlab.objectives import OBJECTIVES
from contextlab.sweep.spec import format_arg, load_sweep
from contextlab.train.config import RunConfig
from tests.conftest import REPO

RECIPES = {p.name: p for p in sorted((REPO / "recipes").glob("*.toml"))}


def kind(recipe: dict) -> str:
    if "sweep" in recipe:
        return "sweep"
    if "pretrain" in recipe and "extension" in recipe:
        return "splice study"
    if "train" in recipe and "model" in recipe:
        return "run"
    return "other"  # the quickstart's own format and the MLP study's (their tests load them)


def by_kind(k: str) -> list[str]:
    return [name for name, p in RECIPES.items() if kind(read_toml(p)) == k]


def check_eval(argv: list[str]) -> None:
    """``contextlab eval NAME ...`` arguments parse, and the evaluation's options take their values."""
    name = next(a for a in argv if a in EVALS)
    args = _parser(name).parse_args(argv)
    dataclass_from_args(EVALS[name].options, args)


def test_every_recipe_is_of_a_known_kind_and_the_gpu_ones_are_checked():
    kinds = {name: kind(read_toml(p)) for name, p in RECIPES.items()}
    assert set(kinds) >= {
        "optimal_context_gpu.toml",
        "contextlm_vs_gpt_gpu.toml",
        "splice_vs_ep_extension_gpu.toml",
    }
    assert kinds["optimal_context_gpu.toml"] == kinds["contextlm_vs_gpt_gpu.toml"] == "sweep"
    assert kinds["splice_vs_ep_extension_gpu.toml"] == "splice study"
    assert {k for k in kinds.values()} == {"sweep", "splice study", "run", "other"}


@pytest.mark.parametrize("name", by_kind("sweep"))
def test_a_sweep_recipe_builds_every_run_and_its_evaluations_parse(name):
    section, runs = load_sweep(RECIPES[name])  # builds and validates every run config of the grid
    assert runs
    for run in runs:
        causal = OBJECTIVES[run.config.get("objective", {}).get("name", "clm")].lm_prefix is not None
        assert [ev for ev, _ in run.evals] == (section.evals if causal else [])  # MLM, span: none
        for ev, args in run.evals:
            args = [format_arg(a, run) for a in args]
            check_eval([ev, "--model", str(run.dir), *args])


@pytest.mark.parametrize("name", by_kind("run"))
def test_a_run_recipe_loads(name):
    cfg = load_run_config(str(RECIPES[name]), [])
    assert cfg.objective.name in OBJECTIVES


@pytest.mark.parametrize("name", by_kind("splice study"))
def test_a_splice_study_recipe_makes_valid_configs_and_commands(name, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    study = importlib.import_module("splice_vs_ep_extension")
    recipe = read_toml(RECIPES[name])
    books = tmp_path / "books"  # the study reads the books' manifest to plan; a tiny one stands in
    (books / "texts").mkdir(parents=True)
    (books / "manifest.jsonl").write_text(
        "".join(f'{{"ebook_id": {i}, "file": "texts/pg{i}.txt", "title": "t"}}\n' for i in range(40))
    )
    recipe["corpus"]["books"] = str(books)
    steps = [s for _, s in study.plan(recipe, tmp_path / "out")]
    configs = [s.fingerprint["config"] for s in steps if s.fingerprint.get("config")]
    assert len(configs) == 3  # the base model and the two arms
    for cfg in configs:
        from_dict(RunConfig, cfg)
    evals = [s.fingerprint["args"] for s in steps if s.fingerprint.get("args", [""])[0] == "eval"]
    assert len(evals) == 9
    for args in evals:
        check_eval(args[1:])


def test_the_small_copies_of_the_gpu_recipes_are_made_and_valid(tmp_path, monkeypatch):
    """scripts/gpu/small_copy.py (the rehearsal's recipes) finds every text it edits in the GPU recipes, and
    its copies run on the CPU with the small model: a GPU recipe edit that the rehearsal no longer covers
    fails here."""
    monkeypatch.syspath_prepend(str(REPO / "scripts" / "gpu"))
    small_copy = importlib.import_module("small_copy")
    assert small_copy.main([str(tmp_path / "small")]) == 0
    for name in ("optimal_context.toml", "contextlm_vs_gpt.toml"):
        section, runs = load_sweep(tmp_path / "small" / name)
        assert {r.config["model"]["size"] for r in runs} == {"tiny-2x128"}
        assert {r.config["train"].get("device", "auto") for r in runs} <= {"auto", "cpu"}
        assert all("cuda" not in a for a in section.eval_args.get("contextwise", []))
    study = read_toml(tmp_path / "small" / "splice_vs_ep.toml")
    assert (
        study["pretrain"]["model"]["size"] == "tiny-2x128" and study["extension"]["train"]["device"] == "cpu"
    )
    assert all(ev.get("device", "cpu") == "cpu" for ev in study["eval"].values())
    monkeypatch.setitem(small_copy.EDITS, "optimal_context_gpu.toml", [("parallel = 44", "parallel = 1")])
    with pytest.raises(SystemExit, match="no longer contains 'parallel = 44'"):
        small_copy.small_copy("optimal_context_gpu.toml")
