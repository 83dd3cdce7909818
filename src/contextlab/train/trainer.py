"""The training loop: fixed budgets, exact resume, one code path for 1 or N processes.

``train(cfg)`` builds the model and objective from the config (or, for continued
pretraining, starts from ``init.source``: see ``init_from.py``), reads rows from a token
store, a packed store or a weighted mixture of packed stores through the resumable loader,
and runs AdamW with the step-indexed schedule. Every
``ckpt_every`` steps it writes an atomic checkpoint holding everything that determines the
following steps (weights, optimizer, loader cursor, RNG, schedule length); starting the
same command again resumes from the newest one, and the losses after it are bitwise those
of an uninterrupted run (CPU, same thread count), because nothing random is drawn outside
that state.

Logging (``metrics.py``): one console line per ``log_every`` steps (step, loss, lr, tokens/s,
MFU), a progress bar, ``metrics.jsonl`` (rank 0; lines past the resumed checkpoint are dropped so
the file always describes one consistent run), optional TensorBoard.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from contextlab import __version__
from contextlab.config import dumps_toml, from_dict, to_dict
from contextlab.data.loader import TokenLoader, packed_split
from contextlab.data.mixture import MixtureLoader, exact_shares
from contextlab.data.packing.packed_store import PackedStore
from contextlab.data.store import TokenStore
from contextlab.data.views import DocView, all_documents, first_tokens, split_documents, split_tail
from contextlab.errors import UserError
from contextlab.models.gpt import GPT, size_config
from contextlab.objectives import OBJECTIVES, TrainModule
from contextlab.rundir import save_tokenizer
from contextlab.train import checkpoint as ckpt
from contextlab.train import distributed as D
from contextlab.train.config import RunConfig, config_hash
from contextlab.train.flops import flops_per_token, measured_peak_flops, mfu
from contextlab.train.init_from import describe, freeze_parameters, init_model, is_hf
from contextlab.train.metrics import MetricsWriter, progress_bar, read_metrics, summarize
from contextlab.train.optim import lr_at, make_adamw


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


def build_model(cfg: RunConfig, vocab_size: int, arch: str = "gpt", arch_options: dict | None = None) -> GPT:
    """The run's GPT shape, as architecture ``arch`` (see contextlab.models.archs) with its options."""
    from contextlab.models.archs import build_arch

    m = cfg.model
    overrides = {k: v for k, v in (("n_layer", m.n_layer), ("n_head", m.n_head), ("n_embd", m.n_embd)) if v}
    try:
        mcfg = size_config(
            m.size,
            vocab_size,
            cfg.train.seq_len,
            mlp=m.mlp,
            rope_base=m.rope_base,
            dropout=m.dropout,
            **overrides,
        )
    except (KeyError, ValueError) as exc:
        raise UserError(f"model config: {exc}") from None
    return build_arch(arch, mcfg, **(arch_options or {}))


def build_objective(cfg: RunConfig):
    name = cfg.objective.name
    if name not in OBJECTIVES:
        raise UserError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}")
    cls = OBJECTIVES[name]
    options = from_dict(cls.Options, dict(cfg.objective.options))
    return cls(options, doc_mask=cfg.data.doc_mask)


WALL_CLOCK_PROBE = 10  # a wall-clock budget fixes its number of steps at this step


