"""The sweep file: its three tables expanded into validated runs, before anything runs.

A sweep file has three tables::

    [sweep]   name, out_dir, parallel, evals, eval_args ...   (SweepSection)
    [base]    a run config, exactly as `contextlab train` takes it
    [grid]    "section.key" = [values ...]   e.g. "train.context" = [64, 128, 256]

Every point of the grid is the base config with those keys set, named by its grid values
(``context-64__n_embd-32``) and given the folder ``OUT/runs/NAME``.

Trade-off: every grid point is built and validated as the run config train would build (values,
budget, evaluation names) when the file is read, which costs a second for a large grid but means a
typo fails before the first run trains, not after an hour.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from contextlab.config import apply_overrides, flat_keys, from_dict, opt, parse_override, read_toml
from contextlab.errors import UserError


@dataclass
class SweepSection:
    name: str = opt("sweep", "name of the sweep (used in the report)")
    out_dir: str = opt("sweeps/sweep", "directory for the runs, results.csv and the analysis")
    parallel: int = opt(1, "runs at the same time")
    threads_per_run: int = opt(0, "torch threads per run; 0 = cores / parallel")
    evals: list[str] = opt(
        [],
        "evaluations to run after each training run (contextlab eval NAME); runs of an objective that "
        "does not run left to right (mlm, span) get none",
    )
    eval_args: dict = opt(
        {},
        "extra arguments per evaluation: NAME = [args]; {key.path} is replaced by "
        "the run's config value, {run} by the run directory; ppl, contextwise and bayes-fit given no "
        "--data read what each run held out (--split run)",
    )
    retry_failed: bool = opt(True, "run failed runs again when the sweep is restarted")
    analysis_axis: str = opt(
        "",
        "grid key that groups the loss-vs-context curves of the analysis (one panel and "
        "one optimum per value), e.g. data.train_tokens for a data-size sweep; empty = the "
        "train.max_* budget key of the grid",
    )
    analysis_metric: str = opt(
        "",
        "results column the analysis minimises; empty = contextwise.best_context_loss (add "
        "contextwise to evals: the analysis then also gives every other context's loss minus the "
        "optimum's, paired over the documents both runs read, with a 95% interval; with a grid over seeds, "
        "paired seed by seed and pooled over seeds); another column "
        "(val_loss, best_val_loss) needs analysis_rank_by_mean_loss",
    )
    analysis_rank_by_mean_loss: bool = opt(
        False,
        "let the analysis rank training contexts by a loss averaged over each run's own context "
        "(val_loss, best_val_loss), which ranks them wrongly; it then prints a warning",
    )
    analysis_window: int = opt(
        3,
        "values of the analysis axis over which the optimal context is smoothed (the most "
        "common optimum in a sliding window); 1 = the raw optimum of each value",
    )


@dataclass
class Run:
    name: str
    params: dict  # grid key -> value
    config: dict  # the full run config (validated)
    dir: Path
    # (evaluation, its arguments before {key.path} is filled in), as _run_evals decided them
    evals: list[tuple[str, list[str]]] = field(default_factory=list)


# Evaluations that read a token store and take --split run: with no --data in eval_args a sweep
# scores each run on what it held out (its data.val_store, or its held-out documents or tails).
SPLIT_RUN_EVALS = ("ppl", "contextwise", "bayes-fit")
NEEDS_DATA = ("mqar", "icl")  # no default data, and none a sweep could choose for them


def _short(key: str) -> str:
    return key.split(".")[-1]


def _fmt(value) -> str:
    """A grid value as a run-name part: numbers keep their sign (-0.5 and 0.5 are two runs), other
    values keep letters, digits and . + -, with runs of anything else as one '-'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-")


