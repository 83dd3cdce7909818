"""What a training checkpoint records about its run, and how a run continues from its newest one.

``saved_state`` is the one list of what a checkpoint's ``state.json`` holds besides the weights and
the optimizer: the counters (step, tokens, FLOPs, elapsed time, schedule length), early stopping,
the loader's cursor, the config and tokenizer hashes, the data it was trained on, and what the
model is (its config, objective, architecture, where it started from). ``resume`` is its reader:
it refuses a checkpoint of other settings or another tokenizer, accepts a data store that only
moved (``moved_data.py``), and restores every piece, so the steps after it are those of a run
never stopped. Trade-off: both take the trainer whole rather than a narrow interface (and do not
import it: the trainer imports them), so the loop stays the only place that owns its objects, and
these two functions the only place that knows which of them a checkpoint holds.
"""

from __future__ import annotations

import torch

from contextlab import __version__
from contextlab.errors import UserError
from contextlab.rundir import read_config
from contextlab.train import checkpoint as ckpt
from contextlab.train import distributed as D
from contextlab.train import guards, moved_data
from contextlab.train.build import model_config
from contextlab.train.config import config_hash, config_hash_matches
from contextlab.train.init_from import is_hf
from contextlab.train.metrics import truncate_metrics
from contextlab.train.optim import lr_at

COUNTERS = ("step", "tokens", "flops", "elapsed", "total_steps")  # restored as they were saved


def saved_state(tr) -> dict:
    """Everything of ``tr`` (the ``Trainer``) beside weights and optimizer that determines the steps
    after a checkpoint, and what ``contextlab report``, ``eval`` and ``export`` read about the model."""
    loader = tr.loader.state_dict() if tr._next is None else tr._next[0]  # not the batch fetched ahead
    return {
        **tr.state,
        **tr.stopping.state_dict(),
        "loader": loader,
        "config_hash": config_hash(tr.cfg),
        "tokenizer_hash": tr.store.tokenizer_hash,
        "tokenizer": tr.store.tokenizer_spec,
        "data": tr.data_record,
        "model_config": model_config(tr.model),
        "objective": tr.cfg.objective.name,
        "left_to_right": _left_to_right(tr),
        "arch": "hf" if is_hf(tr.model) else tr.objective.arch,
        "init": tr.init.meta if tr.init else None,
        "world_size": tr.info.world_size,
        "dtype": tr.dtype,  # what train.dtype "auto" chose: a resume keeps it
        "code_version": __version__,
    }


def _left_to_right(tr) -> dict:
    """How the trained model runs over plain text: the ids before it (the objective's mode token, after
    the BOS a continued Hugging Face model reads first, ``tokenizer_lead`` of them), or None and why not."""
    prefix, lead = tr.objective.lm_prefix_ids(), list(getattr(tr.model, "lead", []))
    record = {"prefix_ids": None if prefix is None else lead + prefix, "why": tr.objective.not_lm}
    return {**record, "tokenizer_lead": len(lead)} if lead else record


def _keep_lead(tr, record: dict) -> None:
    """A continued Hugging Face model goes on reading its rows as it began: with the BOS its checkpoints
    record, or without one (a run begun before contextlab put the tokenizer's BOS first)."""
    if not hasattr(tr.model, "lead"):
        return
    n = int(record.get("tokenizer_lead", 0))
    recorded = [int(i) for i in (record.get("prefix_ids") or [])[:n]]
    if recorded != tr.model.lead:
        if tr.info.is_main and not recorded:
            print(f"note: {tr.run_dir} began without its tokenizer's BOS before every row; it goes on so")
        tr.model.lead = recorded


