"""The training loop: fixed budgets, exact resume, one code path for 1 or N processes.

``train(cfg)`` builds the model and objective from the config (or, for continued
pretraining, starts from ``init.source``: see ``init_from.py``), gets its rows from one call
to the data layer (``data/training.py``: a token store, a packed store or a weighted mixture
of packed stores, behind one resumable loader, and the fixed validation rows) and runs AdamW
with the step-indexed schedule for the run's budget (``budget.py``: steps, tokens, FLOPs or a
wall-clock pace; early stopping). Every ``ckpt_every`` steps it writes an atomic checkpoint
holding everything that determines the following steps (weights, optimizer, loader cursor,
RNG, schedule length: ``resume.py``); starting the same command again resumes from the newest
one, and the losses after it are bitwise those of an uninterrupted run (CPU, same thread count), because
nothing random is drawn outside that state. Ctrl-C or SIGTERM during the loop checkpoints the step in
flight before the command ends (``interrupt.py``), so a preempted run redoes nothing.

Logging (``metrics.py``): one console line per ``log_every`` steps (step, loss, lr, tokens/s,
MFU when the peak FLOP/s is known), a progress bar, ``metrics.jsonl`` (rank 0; every metric
the objective returns as well; lines past the resumed checkpoint are dropped so the file
always describes one consistent run; a start without a checkpoint begins a clean file), optional
TensorBoard. ``guards.py`` holds the run directory for the whole run (one writer, never a folder
that is not a run) and keeps non-finite weights out of checkpoints; ``build.py`` builds the model
and the objective from the config. Trade-off: the loop holds only the
order of a step's events; what a row, a budget or a batch is lives in those modules.
"""

from __future__ import annotations

import gc
import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from contextlab.config import dumps_toml
from contextlab.data.training import build_training_data
from contextlab.errors import UserError
from contextlab.io import atomic_write_text
from contextlab.objectives import TrainModule
from contextlab.objectives.base import training_row_seeds
from contextlab.outputs import refuse_below_file
from contextlab.rundir import save_tokenizer
from contextlab.train import checkpoint as ckpt
from contextlab.train import distributed as D
from contextlab.train import guards, moved_data, resume
from contextlab.train.budget import (
    EarlyStopping,
    StepBudget,
    batch_shape,
    budget_steps,
    check_train,
    epochs_note,
    resolve_shape,
    warmup_note,
)
from contextlab.train.build import build_model, build_objective
from contextlab.train.config import RunConfig, check_values
from contextlab.train.flops import cached_peak_flops, flops_per_token
from contextlab.train.init_from import check_source, describe, freeze_parameters, init_model, is_hf
from contextlab.train.interrupt import StopRequest
from contextlab.train.metrics import (
    MetricsWriter,
    Throughput,
    last_logged,
    progress_bar,
    step_metrics,
)
from contextlab.train.optim import lr_at, make_adamw
from contextlab.train.precision import recorded_dtype, resolve_dtype, slow_bf16_note, why_auto
from contextlab.train.validation import eval_mode, few_documents_note, mean_over_rows


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_loss: float
    val_loss: float | None
    tokens: int
    seconds: float
    best_val_loss: float | None = None
    best_step: int | None = None
    stopped_early: bool = False
    loss_name: str = "loss"  # what val_loss is: the objective's own loss (Objective.loss_name)
    val_lm_loss: float | None = None  # the next-token validation loss (None: the model cannot run so)


