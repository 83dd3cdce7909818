"""Optimal context length vs training-set size on sparse parity (intrinsic-entropy seed, Appendix F).

For every (training-set size D, visible context l): draw D parity samples, train a small
MLP that sees the task and only the l nearest bits, stop when the validation loss has not
improved for ``patience`` evaluations, and keep the best validation loss. Longer l lowers
the Bayes risk (more tasks become solvable) but adds inputs the model must learn to ignore
or use from the same D samples, so with little data the best l is short and it grows with
D (the seed's Figure 12; its Figure 4 shows the same on text).

The model is an MLP over the l bits (as ±1) with the task as a one-hot input of its first
layer, two hidden layers, two answer logits. The seed's Figure 16 instead concatenates the
task after a context MLP; measured here, that model stays on the parity plateau (validation
loss 0.693 = log 2 after 3,000 steps on 32K samples), while the task-at-the-input MLP learns
and then overfits, which is what the question needs. Every cell of the grid gets a fresh
model and the same validation set. A cell is a step of ``contextlab.steps`` (state in
``OUT/steps.json``): it writes ``OUT/cells/D_l.json``, ``OUT/results.json`` gathers the
finished cells after each one, and finished cells are skipped when the sweep is run again,
so an interrupted sweep resumes (``contextlab optimal-context``).

Trade-off: the MLP sees a bit vector, not tokens, so thousands of small trainings fit in
minutes on a CPU; the transformer version of the same question (one run per cell through
``contextlab train``) costs two orders of magnitude more. A cap on optimizer steps
(``max_steps``) bounds the largest sets; the result records which cells hit it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contextlab.config import opt
from contextlab.data import synthetic as syn
from contextlab.errors import UserError
from contextlab.io import atomic_write_json
from contextlab.steps import Step, StepRunner


@dataclass
class OptimalContextConfig:
    n_bits: int = opt(100, "context bits L of the parity data")
    n_tasks: int = opt(90, "parity tasks T")
    min_far_bit: int = opt(11, "far bits spread over min_far_bit..L")
    decay: float = opt(1.2, "task frequency ∝ far_bit^-decay")
    task_seed: int = opt(0, "seed of the task definitions")
    data_sizes: list[int] = opt([4000, 16000, 64000, 256000], "training-set sizes D (samples)")
    contexts: list[int] = opt([10, 20, 30, 40, 60, 80, 100], "visible bits l given to the model")
    val_samples: int = opt(5000, "validation samples (the same set for every cell)")
    hidden: int = opt(256, "hidden width of the MLP (2 hidden layers)")
    lr: float = opt(3e-3, "Adam learning rate")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    batch_size: int = opt(128, "samples per optimizer step")
    eval_every: int = opt(100, "optimizer steps between validation losses")
    patience: int = opt(5, "stop after this many validations without a new best")
    max_steps: int = opt(6000, "cap on optimizer steps per cell")
    seed: int = opt(0, "seed of the data samples and the initialisations")
    threads: int = opt(1, "torch CPU threads")
    measure_features: bool = opt(
        True,
        "also measure intrinsic entropy / dimension of each best model's last hidden "
        "layer on the validation set (the seed's Appendix J.3 on the MLP)",
    )
    out_dir: str = opt("runs/optimal_context_mlp", "where results.json and the plots go")

    def __post_init__(self):
        if not self.data_sizes or not self.contexts:
            raise ValueError("data_sizes and contexts must not be empty")
        if min(self.contexts) < 1 or max(self.contexts) > self.n_bits:
            raise ValueError(f"contexts must lie in 1..n_bits={self.n_bits}")
        if min(self.data_sizes) < self.batch_size:
            raise ValueError(f"every data size must be >= batch_size={self.batch_size}")

    def parity(self, n_samples: int = 1, seed: int = 0) -> syn.ParityConfig:
        return syn.ParityConfig(
            n_bits=self.n_bits,
            n_tasks=self.n_tasks,
            min_far_bit=self.min_far_bit,
            decay=self.decay,
            task_seed=self.task_seed,
            n_samples=n_samples,
            seed=seed,
        )


class ContextMLP(nn.Module):
    """bits (B, l) ±1 and task (B,) -> answer logits (B, 2); the task enters the first layer as a bias."""

    def __init__(self, n_visible: int, n_tasks: int, hidden: int):
        super().__init__()
        self.bits = nn.Linear(n_visible, hidden)
        self.task = nn.Embedding(n_tasks, hidden)  # = a one-hot task input to the first layer
        self.mlp = nn.Sequential(nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 2))

    def features(self, bits: Tensor, task: Tensor) -> Tensor:
        """The last hidden layer (B, hidden): what the answer is read from (as a last-token state is)."""
        return self.mlp[:-1](self.bits(bits) + self.task(task))

    def forward(self, bits: Tensor, task: Tensor) -> Tensor:
        return self.mlp[-1](self.features(bits, task))  # (B, 2)


def _tensors(s: syn.ParitySamples, l: int) -> tuple[Tensor, Tensor, Tensor]:
    bits = torch.from_numpy(s.bits[:, :l].astype(np.float32) * 2 - 1)  # (N, l) nearest bits, ±1
    return bits, torch.from_numpy(s.task), torch.from_numpy(s.answer.astype(np.int64))


@torch.no_grad()
def _val_loss(model: ContextMLP, val: tuple[Tensor, Tensor, Tensor]) -> float:
    model.eval()
    bits, task, ans = val
    loss = F.cross_entropy(model(bits, task), ans).item()
    model.train()
    return loss


def fit_cell(
    cfg: OptimalContextConfig, train: syn.ParitySamples, val: syn.ParitySamples, l: int, seed: int
) -> dict:
    """Train a fresh MLP on ``train`` seeing l bits; early stopping on ``val``. Returns the best val loss."""
    torch.manual_seed(seed)
    model = ContextMLP(l, cfg.n_tasks, cfg.hidden)
    opt_ = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    bits, task, ans = _tensors(train, l)
    vt = _tensors(val, l)
    gen = torch.Generator().manual_seed(seed)
    N = len(ans)
    best, best_step, since, step, t0 = math.inf, 0, 0, 0, time.perf_counter()
    best_state = None  # no validation improved on the start (a diverged cell, max_steps 0)
    perm, pos = torch.randperm(N, generator=gen), 0
    while step < cfg.max_steps and since < cfg.patience:
        if pos + cfg.batch_size > N:  # a new epoch
            perm, pos = torch.randperm(N, generator=gen), 0
        idx = perm[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        loss = F.cross_entropy(model(bits[idx], task[idx]), ans[idx])
        opt_.zero_grad(set_to_none=True)
        loss.backward()
        opt_.step()
        step += 1
        if step % cfg.eval_every == 0 or step >= cfg.max_steps:  # the last step is always validated
            v = _val_loss(model, vt)
            if v < best - 1e-5:
                best, best_step, since = v, step, 0
                best_state = {k: t.clone() for k, t in model.state_dict().items()}
            else:
                since += 1
    out = {
        "best_val_loss": best,
        "best_step": best_step,
        "steps": step,
        "epochs": step * cfg.batch_size / N,
        "hit_step_cap": since < cfg.patience,
        "seconds": time.perf_counter() - t0,
    }
    if best_state is None or not math.isfinite(best):  # nothing to measure: said by the results' notes
        out["best_val_loss"] = None
        out["best_val_loss_stderr"] = None
        return out
    model.load_state_dict(best_state)
    losses = _sample_losses(model, vt)  # the best model's loss per validation sample
    out["best_val_loss_stderr"] = float(losses.std(ddof=1) / np.sqrt(len(losses)))
    if cfg.measure_features:
        out["features"] = _feature_measures(model, vt)
    return out


@torch.no_grad()
def _sample_losses(model: ContextMLP, val: tuple[Tensor, Tensor, Tensor]) -> np.ndarray:
    model.eval()
    bits, task, ans = val
    return F.cross_entropy(model(bits, task), ans, reduction="none").double().numpy()


@torch.no_grad()
def _feature_measures(model: ContextMLP, val: tuple[Tensor, Tensor, Tensor]) -> dict:
    """Intrinsic entropy / dimension of the best model's last hidden layer on the validation set."""
    import contextlab.analysis.intrinsic as intrinsic

    model.eval()
    X = model.features(val[0], val[1]).numpy()  # (N, hidden)
    have = min(X.shape[0] - 1, X.shape[1])  # PCA's components: a --hidden 32 MLP has 32, not 50
    m, _ = intrinsic.measures(
        X,
        n_components=[n for n in (10, 20, 50) if n <= have] + [0],
        thresholds=[0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25],
        kde_dims=0,
        estimators=[],
    )
    return m


