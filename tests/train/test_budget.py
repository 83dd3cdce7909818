"""A run's size and length: batch shape, step budgets, the wall-clock pace, early stopping."""

from __future__ import annotations

import pytest

from contextlab.errors import UserError
from contextlab.train.budget import WALL_CLOCK_PROBE, EarlyStopping, StepBudget, batch_shape, budget_steps
from contextlab.train.config import TrainSection


class Clock:
    """A clock that advances only when told: seconds per step are exact."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_batch_shape_splits_a_step_over_processes_and_micro_batches():
    t = TrainSection(context=32, tokens_per_step=512)
    assert batch_shape(t, 1) == (16, 16, 1)
    assert batch_shape(t, 2) == (16, 8, 1)
    assert batch_shape(TrainSection(context=32, tokens_per_step=512, micro_batch_rows=2), 2) == (16, 2, 4)
    with pytest.raises(UserError, match=r"multiple of train.context .*--set train.rows_per_step=16 is the "):
        batch_shape(TrainSection(context=32, tokens_per_step=500), 1)  # names the way out (a user at 8,191)
    with pytest.raises(UserError, match=r"rows_per_step=32 is the nearest \(16,352 tokens a step\)$"):
        batch_shape(TrainSection(context=511, tokens_per_step=16384), 1)  # a store packed at 511
    with pytest.raises(
        UserError, match=r"split evenly over the 3 processes; set .* --set train.rows_per_step=15\)"
    ):
        batch_shape(t, 3)  # names the fix, not a micro-batch size the user never set
    with pytest.raises(
        UserError, match="micro-batches of train.micro_batch_rows=3; set train.micro_batch_rows"
    ):
        batch_shape(TrainSection(context=32, tokens_per_step=512, micro_batch_rows=3), 1)


def test_budget_steps_converts_exactly_one_budget():
    t = dict(context=32, tokens_per_step=256)
    assert budget_steps(TrainSection(**t, max_steps=7), 1e6) == 7
    assert budget_steps(TrainSection(**t, max_tokens=256 * 7 + 100), 1e6) == 7
    assert budget_steps(TrainSection(**t, max_tokens=10), 1e6) == 1  # at least one step
    assert budget_steps(TrainSection(**t, max_flops=5 * 256 * 1e6), 1e6) == 5
    assert budget_steps(TrainSection(**t, max_minutes=2.0), 1e6) == 0  # fixed while training
    with pytest.raises(UserError, match="exactly one budget"):
        budget_steps(TrainSection(**t, max_steps=3, max_minutes=1.0), 1e6)
    with pytest.raises(UserError, match="exactly one budget"):
        budget_steps(TrainSection(**t), 1e6)


def test_a_known_total_is_fixed_from_the_start():
    b = StepBudget(12, 0.0)
    assert [b.total_at(s) for s in (0, 5, 11)] == [12, 12, 12]
    assert not b.done(11) and b.done(12) and b.done(13)


def run_wall_clock(budget: StepBudget, clock: Clock, seconds_per_step: float, first_step: int = 0):
    """Step until the budget says done; (steps, the step at which the total got fixed)."""
    step, fixed_at = first_step, None
    while True:
        total = budget.total_at(step)
        if fixed_at is None and total:
            fixed_at = step
        if budget.done(step):
            return step, fixed_at
        clock.now += seconds_per_step * (3 if step < 2 else 1)  # warm-up steps are slower
        step += 1


def test_wall_clock_pace_fixes_the_total_from_steps_3_to_10():
    clock = Clock()
    budget = StepBudget(None, 1.0, clock=clock)  # one minute at 0.5 s per step (warm-up steps: 1.5 s)
    assert budget.total_at(0) is None and not budget.done(0)
    steps, fixed_at = run_wall_clock(budget, clock, 0.5)
    assert fixed_at == WALL_CLOCK_PROBE
    # at step 10: 3 s of warm-up + 8 x 0.5 s = 7 s spent, 53 s left = 106 more steps after step 11
    assert budget.total == steps == 11 + 106
    assert budget.elapsed() == pytest.approx(3 + 0.5 * (steps - 2))


def test_every_process_uses_the_agreed_total_and_a_resumed_run_counts_its_time():
    clock = Clock()
    budget = StepBudget(None, 1.0, elapsed=30.0, agree=lambda n: n + 1, clock=clock)  # 30 s spent before
    steps, fixed_at = run_wall_clock(budget, clock, 0.5, first_step=6)
    assert fixed_at == 10  # the pace starts at step 6 (the first after resuming), 4 steps are timed
    spent = 30.0 + 0.5 * 4  # before the resume, then steps 6..9
    assert budget.total == 11 + int((60 - spent) / 0.5) + 1 == 68 and steps == 68  # + 1: agree's doing
    assert StepBudget(None, 1.0, clock=Clock()).total_at(1) is None  # steps 0 and 1 are never timed


def test_early_stopping_counts_validations_without_improvement():
    es = EarlyStopping(patience=2, val_every=5)
    for step, val in [(5, 3.0), (10, 2.0), (15, 2.5)]:
        es.update(val, step)
    assert (es.best_val_loss, es.best_step, es.since_best) == (2.0, 10, 1) and not es.stop
    assert es.keep(10) and not es.keep(15) and es.pinned() == (10,)
    es.update(2.0, 20)  # equal is no improvement
    assert es.stop and es.keep(20)
    message = es.message(20, "RUN/step_10")
    assert (
        "early stop at step 20" in message and "since step 10 (2.0000); its weights: RUN/step_10" in message
    )
    again = EarlyStopping(patience=2, val_every=5)
    again.load_state_dict({"step": 20, **es.state_dict()})
    assert again.stop and again.state_dict() == es.state_dict()
    older = EarlyStopping(patience=2, val_every=5)
    older.load_state_dict({"step": 20})  # a checkpoint from before early stopping existed
    assert older.state_dict() == {"best_val_loss": None, "best_step": None, "since_best": 0}


def test_no_patience_never_stops_and_patience_needs_validations():
    es = EarlyStopping(patience=0, val_every=0)
    for step in range(1, 20):
        es.update(float(step), step)
    assert not es.stop and not es.keep(1) and es.pinned() == ()
    with pytest.raises(UserError, match="set train.val_every"):
        EarlyStopping(patience=3, val_every=0)


def _shape_config(data: dict, **train):
    from contextlab.config import from_dict
    from contextlab.train.config import RunConfig

    return from_dict(RunConfig, {"data": data, "train": train})


def test_resolve_shape_takes_the_context_from_the_data_and_counts_rows(tmp_path):
    """train.context = 0 is the data's: one synthetic sample per row (long_docs of one length), or a
    packed store's context; rows_per_step / val_rows give the same run as the hand arithmetic."""
    from contextlab.data import synthetic as syn
    from contextlab.data.packing import PackConfig, pack
    from contextlab.train.budget import resolve_shape
    from tests.data.packing.helpers import make_store

    syn.write_parity_store(
        syn.ParityConfig(n_bits=12, n_tasks=4, n_samples=30), tmp_path / "p", progress=False
    )
    syn.write_parity_store(
        syn.ParityConfig(n_bits=12, n_tasks=4, n_samples=8, seed=1), tmp_path / "v", progress=False
    )
    data = {"store": str(tmp_path / "p"), "val_store": str(tmp_path / "v"), "mode": "long_docs"}
    by_rows = resolve_shape(_shape_config(data, context=0, rows_per_step=4, val_rows=3))
    by_hand = resolve_shape(
        _shape_config(data, context=13, tokens_per_step=52, val_tokens=39)
    )  # 12 bits, task, answer
    assert by_rows == by_hand and by_rows.train.context == 13

    store = make_store(tmp_path, {f"d{i}.txt": "ab" * (5 + i) for i in range(12)})
    packed = pack(store, tmp_path / "packed", PackConfig(method="ep", context=16), progress=False).packed
    assert resolve_shape(_shape_config({"packed": str(packed.path)}, context=0)).train.context == 16

    for data_, train_, message in [
        ({"store": str(store.path)}, {"context": 0}, "data.mode = long_docs over documents of one length"),
        (
            {"store": str(store.path), "mode": "long_docs"},
            {"context": 0},
            "have lengths 10..32; set train.context",
        ),
        (
            data,
            {"rows_per_step": 4, "tokens_per_step": 52},
            "set train.rows_per_step or train.tokens_per_step",
        ),
        (data, {"val_rows": 3, "val_tokens": 39}, "set train.val_rows or train.val_tokens, not both"),
    ]:
        with pytest.raises(UserError, match=message):
            resolve_shape(_shape_config(data_, **train_))