class Trainer:
    def __init__(self, cfg: RunConfig):
        check_values(cfg), check_train(cfg.train)  # before anything exists
        self.cfg = cfg = resolve_shape(cfg)
        t = cfg.train
        refuse_below_file(t.out_dir, "train.out_dir")
        self.info = D.init_distributed(t.device)
        D.set_determinism(self.info, t.deterministic)
        self.recorded_dtype = recorded_dtype(t.out_dir)  # what its checkpoints trained in (None: new run)
        self.dtype = resolve_dtype(t.dtype, self.info.device, self.recorded_dtype)  # "auto": fast here
        if t.threads:
            torch.set_num_threads(t.threads)
        self.stopping = EarlyStopping(t.patience, t.val_every)
        if cfg.init.source:
            check_source(cfg.init.source, t.out_dir)
        self.run_dir = Path(t.out_dir)
        self.cfg = cfg = moved_data.find_paths(cfg, self.run_dir)  # a relative path from another directory
        self.rows, self.micro, self.accum = batch_shape(t, self.info.world_size)
        data = build_training_data(
            cfg.data,
            context=t.context,
            rows=self.rows,
            seed=t.seed,
            val_tokens=t.val_tokens,
            rank=self.info.rank,
            world=self.info.world_size,
        )
        self.loader, self.val_rows, self.store = data.loader, data.val_rows, data.store
        self.val_documents, self.val_rows_total = data.val_documents, data.val_rows_total
        self.more_validation, self.data_notes = data.more_validation, data.notes
        self.data_record = moved_data.record(cfg.data, self.store)  # saved in every checkpoint
        self.data_record["validation_rows"] = data.val_rows_hash  # runs scored on the same rows share it
        self._build_model()
        self._build_optimizer()
        self._next = None  # (loader state before it, tokens, doc ids): the batch fetched ahead, on the device
        self.state = {"step": 0, "tokens": 0, "flops": 0.0, "elapsed": 0.0, "total_steps": None}
        self.state["schedule_changes"] = []  # [step, old length, new length] of each budget change on resume
        dtype = torch.bfloat16 if self.dtype == "bf16" else torch.float32
        self.peak = t.peak_flops or cached_peak_flops(dtype, self.info.device.type)  # 0 = unknown
        self.total_steps()  # exactly one budget: refused before the run directory exists

    # ------------------------------------------------------------------ setup
    def _build_model(self) -> None:
        """The objective, the model (fresh, or init.source for continued pretraining) and their FLOPs."""
        cfg, t = self.cfg, self.cfg.train
        torch.manual_seed(t.seed)
        self.objective = build_objective(cfg)
        self.objective.bind_tokenizer(self.store.tokenizer_spec)
        self.init = init_model(cfg, self.objective, self.store) if cfg.init.source else None
        if self.init:
            model = self.init.model
        else:
            model = build_model(
                cfg, self.objective.vocab_size, self.objective.arch, self.objective.arch_options()
            )
        self.model = model.to(self.info.device)
        if cfg.init.freeze:
            frozen = freeze_parameters(self.model, cfg.init.freeze)
            if self.info.is_main:
                print(f"frozen: {frozen:,} parameters ({', '.join(cfg.init.freeze)})")
        self.module = TrainModule(self.model, self.objective).to(self.info.device)
        if is_hf(self.model):  # objectives that train a HF model add no compute of their own
            self.flops_per_token = self.model.flops_per_token(t.context)
        else:
            self.flops_per_token = flops_per_token(
                self.model.config, t.context
            ) + self.objective.extra_flops_per_token(self.model.config, t.context)
        if self.info.rank:  # the weights above are alike on every process; dropout draws are its own
            torch.manual_seed(D.rank_seed(t.seed, self.info.rank))

    def _build_optimizer(self) -> None:
        """Parallelism (DDP / FSDP), AdamW and the (compiled) forward."""
        t, o = self.cfg.train, self.cfg.optim
        masked = self.cfg.data.doc_mask or self.objective.prefix_masks
        if t.compile and masked and self.info.device.type == "cuda":
            raise UserError(
                "train.compile with document or prefix masks on a GPU trains wrong gradients with "
                "FlexAttention inside a compiled model (measured with torch 2.11: the losses fall "
                "far slower than eager); set train.compile=false (FlexAttention itself stays compiled)"
            )
        self.wrapped = D.apply_parallelism(self.module, self.info, t.parallel)
        self.opt = make_adamw(
            self.wrapped, lr=o.lr, weight_decay=o.weight_decay, betas=(o.beta1, o.beta2), eps=o.eps
        )
        self.forward = torch.compile(self.wrapped) if t.compile else self.wrapped

    def total_steps(self) -> int:
        """The step budget (0 for a wall-clock budget, fixed while training)."""
        return budget_steps(self.cfg.train, self.flops_per_token)

    # ------------------------------------------------------------------ checkpoints
    def _begin(self) -> None:
        """Make the run directory, resume from its newest checkpoint, write the resolved config."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        resume.resume(self)
        if self.info.is_main:
            t = self.cfg.train
            atomic_write_text(self.run_dir / "config.toml", dumps_toml(self.cfg))
            save_tokenizer(self.run_dir, self.store.path / "tokenizer", self.store.tokenizer_spec)
            print(
                describe(self.model) + f"; {self.objective.name}; {self.rows} rows x {t.context} tokens/step"
                f" on {self.info.world_size} process(es){self._strategy()}, {self.info.device.type}, "
                f"{self.dtype}"
                + (
                    f" ({why_auto(self.dtype, self.info.device, self.recorded_dtype)})"
                    if t.dtype == "auto"
                    else ""
                )
            )
            if note := slow_bf16_note(self.dtype, t.dtype, self.info.device):
                print(note)
            fix = self.more_validation
            if note := few_documents_note(self.val_documents, self.val_rows_total, t.context, fix):
                print(note)
            for note in self.data_notes:
                print(note)

    def _save(self) -> None:
        bad = guards.count_non_finite(self.wrapped, self.info)  # never save weights a resume cannot use
        if bad:
            raise guards.non_finite_weights(self.run_dir, self.state["step"], bad)
        model_state, optim_state = D.full_state_dicts(self.wrapped, self.opt)
        rng_ranks = D.gather_rng_states(self.info)  # every process's, so each resumes its own
        if self.info.is_main:
            state = resume.saved_state(self)
            ckpt.save_checkpoint(
                self.run_dir,
                self.state["step"],
                model_state=model_state,
                optim_state=optim_state,
                state=state,
                config_toml=dumps_toml(self.cfg),
                rng_ranks=rng_ranks,
                keep_last=self.cfg.train.keep_last,
                pinned=self.stopping.pinned(),
            )
        D.barrier(self.info)

    # ------------------------------------------------------------------ steps
    def _strategy(self) -> str:
        """How several processes share the model, for the start line ("" for one process)."""
        return f" ({self.cfg.train.parallel})" if self.info.world_size > 1 else ""

    def _autocast(self):
        if self.dtype != "bf16":
            return nullcontext()
        return torch.autocast(self.info.device.type, dtype=torch.bfloat16)

    def _fetch(self, step: int) -> tuple[dict, torch.Tensor, torch.Tensor, list[int]]:
        """The batch of ``step`` (0-based) on the device, with the loader state before it and each row's
        seed for the objective's draws (made on the host, so they cost no device sync). On CUDA the copy
        is asynchronous from pinned memory, so it overlaps the step the GPU is still computing."""
        before = self.loader.state_dict()
        batch = self.loader.next_batch()
        top = int(batch.tokens.max()) if batch.tokens.size else 0
        vocab = self.store.tokenizer_spec["vocab_size"]
        if top >= vocab:  # data.verify = false read a damaged store: an id no token has
            raise UserError(
                f"step {step + 1} reads token id {top} from {self.store.path}, outside its tokenizer's "
                f"vocabulary of {vocab}: the store is damaged (data.verify = false skipped the check that "
                "says so); ingest it again"
            )
        seeds = training_row_seeds(batch.tokens, self.cfg.train.seed, step)
        tokens, doc_ids = torch.from_numpy(batch.tokens), torch.from_numpy(batch.doc_ids)
        if self.info.device.type == "cuda":
            tokens, doc_ids = tokens.pin_memory(), doc_ids.pin_memory()
        dev = self.info.device
        return before, tokens.to(dev, non_blocking=True), doc_ids.to(dev, non_blocking=True), seeds

    def train_step(self) -> dict[str, float]:
        """One optimizer step: {"loss": its mean loss, and every metric the objective returned}. The only
        host-device sync is reading them, after the next batch has been fetched and queued (and, for an
        objective that counts its scored tokens, reading that count before the optimizer step, also after
        the next batch is queued: ``_to_token_mean``)."""
        step = self.state["step"]
        _, tokens, doc_ids, seeds = self._next if self._next is not None else self._fetch(step)
        losses, metrics = [], []
        for i in range(self.accum):
            sl = slice(i * self.micro, (i + 1) * self.micro)
            sync = i == self.accum - 1 or not hasattr(self.wrapped, "no_sync")
            self.objective.draw_seeds = seeds[sl]  # the rows' own draws (masks, spans, FIM splits)
            with nullcontext() if sync else self.wrapped.no_sync(), self._autocast():
                loss, extra = self.forward(tokens[sl], doc_ids[sl])
            n = extra.get("loss_tokens")  # the scored tokens, where they vary from row to row
            (loss / self.accum if n is None else loss * n).backward()
            losses.append(loss.detach())
            metrics.append(extra)
        self.objective.draw_seeds = None
        self._next = self._fetch(step + 1)  # queued while the device finishes the backward
        if "loss_tokens" in metrics[0]:
            self._to_token_mean(metrics)
        if self.cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.wrapped.parameters(), self.cfg.optim.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return step_metrics(losses, metrics, lambda v: D.all_reduce_sum(v, self.info), self.info.world_size)

    @torch.no_grad()
    def _to_token_mean(self, metrics: list[dict]) -> None:
        """Scale the gradients of micro-batch losses weighted by their scored tokens to the gradient of the
        mean over every scored token of the step, on every process: the gradient one forward of all the
        step's rows gives, for any micro-batch size or number of processes (a mean of micro-batch means
        weighs a row by how few targets the rows beside it have: prefix LM, span corruption, UL2)."""
        local = float(torch.stack([torch.as_tensor(m["loss_tokens"]) for m in metrics]).sum())
        total = D.all_reduce_sum([local], self.info)[0]
        scale = self.info.world_size / max(total, 1.0)  # DDP and FSDP average the gradients of the processes
        for p in self.wrapped.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)

    @torch.no_grad()
    def validate(self) -> float:
        """The objective's own loss over the fixed validation rows (eager: a compiled forward would
        recompile for eval)."""
        with eval_mode(self.wrapped), self._autocast():
            return mean_over_rows(self.val_rows, self.micro, self.info, lambda rows: self.wrapped(rows, None))

    @torch.no_grad()
    def validate_lm(self, val_loss: float) -> float | None:
        """The validation rows' left-to-right loss: the one loss every objective that can run left to
        right shares (``val_loss`` itself for clm and contextlm); None when this objective cannot."""
        obj = self.objective
        if obj.lm_prefix is None or obj.loss_is_lm:
            return None if obj.lm_prefix is None else val_loss
        with eval_mode(self.model), self._autocast():
            return mean_over_rows(
                self.val_rows, self.micro, self.info, lambda rows: obj.lm_loss(self.model, rows)
            )

    # ------------------------------------------------------------------ loop
    def run(self) -> TrainResult:
        t = self.cfg.train
        self._begin()
        budget = StepBudget(
            self.total_steps() or self.state["total_steps"],
            t.max_minutes,
            self.state["elapsed"],
            agree=self._agree,
        )  # wall-clock runs keep the length they fixed
        metrics = MetricsWriter(self.run_dir, self.info.is_main, t.tensorboard)
        bar = progress_bar(t.progress and self.info.is_main, budget.total, self.state["step"])
        say = bar.write if self.info.is_main else (lambda _: None)
        speed = Throughput(self.flops_per_token, self.peak * self.info.world_size, say)
        loss, val, lm = last_logged(self.run_dir) if self.state["step"] else (math.nan, None, None)  # resumed
        noted = False  # the warm-up checked against the run's length, once that is known
        with StopRequest(self.info) as interrupt:
            while not self.stopping.stop:
                bar.total = budget.total_at(self.state["step"])
                if budget.done(self.state["step"]):
                    break
                if budget.total and not noted:
                    noted = True
                    if note := warmup_note(self.cfg.optim.warmup_steps, budget.total, self.cfg.optim.lr):
                        say(note)
                    if note := epochs_note(budget.total, self.rows, self.loader.n_rows, t.context):
                        say(note)
                row = self._step(budget)
                step, loss, last = row["step"], row["loss"], budget.done(row["step"])
                speed.add(t.tokens_per_step)
                bar.update(1)
                logged = step % t.log_every == 0 or last
                if logged:
                    D.synchronize(self.info)  # queued GPU work belongs to this window
                    row.update(speed.read(), elapsed=self.state["elapsed"])
                if (t.val_every and step % t.val_every == 0) or last:
                    row.update(self._validation(step))
                    val, lm = row["val_loss"], row.get("val_lm_loss")
                if logged or "val_loss" in row:
                    metrics.write(row, bar)
                saved = (t.ckpt_every and step % t.ckpt_every == 0) or last or self.stopping.keep(step)
                if saved:
                    self._save()
                if interrupt.agreed():  # Ctrl-C or SIGTERM by now (during that write too): keep this step
                    if not saved:
                        self._save()
                    bar.close()
                    metrics.close()
                    interrupt.end()
        bar.close()
        metrics.close()
        return self._result(loss, val, lm)

    def _step(self, budget: StepBudget) -> dict:
        """One step at the scheduled learning rate; advances the state and returns the step's row."""
        step, total, o = self.state["step"], budget.total, self.cfg.optim
        schedule = dict(lr=o.lr, warmup_steps=o.warmup_steps, min_lr_ratio=o.min_lr_ratio)
        lr = lr_at(step, total_steps=total or 10**9, **schedule)
        for g in self.opt.param_groups:
            g["lr"] = lr
        out = self.train_step()
        if not math.isfinite(out["loss"]):
            raise guards.diverged(self.run_dir, out["loss"], step + 1, self.dtype)
        n = self.cfg.train.tokens_per_step
        self.state["step"] = step + 1
        self.state["tokens"] += n
        self.state["flops"] += self.flops_per_token * n
        self.state["elapsed"] = budget.elapsed()
        self.state["total_steps"] = total or None
        row = dict(
            step=step + 1, loss=out["loss"], lr=self.opt.param_groups[0]["lr"], tokens=self.state["tokens"]
        )
        row.update((k, v) for k, v in out.items() if k not in row)  # the objective's own metrics
        return row

    def _validation(self, step: int) -> dict:
        """Validate, track the best loss for early stopping; the row's validation fields."""
        val, s = self.validate(), self.stopping
        if not math.isfinite(val):  # a NaN is not JSON: never in metrics.jsonl or state.json
            raise guards.diverged(self.run_dir, val, step, self.dtype, "validation loss")
        lm = self.validate_lm(val)
        if lm is not None and not math.isfinite(lm):
            raise guards.diverged(self.run_dir, lm, step, self.dtype, "left-to-right validation loss")
        s.update(val, step)
        row = {"val_loss": val, "best_val_loss": s.best_val_loss, "best_step": s.best_step}
        return row if lm is None else {**row, "val_lm_loss": lm}

    def _agree(self, total: int) -> int:
        """The mean of every process's ``total``: one step count for all."""
        return round(D.all_reduce_sum([float(total)], self.info)[0] / self.info.world_size)

    def _result(self, loss: float, val: float | None, lm: float | None) -> TrainResult:
        s, st = self.stopping, self.state
        if s.stop and self.info.is_main:
            print(s.message(st["step"], ckpt.step_dir(self.run_dir, s.best_step)))
        return TrainResult(
            self.run_dir,
            st["step"],
            loss,
            val,
            st["tokens"],
            st["elapsed"],
            s.best_val_loss,
            s.best_step,
            s.stop,
            self.objective.loss_name or f"{self.objective.name} loss",
            lm,
        )


def train(cfg: RunConfig) -> TrainResult:
    """Train (or resume) the run described by ``cfg``."""
    trainer = Trainer(cfg)
    finished = None
    try:
        with guards.guard_run(trainer.run_dir, trainer.info):  # one writer; a full disk is one line
            result = trainer.run()
        finished = trainer.info
        return result
    finally:
        trainer = None  # the model and optimizer (FSDP's DTensors hold the process group) go first
        gc.collect()
        D.shutdown(finished)