FREE = ("out_dir", "threads", "measure_features")  # may change between a sweep and its resumption
GRID = ("data_sizes", "contexts")  # the cells asked for: each cell is fitted alone, so a grid may grow


def run_optimal_context(cfg: OptimalContextConfig, progress: bool = True) -> dict:
    """Every (D, l) cell, skipping finished ones; writes OUT/results.json and returns it."""
    from contextlab.data.store_write import output_lock
    from contextlab.outputs import refuse_non_folder

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out_dir)
    refuse_non_folder(out, "--out-dir")  # a file there was blamed as "not a readable step state"
    out.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(out, "optimal-context folder"):  # two at once both fitted every cell
        return _run(cfg, out, progress)


def _run(cfg: OptimalContextConfig, out: Path, progress: bool) -> dict:
    from contextlab import bars

    tasks = syn.make_tasks(cfg.parity())
    old = _same_config(cfg, out / "results.json")
    runner = StepRunner(out / "steps.json", log=bars.write)
    val = syn.sample(cfg.parity(), tasks, cfg.val_samples, np.random.default_rng([cfg.seed, 2]))
    train: dict = {}  # D -> its samples, drawn when a cell of D first needs them (nested per D)
    cells: dict = {}
    n_cells = len(cfg.data_sizes) * len(cfg.contexts)
    bar = bars.bar(total=n_cells, desc="optimal context", unit="cell", disable=None if progress else True)
    for D in cfg.data_sizes:
        for l in cfg.contexts:
            key = f"{D}/{l}"
            step = _cell_step(cfg, D, l, lambda D=D: _train_set(cfg, tasks, train, D), val, out)
            if key in old and runner.check(step)[1] is not None:
                _adopt(runner, step, old[key])  # a cell of a sweep run before cells were steps
            _forget_unvalidated(step)
            ran = runner.run(step).ran
            cells[key] = json.loads(step.outputs[0].read_text())
            if ran:
                v = cells[key]["best_val_loss"]
                bar.set_postfix_str(f"D={D} l={l} val={'none' if v is None else f'{v:.4f}'}")
            bar.update(1)
            atomic_write_json(out / "results.json", _results(cfg, tasks, cells, val))
    bar.close()
    return json.loads((out / "results.json").read_text())