def load_sweep(path: str | Path, overrides: list[str] = ()) -> tuple[SweepSection, list[Run]]:
    """Read a sweep file and expand its grid into validated runs."""
    from contextlab.train.budget import check_train
    from contextlab.train.config import RunConfig, check_values, renamed_keys

    file_data = read_toml(path)
    _check_overrides(file_data, overrides, path)
    data = apply_overrides(file_data, list(overrides))
    unknown = set(data) - {"sweep", "base", "grid"}
    if unknown:
        raise UserError(
            f"unknown table(s) {sorted(unknown)} in {path}; a sweep has [sweep], [base] and [grid]"
        )
    data["grid"] = _flat_grid(data.get("grid", {}))
    section = from_dict(SweepSection, data.get("sweep", {}))
    _check_evals(section, path)
    if section.parallel < 1 or section.threads_per_run < 0:
        raise UserError(
            f"{path}: [sweep] parallel must be 1 or more and threads_per_run 0 or more (got "
            f"{section.parallel}, {section.threads_per_run})"
        )
    grid = data.get("grid", {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"grid key '{key}' must be a non-empty list of values")
    out = Path(section.out_dir)
    keys = list(grid)
    runs, names = [], set()
    for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
        params = dict(zip(keys, combo))
        name = "__".join(f"{_short(k)}-{_fmt(v)}" for k, v in params.items()) or "run"
        if name in names:
            raise UserError(
                f"two grid points give the same run name {name!r}; make the grid keys' last parts differ"
            )
        names.add(name)
        cfg = apply_overrides(data.get("base", {}), [])
        for k, v in params.items():
            node = cfg
            *parents, leaf = k.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = v
        cfg.setdefault("train", {})["out_dir"] = str(out / "runs" / name)
        try:  # every value a run would refuse, refused here, before the first run trains
            run_cfg = from_dict(RunConfig, cfg)
            check_values(run_cfg)
            check_train(run_cfg.train)
            run = Run(name, params, cfg, out / "runs" / name, _run_evals(section, run_cfg, path))
            for _, args in run.evals:  # a {key} the run config has not: refused now, not after training
                [format_arg(a, run) for a in args]
        except UserError as exc:
            raise UserError(f"grid point {name}: {exc}") from None
        # results columns use the new names of renamed keys; the run name and config keep the
        # grid's own spelling, so a sweep written before a rename resumes where it stopped
        run.params = {renamed_keys().get(k, k): v for k, v in params.items()}
        runs.append(run)
    return section, runs


def _check_overrides(file_data: dict, overrides, path) -> None:
    """A ``--set`` of a sweep names a table: sweep., base. or grid. (a run setting without ``base.`` was
    blamed on the file); a ``base.`` key the grid varies would be replaced in every run, so it is one
    line naming the grid's --set."""
    grid = set(_flat_grid(file_data.get("grid", {})))
    for text in overrides:
        keys, _ = parse_override(text)
        if keys[0] not in ("sweep", "base", "grid"):
            raise UserError(
                f"--set {text}: a sweep's --set keys start with sweep., base. or grid. (a run setting: "
                f"--set base.{text}; a grid axis: --set grid.{'.'.join(keys)}=[...])"
            )
        if keys[0] == "base" and ".".join(keys[1:]) in grid:
            key = ".".join(keys[1:])
            raise UserError(
                f"--set {text}: {key} is a grid axis of {path}, so every run takes the grid's values; give "
                f"them with --set grid.{key}=[...]"
            )


def _flat_grid(grid: dict) -> dict:
    """The grid with nested tables flattened to dotted keys, in order: ``--set grid.train.context=[64]``
    gives {"train": {"context": [64]}}, added after the file's own "train.context" = [...], so its value
    replaces the file's and the axis keeps its place."""
    return flat_keys(grid)


def check_data_paths(runs: list[Run]) -> None:
    """A [data] path of a run that names nothing here, refused before the first run trains (each run
    would fail on it); a sweep file is read without it (recipes name stores made later)."""
    for run in runs:
        data = run.config.get("data") or {}
        paths = [(f"data.{k}", data.get(k)) for k in ("store", "val_store", "packed")]
        paths += [
            (f"data.mixture entry {i + 1}", m.get("packed")) for i, m in enumerate(data.get("mixture") or [])
        ]
        for key, path in paths:
            if path and not Path(str(path)).exists():
                raise UserError(
                    f"grid point {run.name}: {key} {path!r} not found (from {Path.cwd()}); fix the path in "
                    "[base] or [grid], or run the sweep from the folder it is relative to"
                )


def format_arg(arg: str, run: Run) -> str:
    """An eval argument with ``{section.key}`` replaced by the run config's value and ``{run}`` by the
    run's folder (renamed keys found under either spelling)."""
    from contextlab.train.config import renamed_keys

    def lookup(m: re.Match) -> str:
        key = m.group(1)
        if key == "run":
            return str(run.dir)
        for spelling in [key] + [old for old, new in renamed_keys().items() if new == key]:
            node = run.config
            for part in spelling.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node is not None:
                return str(node)
        raise UserError(f"eval argument {arg!r}: the run config has no key '{key}'")

    return re.sub(r"\{([A-Za-z0-9_.]+)\}", lookup, arg)


def _given(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _run_evals(section: SweepSection, run_cfg, path) -> list[tuple[str, list[str]]]:
    """The evaluations a run of this config gets, with their arguments: none for a run of an
    objective that does not run left to right (MLM, span corruption: every evaluation scores
    next-token predictions), and ``--split run`` for a store-reading evaluation given no --data.
    An evaluation that needs data the sweep cannot choose is refused here, before the first run."""
    from contextlab.eval import EVALS
    from contextlab.objectives import OBJECTIVES

    if OBJECTIVES[run_cfg.objective.name].lm_prefix is None:
        return []
    evals = []
    for name in section.evals:
        args = [str(a) for a in section.eval_args.get(name, [])]
        if not _given(args, "--data"):
            if name in SPLIT_RUN_EVALS and not _given(args, "--split"):
                args = args + ["--split", "run"]
            elif name in NEEDS_DATA:
                raise UserError(
                    f"{path}: eval {name} in [sweep] evals reads {EVALS[name].data}, and the sweep gives it "
                    f'none: add eval_args = {{ {name} = ["--data", "PATH"] }} ("{{data.store}}" is each '
                    "run's own store)"
                )
        evals.append((name, args))
    return evals


def eval_notes(section: SweepSection, runs: list[Run]) -> list[str]:
    """What the sweep chose for its evaluations that the file does not say (``_run_evals``' choices,
    read off the runs' plans), one line each."""
    lines = []
    planned = next((r.evals for r in runs if r.evals), [])
    split = [n for n, args in planned if args != [str(a) for a in section.eval_args.get(n, [])]]
    if split:
        lines.append(
            f"eval {', '.join(split)}: no --data in [sweep] eval_args, so each run is scored on what it held "
            "out (--split run: its data.val_store, or the documents or tails it held out of its store)"
        )
    skipped = [r for r in runs if section.evals and not r.evals]
    if skipped:
        names = sorted({r.config["objective"]["name"] for r in skipped})
        which = f"objective {names[0]} does" if len(names) == 1 else f"objectives {', '.join(names)} do"
        lines.append(
            f"{len(skipped)} run(s) get no evaluation: {', '.join(r.name for r in skipped)} ({which} not run "
            "left to right, and every evaluation scores next-token predictions)"
        )
    return lines


def budget_notes(runs: list[Run]) -> list[str]:
    """One line naming the runs whose warm-up is not shorter than their step budget (their learning
    rate would rise the whole run and never decay), known before any run trains for budgets in steps
    or tokens (a FLOPs or minutes budget is said by the run itself, under its line)."""
    from contextlab.config import from_dict
    from contextlab.train.budget import budget_steps, resolve_shape
    from contextlab.train.config import RunConfig

    short = []
    for run in runs:
        cfg = from_dict(RunConfig, run.config)
        if cfg.train.max_flops or cfg.train.max_minutes or not cfg.train.context:
            continue  # train.context 0 is the data's: known once the data is opened
        total = budget_steps(resolve_shape(cfg).train, 0.0)  # rows_per_step as tokens, as training does
        if cfg.optim.warmup_steps >= total:
            short.append((run.name, total))
    if not short:
        return []
    shown = ", ".join(f"{name} ({total:,} steps)" for name, total in short[:4])
    more = f" and {len(short) - 4} more" if len(short) > 4 else ""
    least = min(total for _, total in short)
    return [
        f"optim.warmup_steps is not below the step budget of {len(short)} run(s): {shown}{more}; their "
        "learning rate rises the whole run and never decays (a warm-up of a tenth of the shortest is "
        f"base.optim.warmup_steps = {max(1, least // 10)})"
    ]


def _check_evals(section: SweepSection, path) -> None:
    """Unknown evaluation names in [sweep] evals or eval_args are refused before anything runs."""
    from contextlab.eval import EVALS

    unknown = sorted({*section.evals, *section.eval_args} - set(EVALS))
    if unknown:
        raise UserError(
            f"{path}: unknown evaluation(s) {', '.join(unknown)} in [sweep] evals/eval_args; "
            f"choose from {', '.join(EVALS)}"
        )