def test_a_set_of_rows_per_step_replaces_the_files_tokens_per_step(tmp_path):
    """The command line wins over the file for either key of the pair; 0 is unset, as --help says;
    both on the command line stays an error."""
    from contextlab.cli.train import load_run_config
    from contextlab.train.budget import check_train, resolve_shape

    f = tmp_path / "run.toml"
    f.write_text("[train]\ncontext = 64\ntokens_per_step = 2048\nval_rows = 2\n")
    t = load_run_config(str(f), ["train.rows_per_step=33"]).train
    assert (t.rows_per_step, t.tokens_per_step, t.val_rows) == (33, TrainSection().tokens_per_step, 2)
    check_train(t)
    t = load_run_config(str(f), ["train.rows_per_step=33", "train.tokens_per_step=0"]).train
    assert (t.rows_per_step, t.tokens_per_step) == (33, 0)
    check_train(t)
    t = load_run_config(str(f), ["train.val_tokens=512"]).train  # and the other way round
    assert (t.val_rows, t.val_tokens, t.tokens_per_step) == (0, 512, 2048)
    with pytest.raises(UserError, match="set train.rows_per_step or train.tokens_per_step, not both"):
        load_run_config(str(f), ["train.rows_per_step=33", "train.tokens_per_step=4096"])
    with pytest.raises(UserError, match="train.tokens_per_step is 0 .unset. and so is train.rows_per_step"):
        check_train(load_run_config(str(f), ["train.tokens_per_step=0"]).train)
    both = tmp_path / "both.toml"
    both.write_text("[train]\ntokens_per_step = 2048\nrows_per_step = 4\n")  # both in one file: refused
    with pytest.raises(UserError, match="not both"):
        resolve_shape(load_run_config(str(both), []))