def _same_config(cfg: OptimalContextConfig, path: Path) -> dict:
    """The cells of an earlier sweep in ``path``; refuses one made with another config."""
    if not path.is_file():
        return {}
    old = json.loads(path.read_text())
    was = {k: v for k, v in old.get("config", {}).items() if k not in FREE + GRID}
    now = {k: v for k, v in asdict(cfg).items() if k not in FREE + GRID}
    if was != now:
        changed = "; ".join(
            f"{k} {was.get(k)} -> {now.get(k)}"
            for k in sorted(was.keys() | now.keys())
            if was.get(k) != now.get(k)
        )
        raise UserError(
            f"{path} holds a sweep with a different config ({changed}); use another out_dir (data_sizes "
            "and contexts may change: the cells already fitted are kept)"
        )
    return old.get("cells", {})


def _train_set(cfg: OptimalContextConfig, tasks, cache: dict, D: int) -> syn.ParitySamples:
    if D not in cache:
        cache[D] = syn.sample(cfg.parity(), tasks, D, np.random.default_rng([cfg.seed, 3, D]))
    return cache[D]


def _cell_step(cfg: OptimalContextConfig, D: int, l: int, train, val, out: Path) -> Step:
    """Cell (D, l) as a step: fit a fresh MLP, write OUT/cells/D_l.json."""
    dest = out / "cells" / f"{D}_{l}.json"
    config = {k: v for k, v in asdict(cfg).items() if k not in FREE + GRID}  # a cell is of its own D and l

    def run() -> None:
        cell = {"data_size": D, "context": l, **fit_cell(cfg, train(), val, l, cfg.seed + l)}
        atomic_write_json(dest, cell)

    return Step(f"cell {D}/{l}", {"config": config, "data_size": D, "context": l}, [dest], run)


def _adopt(runner: StepRunner, step: Step, cell: dict) -> None:
    """Record a cell found in an earlier results.json as finished (its numbers kept as they are)."""
    atomic_write_json(step.outputs[0], cell)
    runner.finish(step, step.digest(), cell.get("seconds", 0.0))