class Trainer:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        t = cfg.train
        self.info = D.init_distributed(t.device)
        D.set_determinism(self.info, t.deterministic)
        if t.threads:
            torch.set_num_threads(t.threads)
        if t.dtype not in ("bf16", "fp32"):
            raise UserError(f"train.dtype must be bf16 or fp32, got {t.dtype!r}")
        if not cfg.data.store and not cfg.data.packed and not cfg.data.mixture:
            raise UserError(
                "no training data: set data.store (e.g. --set data.store=STORE), data.packed or data.mixture"
            )
        self.run_dir = Path(t.out_dir)
        self.packed = PackedStore(cfg.data.packed) if cfg.data.packed else None
        self.sources = self._mixture_sources()  # the packed stores of data.mixture, or []
        first = self.packed if self.packed is not None else (self.sources[0] if self.sources else None)
        self.store = first.store if first is not None else TokenStore(cfg.data.store)
        if first is not None and cfg.data.store and TokenStore(cfg.data.store).hash != self.store.hash:
            raise UserError(
                f"{first.path} was packed from {self.store.path}, not from data.store "
                f"{cfg.data.store}; leave data.store empty or pack {cfg.data.store}"
            )
        tok = self.store.tokenizer_spec
        self.rows = max(1, t.tokens_per_step // t.seq_len)
        if self.rows * t.seq_len != t.tokens_per_step:
            raise UserError(
                f"train.tokens_per_step ({t.tokens_per_step}) must be a multiple of train.seq_len "
                f"({t.seq_len}) so every step sees the same number of tokens"
            )
        self.micro = t.micro_batch_rows or self.rows // self.info.world_size
        per_rank = self.rows // max(1, self.info.world_size)
        if self.rows % self.info.world_size or per_rank % self.micro:
            raise UserError(
                f"rows per step ({self.rows}) must split evenly over {self.info.world_size} processes "
                f"and micro-batches of {self.micro} rows"
            )
        self.accum = per_rank // self.micro

        torch.manual_seed(t.seed)
        self.objective = build_objective(cfg)
        self.objective.bind_tokenizer(tok)
        self.init = (
            init_model(cfg, self.objective, self.store) if cfg.init.source else None
        )  # continued pretraining
        model = (
            self.init.model
            if self.init
            else build_model(
                cfg, self.objective.vocab_size, self.objective.arch, self.objective.arch_options()
            )
        )
        self.model = model.to(self.info.device)
        if cfg.init.freeze:
            frozen = freeze_parameters(self.model, cfg.init.freeze)
            if self.info.is_main:
                print(f"frozen: {frozen:,} parameters ({', '.join(cfg.init.freeze)})")
        self.module = TrainModule(self.model, self.objective).to(self.info.device)
        if is_hf(self.model):  # objectives that train a HF model add no compute of their own
            self.flops_per_token = self.model.flops_per_token(t.seq_len)
        else:
            self.flops_per_token = flops_per_token(
                self.model.config, t.seq_len
            ) + self.objective.extra_flops_per_token(self.model.config, t.seq_len)
        masked = cfg.data.doc_mask or self.objective.prefix_masks
        if t.compile and masked and self.info.device.type == "cuda":
            raise UserError(
                "train.compile with document or prefix masks on a GPU trains wrong gradients with "
                "FlexAttention inside a compiled model (measured with torch 2.11: the losses fall "
                "far slower than eager); set train.compile=false (FlexAttention itself stays compiled)"
            )
        self.wrapped = D.apply_parallelism(self.module, self.info, t.parallel)
        o = cfg.optim
        self.opt = make_adamw(
            self.wrapped, lr=o.lr, weight_decay=o.weight_decay, betas=(o.beta1, o.beta2), eps=o.eps
        )
        self.forward = torch.compile(self.wrapped) if t.compile else self.wrapped

        train_view, val_view = self._views()
        eot = tok.get("eot_id")
        if self.sources:
            subs = [
                TokenLoader(
                    p,
                    t.seq_len,
                    1,
                    mode="packed_store",
                    seed=t.seed + i,
                    sequences=None if train_view is None else train_view[i],
                )
                for i, p in enumerate(self.sources)
            ]
            self.loader = MixtureLoader(
                subs,
                [m.weight for m in cfg.data.mixture],
                self.rows,
                rank=self.info.rank,
                world_size=self.info.world_size,
            )
        elif self.packed is not None:
            self.loader = TokenLoader(
                self.packed,
                t.seq_len,
                self.rows,
                mode="packed_store",
                seed=t.seed,
                rank=self.info.rank,
                world_size=self.info.world_size,
                sequences=train_view,
            )
        else:
            self.loader = TokenLoader(
                train_view,
                t.seq_len,
                self.rows,
                mode=cfg.data.mode,
                separator=eot,
                seed=t.seed,
                rank=self.info.rank,
                world_size=self.info.world_size,
            )
        self.val_rows = self._val_rows(val_view, eot)
        self._next = None  # (loader state before it, tokens, doc ids): the batch fetched ahead, on the device
        self.state = {
            "step": 0,
            "tokens": 0,
            "flops": 0.0,
            "elapsed": 0.0,
            "total_steps": None,
            "best_val_loss": None,
            "best_step": None,
            "since_best": 0,
        }
        self.peak = t.peak_flops or measured_peak_flops(
            torch.bfloat16 if t.dtype == "bf16" else torch.float32, self.info.device.type
        )

    # ------------------------------------------------------------------ setup
    def _mixture_sources(self) -> list[PackedStore]:
        d = self.cfg.data
        if not d.mixture:
            return []
        if d.packed:
            raise UserError("set data.packed or data.mixture, not both (add data.packed to the mixture)")
        if any(not m.packed for m in d.mixture):
            raise UserError("every data.mixture entry needs packed = a packed store")
        sources = [PackedStore(m.packed) for m in d.mixture]
        for p in sources[1:]:
            if p.store.tokenizer_hash != sources[0].store.tokenizer_hash:
                raise UserError(
                    f"the data.mixture stores {sources[0].path} and {p.path} use different tokenizers; "
                    "ingest all sources with the same --tokenizer"
                )
        return sources

    def _views(self):
        """(train, validation) sources, the training side cut to data.train_tokens when that is set."""
        train, val = self._split_views()
        n = self.cfg.data.train_tokens
        if n:
            if not isinstance(train, DocView):
                raise UserError(
                    "data.train_tokens works on a token store (data.store), not on packed stores; "
                    "train from data.store or pack a smaller store"
                )
            train = first_tokens(train, n, self.cfg.data.split_seed)
        return train, val

    def _split_views(self):
        """(train, validation) sources: document views, or for a packed store its train sequence ids."""
        d = self.cfg.data
        if d.val_store:
            val_store = TokenStore(d.val_store)
            val_store.check_tokenizer(self.store.tokenizer_spec, f"the training store {self.store.path}")
            train = None if (self.packed is not None or self.sources) else all_documents(self.store)
            return train, all_documents(val_store)
        if self.sources:  # every source holds out its own share of sequences
            splits = [packed_split(p, d.val_fraction, d.split_seed) for p in self.sources]
            return [tr for tr, _ in splits], [va for _, va in splits]
        if self.packed is not None:
            train, val = packed_split(self.packed, d.val_fraction, d.split_seed)
            return train, val
        if d.val_split == "tail":
            return split_tail(self.store, d.val_fraction)
        if d.val_split != "documents":
            raise UserError(f"data.val_split must be documents or tail, got {d.val_split!r}")
        if self.store.n_docs < 2:
            raise UserError(
                f"{self.store.path} has {self.store.n_docs} document(s): set data.val_split=tail to hold "
                f"out the end of each document, or data.val_store"
            )
        return split_documents(self.store, d.val_fraction, d.split_seed)

    def _val_rows(self, view, eot) -> np.ndarray:
        t = self.cfg.train
        n = max(1, math.ceil(t.val_tokens / t.seq_len))
        try:
            if isinstance(view, list):  # held-out sequences of each mixture source, in the mixture's shares
                rows = []
                for p, ids, k in zip(
                    self.sources, view, exact_shares(n, [m.weight for m in self.cfg.data.mixture])
                ):
                    vl = TokenLoader(
                        p, t.seq_len, 1, mode="packed_store", sequences=ids, seed=self.cfg.data.split_seed
                    )
                    rows += [vl.row(r) for r in range(min(int(k), vl.n_rows))]
                return np.stack(rows)[self.info.rank :: self.info.world_size]
            if isinstance(view, np.ndarray):  # held-out sequences of the packed store
                vl = TokenLoader(
                    self.packed,
                    t.seq_len,
                    1,
                    mode="packed_store",
                    sequences=view,
                    seed=self.cfg.data.split_seed,
                )
            else:
                vl = TokenLoader(
                    view, t.seq_len, 1, mode=self.cfg.data.mode, separator=eot, seed=self.cfg.data.split_seed
                )
        except UserError:
            raise UserError(
                f"the validation documents are too few or too short for seq_len {t.seq_len}; "
                f"raise data.val_fraction or use data.val_store"
            ) from None
        rows = np.stack([vl.row(r) for r in range(min(n, vl.n_rows))])
        return rows[self.info.rank :: self.info.world_size]

    def total_steps(self) -> int:
        t = self.cfg.train
        budgets = [b for b in (t.max_steps, t.max_tokens, t.max_flops, t.max_minutes) if b]
        if len(budgets) != 1:
            raise UserError(
                "set exactly one budget: train.max_steps, train.max_tokens, train.max_flops or "
                "train.max_minutes"
            )
        if t.max_steps:
            return int(t.max_steps)
        if t.max_tokens:
            return max(1, int(t.max_tokens // t.tokens_per_step))
        if t.max_flops:
            return max(1, int(t.max_flops // (self.flops_per_token * t.tokens_per_step)))
        return 0  # wall-clock: fixed after timing the first steps

    # ------------------------------------------------------------------ resume
    def _resume(self) -> None:
        latest = ckpt.latest_checkpoint(self.run_dir)
        if latest is None:
            return
        model_state, optim_state, rng, state = ckpt.load_checkpoint(latest)
        if state.get("config_hash") != config_hash(self.cfg):
            raise UserError(
                f"{self.run_dir} holds a run with a different config; use another train.out_dir "
                f"or the same config to resume"
            )
        if state.get("tokenizer_hash") != self.store.tokenizer_hash:
            raise UserError(
                f"{self.run_dir} was trained with a different tokenizer than {self.store.path}; "
                f"use the same data store to resume"
            )
        D.load_full_state_dicts(self.wrapped, self.opt, model_state, optim_state)
        self.loader.load_state_dict(state["loader"])
        self._next = None
        ckpt.restore_rng(rng)
        self.state = {k: state[k] for k in ("step", "tokens", "flops", "elapsed", "total_steps")}
        self.state.update(
            best_val_loss=state.get("best_val_loss"),
            best_step=state.get("best_step"),
            since_best=state.get("since_best", 0),
        )
        if self.info.is_main:
            print(f"resuming {self.run_dir} from {latest.name}")
            self._truncate_metrics(state["step"])

    def _truncate_metrics(self, step: int) -> None:
        f = self.run_dir / "metrics.jsonl"
        if not f.exists():
            return
        keep = [
            line for line in f.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step
        ]
        f.write_text("".join(line + "\n" for line in keep))

    def _save(self) -> None:
        model_state, optim_state = D.full_state_dicts(self.wrapped, self.opt)
        if self.info.is_main:
            loader = (
                self._next[0] if self._next is not None else self.loader.state_dict()
            )  # not the batch ahead
            state = {
                **self.state,
                "loader": loader,
                "config_hash": config_hash(self.cfg),
                "tokenizer_hash": self.store.tokenizer_hash,
                "tokenizer": self.store.tokenizer_spec,
                "model_config": _model_config(self.model),
                "objective": self.cfg.objective.name,
                "arch": "hf" if is_hf(self.model) else self.objective.arch,
                "init": self.init.meta if self.init else None,
                "world_size": self.info.world_size,
                "code_version": __version__,
            }
            best = self.state["best_step"] if self.cfg.train.patience and self.state["best_step"] else None
            ckpt.save_checkpoint(
                self.run_dir,
                self.state["step"],
                model_state=model_state,
                optim_state=optim_state,
                state=state,
                config_toml=dumps_toml(self.cfg),
                keep_last=self.cfg.train.keep_last,
                pinned=(best,) if best else (),
            )
        D.barrier(self.info)

    # ------------------------------------------------------------------ steps
    def _autocast(self):
        if self.cfg.train.dtype != "bf16":
            return nullcontext()
        return torch.autocast(self.info.device.type, dtype=torch.bfloat16)

    def _fetch(self) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """The next batch on the device, with the loader state before it. On CUDA the copy is asynchronous
        from pinned memory, so it overlaps the step the GPU is still computing."""
        before = self.loader.state_dict()
        batch = self.loader.next_batch()
        tokens, doc_ids = torch.from_numpy(batch.tokens), torch.from_numpy(batch.doc_ids)
        if self.info.device.type == "cuda":
            tokens, doc_ids = tokens.pin_memory(), doc_ids.pin_memory()
        dev = self.info.device
        return before, tokens.to(dev, non_blocking=True), doc_ids.to(dev, non_blocking=True)

    def train_step(self) -> float:
        """One optimizer step; returns its mean loss. The only host-device sync is reading that loss,
        after the next batch has been fetched and queued."""
        _, tokens, doc_ids = self._next if self._next is not None else self._fetch()
        losses = []
        for i in range(self.accum):
            sl = slice(i * self.micro, (i + 1) * self.micro)
            sync = i == self.accum - 1 or not hasattr(self.wrapped, "no_sync")
            with nullcontext() if sync else self.wrapped.no_sync(), self._autocast():
                loss, _ = self.forward(tokens[sl], doc_ids[sl])
            (loss / self.accum).backward()
            losses.append(loss.detach())
        if self.cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.wrapped.parameters(), self.cfg.optim.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self._next = self._fetch()
        total = float(torch.stack(losses).double().div(self.accum).sum())
        return D.all_reduce_sum([total], self.info)[0] / self.info.world_size

    @torch.no_grad()
    def validate(self) -> float:
        self.wrapped.eval()
        loss_sum, count = 0.0, 0
        for i in range(0, len(self.val_rows), max(1, self.micro)):
            rows = torch.from_numpy(self.val_rows[i : i + self.micro]).to(self.info.device)
            with self._autocast():
                loss, _ = self.wrapped(rows, None)  # eager: a compiled forward would recompile for eval
            loss_sum += float(loss) * len(rows)
            count += len(rows)
        self.wrapped.train()
        loss_sum, count = D.all_reduce_sum([loss_sum, float(count)], self.info)
        return loss_sum / max(count, 1)

    # ------------------------------------------------------------------ loop
    def run(self) -> TrainResult:
        t = self.cfg.train
        if t.patience and not t.val_every:
            raise UserError("train.patience needs validations to watch: set train.val_every (e.g. 100)")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._resume()
        if self.info.is_main:
            (self.run_dir / "config.toml").write_text(dumps_toml(self.cfg), encoding="utf-8")
            save_tokenizer(self.run_dir, self.store.path / "tokenizer", self.store.tokenizer_spec)
            print(
                describe(self.model) + f"; {self.objective.name}; {self.rows} rows x {t.seq_len} tokens/step"
                f" on {self.info.world_size} process(es), {self.info.device.type}, {t.dtype}"
            )
        total = self.total_steps() or self.state["total_steps"]  # wall-clock runs keep their fixed length
        metrics = MetricsWriter(self.run_dir, self.info.is_main, t.tensorboard)
        bar = progress_bar(t.progress and self.info.is_main, total or None, self.state["step"])
        loss, val = self._last_logged()  # what a resumed run that has nothing left to do reports
        window_t, window_tokens = time.perf_counter(), 0
        start = time.perf_counter() - self.state["elapsed"]
        pace = None  # (time, step) where a wall-clock run starts timing its pace
        stop = t.patience and self.state["since_best"] >= t.patience  # a resumed run that had already stopped
        while not stop:
            step = self.state["step"]
            if total and step >= total:
                break
            if not total and pace is None and step >= 2:
                pace = (time.perf_counter(), step)
            if not total and pace is not None and step >= max(WALL_CLOCK_PROBE, pace[1] + 4):
                # wall-clock budget: steps 3..10 set the pace (the first ones carry warm-up and
                # torch.compile), the minutes left fix the schedule; every process agrees on it
                per_step = (time.perf_counter() - pace[0]) / (step - pace[1])
                left = t.max_minutes * 60 - (time.perf_counter() - start)
                total = step + 1 + max(0, int(left / per_step))
                total = round(D.all_reduce_sum([float(total)], self.info)[0] / self.info.world_size)
                bar.total = total
            for g in self.opt.param_groups:
                g["lr"] = lr_at(
                    step,
                    lr=self.cfg.optim.lr,
                    warmup_steps=self.cfg.optim.warmup_steps,
                    total_steps=total or 10**9,
                    min_lr_ratio=self.cfg.optim.min_lr_ratio,
                )
            loss = self.train_step()
            if not math.isfinite(loss):
                raise UserError(
                    f"the loss became {loss} at step {step + 1}; lower optim.lr or use train.dtype=fp32"
                )
            self.state["step"] = step = step + 1
            self.state["tokens"] += t.tokens_per_step
            self.state["flops"] += self.flops_per_token * t.tokens_per_step
            self.state["elapsed"] = time.perf_counter() - start
            self.state["total_steps"] = total or None
            window_tokens += t.tokens_per_step
            bar.update(1)
            last = bool(total) and step >= total
            row = {
                "step": step,
                "loss": loss,
                "lr": self.opt.param_groups[0]["lr"],
                "tokens": self.state["tokens"],
            }
            if step % t.log_every == 0 or last:
                D.synchronize(self.info)  # queued GPU work belongs to this window
                dt = time.perf_counter() - window_t
                tps = window_tokens / max(dt, 1e-9)
                row.update(
                    tokens_per_s=tps,
                    mfu=mfu(tps, self.flops_per_token, self.peak),
                    elapsed=self.state["elapsed"],
                )
                window_t, window_tokens = time.perf_counter(), 0
            if (t.val_every and step % t.val_every == 0) or last:
                val = self.validate()
                row["val_loss"] = val
                stop = self._track_best(val, step)
                row["best_val_loss"], row["best_step"] = self.state["best_val_loss"], self.state["best_step"]
            improved = (
                bool(t.patience) and self.state["best_step"] == step
            )  # early stopping keeps the best weights
            if len(row) > 4:
                metrics.write(row, bar)
            if (t.ckpt_every and step % t.ckpt_every == 0) or last or stop or improved:
                self._save()
        bar.close()
        metrics.close()
        if stop and self.info.is_main:
            print(
                f"early stop at step {self.state['step']}: no better validation loss in {t.patience} validations "
                f"since step {self.state['best_step']} ({self.state['best_val_loss']:.4f}); its weights: "
                f"{ckpt.step_dir(self.run_dir, self.state['best_step'])}"
            )
        return TrainResult(
            self.run_dir,
            self.state["step"],
            loss,
            val,
            self.state["tokens"],
            self.state["elapsed"],
            self.state["best_val_loss"],
            self.state["best_step"],
            bool(stop),
        )

    def _last_logged(self) -> tuple[float, float | None]:
        """(last training loss, last validation loss) in metrics.jsonl, or (nan, None) for a new run."""
        logged = summarize(read_metrics(self.run_dir)) if self.state["step"] else {}
        return float(logged.get("train_loss", float("nan"))), logged.get("val_loss")

    def _track_best(self, val: float, step: int) -> bool:
        """Record the best validation loss; True when early stopping says to end the run."""
        st = self.state
        if st["best_val_loss"] is None or val < st["best_val_loss"]:
            st.update(best_val_loss=val, best_step=step, since_best=0)
        else:
            st["since_best"] += 1
        return bool(self.cfg.train.patience) and st["since_best"] >= self.cfg.train.patience


def _model_config(model) -> dict:
    """The model's config as a JSON-safe dict (a GPTConfig, or a Hugging Face config)."""
    if is_hf(model):
        from contextlab.models.hf_causal import config_dict

        return config_dict(model.config)
    return to_dict(model.config)


def train(cfg: RunConfig) -> TrainResult:
    """Train (or resume) the run described by ``cfg``."""
    trainer = Trainer(cfg)
    try:
        return trainer.run()
    finally:
        D.shutdown()