def resume(tr) -> None:
    """Continue ``tr`` (the ``Trainer``, built but not started) from its run directory's newest
    checkpoint, or start the run afresh."""
    latest = ckpt.latest_checkpoint(tr.run_dir)
    if latest is None:
        return guards.start_fresh(tr.run_dir, tr.cfg, tr.info.is_main)
    model_state, optim_state, rng, state = ckpt.load_checkpoint(latest)
    if not config_hash_matches(tr.cfg, state.get("config_hash")):  # which key, or only free ones
        recorded, notes, other = moved_data.accept_moved(
            read_config(latest), tr.cfg, tr.run_dir, state.get("data"), tr.data_record
        )
        guards.check_same_config(
            tr.run_dir,
            recorded,
            tr.cfg,
            "; ".join([f"its newest checkpoint is {latest.name}", *other]),
            "use another train.out_dir, or the same config to resume",
        )
        for note in notes if tr.info.is_main else []:
            print(note)
    changed = moved_data.changed_in_place(state.get("data"), tr.data_record)
    if changed:
        raise UserError(
            f"{tr.run_dir} cannot resume from {latest.name}: {'; '.join(changed)}, so it would go on "
            "with other data; put the data it trained on back, or use another train.out_dir"
        )
    # the data is what it was (refused above otherwise): rows built otherwise are another version's
    was_rows, now_rows = (
        (state.get("data") or {}).get("validation_rows"),
        tr.data_record.get("validation_rows"),
    )
    if was_rows and was_rows != now_rows and tr.info.is_main:  # the curve would jump here unsaid
        print(
            f"note: {tr.run_dir}'s validation rows differ from those its checkpoints recorded "
            f"({was_rows[:8]} then, {str(now_rows)[:8]} now: another version of contextlab builds them "
            f"otherwise); its validation losses from {latest.name} on are of other rows"
        )
    if state.get("tokenizer_hash") != tr.store.tokenizer_hash:
        raise UserError(
            f"{tr.run_dir} was trained with a different tokenizer than {tr.store.path}; "
            f"use the same data store to resume"
        )
    if state.get("dtype") not in (None, tr.dtype):
        raise UserError(
            f"{tr.run_dir} trained in {state['dtype']} up to {latest.name}, and train.dtype = "
            f"{tr.cfg.train.dtype} would go on in {tr.dtype}; set train.dtype = auto (or "
            f"{state['dtype']}) to resume it, or use another train.out_dir"
        )
    was_world = state.get("world_size")
    if was_world and was_world != tr.info.world_size and tr.info.is_main:  # allowed, and said
        print(
            f"note: {tr.run_dir} trained on {was_world} process(es) up to {latest.name} and goes on on "
            f"{tr.info.world_size}: the same batches and schedule; the losses after it follow an "
            "uninterrupted run's within float rounding, not bit for bit (dropout draws new masks)"
        )
    D.load_full_state_dicts(tr.wrapped, tr.opt, model_state, optim_state)
    tr.loader.load_state_dict(state["loader"])
    tr._next = None
    if not ckpt.restore_rng(rng, tr.info.rank, tr.info.world_size) and tr.info.rank:
        torch.manual_seed(D.rank_seed(tr.cfg.train.seed, tr.info.rank, state["step"]))  # none saved for it
    _keep_lead(tr, state.get("left_to_right") or {})
    tr.state = {k: state[k] for k in COUNTERS}
    tr.state["schedule_changes"] = state.get("schedule_changes", [])
    _note_new_schedule(tr, state.get("total_steps"), state["step"], latest.name)
    tr.stopping.load_state_dict(state)
    if tr.info.is_main:
        print(f"resuming {tr.run_dir} from {latest.name}")
        truncate_metrics(tr.run_dir, state["step"])
        if "dtype" not in state and tr.objective.counts_tokens:  # written before the token-weighted means
            print(
                f"note: {tr.run_dir} was trained by a version that averaged this objective's losses over "
                f"micro-batches; from {latest.name} on its step and validation losses are means over the "
                "scored tokens, so its curve, and early stopping's best so far, may move by a few hundredths "
                "here"
            )


def _note_new_schedule(tr, trained: int | None, step: int, latest: str) -> None:
    """A budget given now that sets another schedule length than the checkpoints were trained with
    (a finished 200-step run given max_steps = 300): training continues, but the learning rate from
    here on follows the new schedule, so the run matches neither budget run uninterrupted. Said in one
    line with both rates, and recorded in every later checkpoint's ``schedule_changes`` (step, old
    and new length), which ``contextlab report`` shows beside the run's config."""
    now = tr.total_steps()
    if not trained or not now or now == trained:
        return
    o = tr.cfg.optim
    rate = lambda total: lr_at(
        step, lr=o.lr, warmup_steps=o.warmup_steps, min_lr_ratio=o.min_lr_ratio, total_steps=total
    )
    tr.state["schedule_changes"] = [*tr.state.get("schedule_changes", []), [step, trained, now]]
    if tr.info.is_main:
        print(
            f"note: {tr.run_dir} ({latest}) was trained on a learning-rate schedule of {trained:,} "
            f"steps and this budget sets {now:,}: from step {step + 1:,} the rate follows the new "
            f"schedule (its rate there: {rate(now):.2e}, {rate(trained):.2e} on the old one), so this run "
            "equals neither budget run uninterrupted (recorded as schedule_changes in its checkpoints)"
        )