def _forget_unvalidated(step: Step) -> None:
    """Remove a finished cell whose best loss is not a number (written before the last step was always
    validated: Infinity), so it is fitted again rather than read as a cell that learned nothing."""
    f = step.outputs[0]
    try:
        v = json.loads(f.read_text()).get("best_val_loss")
    except (OSError, ValueError):
        return
    if v is not None and not math.isfinite(float(v)):
        f.unlink()


CHANCE = math.log(2)  # the loss of answering 1/2: a cell at or above it learned nothing


def _measured(row: list[dict]) -> list[dict]:
    """The cells of ``row`` with a best validation loss (a diverged cell has none)."""
    return [c for c in row if c.get("best_val_loss") is not None]


def within_noise(best: dict, row: list[dict]) -> list[int]:
    """The other contexts whose best validation loss is above the optimum's by less than 1.96 standard
    errors of the difference, taken as independent (``best_val_loss_stderr``): a wider interval than
    one paired over the validation samples all cells share, so a context it names may in truth differ;
    one it does not name does. Without the errors (cells of an earlier version): none named."""
    se = best.get("best_val_loss_stderr")
    if se is None:
        return []
    return [
        c["context"]
        for c in row
        if c is not best
        and c.get("best_val_loss_stderr") is not None
        and c["best_val_loss"] - best["best_val_loss"] <= 1.96 * math.hypot(se, c["best_val_loss_stderr"])
    ]


def optimum_words(opt_: dict) -> str:
    """The optimal l of one data size in words: '7', '7 (12 within noise)', '(7: nothing learned)'."""
    if not opt_.get("learned", True):
        return f"({opt_['context']}: nothing learned)"
    near = opt_.get("within_noise") or []
    return str(opt_["context"]) + (f" ({', '.join(map(str, near))} within noise)" if near else "")


def _results(cfg: OptimalContextConfig, tasks: syn.ParityTasks, cells: dict, val=None) -> dict:
    optimal = {}
    for D in cfg.data_sizes:
        row = [cells[f"{D}/{l}"] for l in cfg.contexts if f"{D}/{l}" in cells]
        if len(row) == len(cfg.contexts) and _measured(row):
            best = min(_measured(row), key=lambda c: c["best_val_loss"])
            margin = 2 * (best.get("best_val_loss_stderr") or 5e-4)  # below log 2 by more than its noise
            learned = best["best_val_loss"] < CHANCE - margin
            optimal[str(D)] = {
                "context": best["context"],
                "val_loss": best["best_val_loss"],
                "learned": learned,
                "within_noise": within_noise(best, _measured(row)),
            }
    n_cells = len(cfg.data_sizes) * len(cfg.contexts)
    out = {
        "format": "contextlab-optimal-context",
        "complete": len(cells) == n_cells,  # written after every cell: a killed study's file is partial
        "cells_done": f"{len(cells)} of {n_cells}",
        "config": asdict(cfg),
        "bayes_risk": {str(l): syn.bayes_risk(tasks, l) for l in cfg.contexts},
        "optimal_context": optimal,
        "feature_fits": _feature_fits(cfg, cells),
        "cells": cells,
    }
    if val is not None:  # the validation set's own Bayes loss: what its best losses are measured against
        far = tasks.far[val.task]
        out["bayes_on_validation"] = {str(l): float(CHANCE * (far > l).mean()) for l in cfg.contexts}
    if text := _notes(cfg, out):
        out["text"] = text
    return out