def test_a_run_on_packed_data_without_a_context_trains_at_the_packed_one(tmp_path):
    """data.packed (or a mixture packed for one context) and no train.context: the packed store's
    context, not the default 256 that refused it; a context given in the file or by --set is kept, and
    a store that is not there is left for the trainer to name."""
    from contextlab.cli.train import load_run_config
    from contextlab.data.packing import PackConfig, pack
    from tests.data.packing.helpers import make_store

    store = make_store(tmp_path, {f"d{i}.txt": "ab" * (40 + i) for i in range(12)})
    packed = pack(store, tmp_path / "packed", PackConfig(method="ep", context=48), progress=False).packed
    f = tmp_path / "run.toml"
    f.write_text(f'[data]\npacked = "{packed.path}"\n')
    assert load_run_config(str(f), []).train.context == 48
    assert load_run_config(str(f), ["train.context=32"]).train.context == 32
    mixture = tmp_path / "mixture.toml"
    mixture.write_text(f'[data]\nmixture = [{{packed = "{packed.path}", weight = 1.0}}]\n')
    assert load_run_config(str(mixture), []).train.context == 48
    (tmp_path / "given.toml").write_text(f'[data]\npacked = "{packed.path}"\n[train]\ncontext = 24\n')
    assert load_run_config(str(tmp_path / "given.toml"), []).train.context == 24
    (tmp_path / "gone.toml").write_text('[data]\npacked = "nowhere"\n')
    assert load_run_config(str(tmp_path / "gone.toml"), []).train.context == TrainSection().context


def test_a_warm_up_as_long_as_the_run_is_named():
    from contextlab.train.budget import warmup_note
    from contextlab.train.optim import lr_at

    assert warmup_note(100, 101, 1e-3) is None
    note = warmup_note(100, 60, 1e-3)
    assert note.startswith("note: optim.warmup_steps = 100 is not below this run's 60 steps")
    assert "(to 60% of optim.lr = 0.001)" in note and note.endswith(
        "a tenth of the run is optim.warmup_steps = 6"
    )
    # what it says is what the schedule does: the last step's rate is 60% of the peak, none decays
    rates = [lr_at(s, lr=1e-3, warmup_steps=100, total_steps=60) for s in range(60)]
    assert rates == sorted(rates) and abs(rates[-1] - 0.6e-3) < 1e-12
    assert warmup_note(100, 100, 1e-3) is not None and warmup_note(3, 1, 0.1).endswith("warmup_steps = 1")


def test_a_budget_that_repeats_the_training_rows_says_how_often():
    from contextlab.train.budget import epochs_note

    # 259 rows, 32 a step: an epoch reads 256 (the ragged 3 are dropped); 94 steps read 3,008 rows
    note = epochs_note(94, 32, 259, 512)
    assert note is not None and "read the 256 training rows (131,072 tokens) 11.8 times" in note
    assert epochs_note(15, 32, 259, 512) is None  # 1.9 passes: not yet said
    assert "2.0 times" in epochs_note(16, 32, 259, 512)
    assert epochs_note(10, 8, 4, 64) is not None  # fewer rows than a step: one step is an epoch