def _notes(cfg: OptimalContextConfig, res: dict) -> list[str]:
    """What the table cannot show: sizes where nothing was learned, bests at the first validation, and how
    close to the Bayes risk a best loss can be read."""
    notes, cells = [], res["cells"]
    lost = [c for c in cells.values() if c.get("best_val_loss") is None]
    if lost:
        where = ", ".join(f"D={c['data_size']} l={c['context']}" for c in lost[:5])
        notes.append(
            f"{len(lost)} cell(s) have no validation loss ({where}): no validation improved on the start "
            "(a loss that diverged to NaN, or max_steps 0); they are left out of the optimum; a lower lr "
            "fits them"
        )
    for D, opt_ in res["optimal_context"].items():
        row = _measured([cells[f"{D}/{l}"] for l in cfg.contexts])
        if not opt_["learned"]:
            lo, hi = min(c["best_val_loss"] for c in row), max(c["best_val_loss"] for c in row)
            notes.append(
                f"D={D}: no context's best validation loss ({lo:.3f}-{hi:.3f}) is below log 2 = "
                f"{CHANCE:.3f}, the loss of answering 1/2: the MLPs learned nothing from this many "
                f"samples, so its optimal l ({opt_['context']}) is no measurement"
            )
        first = [c for c in row if c["best_step"] and c["best_step"] <= cfg.eval_every]
        if first:
            steps = ", ".join(map(str, sorted({c["best_step"] for c in first})))
            ls = ", ".join(str(c["context"]) for c in first)
            notes.append(
                f"D={D}: the best validation loss of l = {ls} came at the first validation (step {steps}): "
                "they overfit (or stalled) from the start, so a smaller eval_every or lr could find a lower "
                "loss"
            )
    on_val = res.get("bayes_on_validation")
    below = [
        (c["data_size"], c["context"])
        for c in _measured(list(cells.values()))
        if c["best_val_loss"] < res["bayes_risk"][str(c["context"])]
    ]
    if below and on_val:
        D, l = below[0]
        notes.append(
            f"{len(below)} cell(s) (first: D={D}, l={l}) have a best validation loss below the exact Bayes "
            f"risk: the {cfg.val_samples:,} validation samples have their own Bayes loss "
            f"(bayes_on_validation; {on_val[str(l)]:.4f} at l={l} against the exact "
            f"{res['bayes_risk'][str(l)]:.4f}), "
            "and each best loss is the lowest of many validations on that same set, so slightly optimistic; "
            "read differences between cells below about twice best_val_loss_stderr as noise"
        )
    return notes


def _feature_fits(cfg: OptimalContextConfig, cells: dict) -> dict:
    """Per data size: each feature measure across the contexts fitted linearly against the best val loss."""
    import contextlab.analysis.intrinsic as intrinsic

    fits = {}
    if len(cfg.contexts) < 3:  # a line through two points has r = +-1 whatever they are
        return fits
    for D in cfg.data_sizes:
        row = [cells.get(f"{D}/{l}") for l in cfg.contexts]
        if not all(c and "features" in c and c.get("best_val_loss") is not None for c in row):
            continue
        ce = [c["best_val_loss"] for c in row]
        series = {
            f"entropy@{k}": [c["features"]["entropy"][k] for c in row] for k in row[0]["features"]["entropy"]
        }
        series |= {
            f"dimension@{k}": [float(c["features"]["dimension"][k]) for c in row]
            for k in row[0]["features"]["dimension"]
        }
        fits[str(D)] = {name: intrinsic.linear_fit(x, ce) for name, x in series.items()}
    return fits


def optimal_context_png(results: dict, path) -> Path:
    """Left: validation loss vs context per data size (and the Bayes risk); right: optimal context vs D."""
    from contextlab.figures import pyplot, save_png

    plt = pyplot()
    cfg, cells = results["config"], results["cells"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.cm.plasma(np.linspace(0, 0.85, len(cfg["data_sizes"])))
    for D, col in zip(cfg["data_sizes"], colors):
        pts = [
            (l, cells[f"{D}/{l}"]["best_val_loss"])
            for l in cfg["contexts"]
            if f"{D}/{l}" in cells and cells[f"{D}/{l}"].get("best_val_loss") is not None
        ]
        if pts:
            se = [1.96 * (cells[f"{D}/{l}"].get("best_val_loss_stderr") or 0.0) for l, _ in pts]
            a.errorbar(*zip(*pts), yerr=se, fmt="o-", color=col, ms=3, capsize=2, lw=1, label=f"D={D:,}")
            opt_ = results["optimal_context"].get(str(D))
            if opt_:
                a.plot([opt_["context"]], [opt_["val_loss"]], "*", color=col, ms=12)
    a.plot(
        cfg["contexts"],
        [results["bayes_risk"][str(l)] for l in cfg["contexts"]],
        "k--",
        lw=1,
        label="exact Bayes risk",
    )
    a.set_xlabel("visible context l (bits)")
    a.set_ylabel("best validation CE (nats)")
    a.set_title(
        "validation loss vs context, per training-set size (star = optimum; bars: 95% over the validation "
        "samples)",
        fontsize=9,
    )
    a.legend(fontsize=7)
    opt_pts = sorted((int(D), v["context"]) for D, v in results["optimal_context"].items())
    if opt_pts:
        b.plot(*zip(*opt_pts), "o-")
    b.set_xscale("log")
    b.set_xlabel("training samples D")
    b.set_ylabel("optimal context l*")
    b.set_title("optimal context vs training-set size", fontsize=9)
    return save_png(fig, path)
