"""The trainer: exact resume after SIGKILL, budgets, refusals, checkpoint safety, export."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.train import checkpoint as ckpt
from contextlab.train.config import RunConfig, legacy_config_hash
from contextlab.train.optim import lr_at
from contextlab.train.trainer import Trainer, train
from tests.conftest import GPT2_DIR, REPO, shakespeare

TINY = {
    "model": {"size": "tiny-4x256", "n_layer": 2, "n_head": 2, "n_embd": 64},
    "optim": {"lr": 3e-3, "warmup_steps": 3},
    "train": {
        "context": 32,
        "tokens_per_step": 256,
        "log_every": 1,
        "val_every": 5,
        "val_tokens": 512,
        "ckpt_every": 4,
        "keep_last": 2,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    out = tmp_path_factory.mktemp("store") / "shakes"
    text = shakespeare(200_000)
    src = tmp_path_factory.mktemp("src") / "shakes.txt"
    src.write_text(text)
    return ingest(src, out, IngestConfig(), progress=False).store


def config(store, out_dir, **train_overrides) -> RunConfig:
    data = json.loads(json.dumps(TINY))
    data["data"]["store"] = str(store.path)
    data["train"].update(out_dir=str(out_dir), **train_overrides)
    return from_dict(RunConfig, data)


def losses(run_dir) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows}


def test_lr_schedule_is_a_pure_function():
    kw = dict(lr=1.0, warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    assert lr_at(0, **kw) == pytest.approx(0.1) and lr_at(9, **kw) == pytest.approx(1.0)
    assert lr_at(60, **kw) == pytest.approx(0.55) and lr_at(110, **kw) == pytest.approx(0.1)
    assert [lr_at(s, **kw) for s in range(50)] == [lr_at(s, **kw) for s in range(50)]


def test_training_lowers_the_loss_and_writes_a_run(store, tmp_path):
    res = train(config(store, tmp_path / "run", max_steps=40))
    run = tmp_path / "run"
    ls = losses(run)
    assert res.steps == 40 and len(ls) == 40
    assert np.mean([ls[s] for s in range(36, 41)]) < ls[1] - 1.5  # bytes: from ~5.5 nats down
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [36, 40]  # keep_last = 2
    state = json.loads((run / "checkpoints" / "step_000040" / "state.json").read_text())
    assert state["tokens"] == 40 * 256 and state["tokenizer_hash"] == store.tokenizer_hash
    assert state["loader"]["position"] > 0 and res.val_loss is not None
    assert (run / "config.toml").read_text().count("context = 32") == 1


def test_exact_resume_after_sigkill(store, tmp_path):
    steps = 60
    ref = tmp_path / "ref"
    train(config(store, ref, max_steps=steps))
    run = tmp_path / "killed"
    cfg_args = [
        f"--set=data.store={store.path}",
        f"--set=train.out_dir={run}",
        f"--set=train.max_steps={steps}",
    ]
    cfg_file = tmp_path / "tiny.toml"
    from contextlab.config import save_toml

    save_toml(config(store, run, max_steps=steps), cfg_file)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "contextlab", "train", str(cfg_file), *cfg_args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120

    def newest() -> int:
        try:
            return max([s for s, _ in ckpt.list_checkpoints(run)] or [0])
        except FileNotFoundError:  # a checkpoint pruned while listing
            return 0

    while time.time() < deadline and proc.poll() is None and newest() < 12:
        time.sleep(0.005)
    assert proc.poll() is None, "training ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(s for s, _ in ckpt.list_checkpoints(run))
    assert 12 <= killed_at < steps
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"resuming {run} from step_{killed_at:06d}" in res.stdout
    got, want = losses(run), losses(ref)
    assert sorted(got) == list(range(1, steps + 1))
    assert all(got[s] == want[s] for s in range(1, steps + 1)), (
        "resumed losses differ from the uninterrupted run"
    )


def test_resume_refuses_a_different_config(store, tmp_path):
    train(config(store, tmp_path / "run", max_steps=4))
    with pytest.raises(UserError, match="different config"):
        train(config(store, tmp_path / "run", max_steps=8, context=64))
    res = train(config(store, tmp_path / "run", max_steps=8, log_every=2))  # a bigger budget continues
    assert res.steps == 8


def test_a_refused_resume_names_the_first_changed_key(store, tmp_path):
    run = tmp_path / "run"
    train(config(store, run, max_steps=4))

    def refused(cfg) -> str:
        with pytest.raises(UserError) as info:
            train(cfg)
        return str(info.value)

    assert "(train.context 32 there, 64 now; its newest checkpoint is step_000004)" in refused(
        config(store, run, max_steps=8, context=64)
    )
    assert "train.tokens_per_step 256 there, 512 now" in refused(
        config(store, run, max_steps=8, tokens_per_step=512)
    )
    lr = config(store, run, max_steps=8)
    lr.optim.lr = 5e-3
    assert "optim.lr 0.003 there, 0.005 now" in refused(lr)
    source = config(store, run, max_steps=8)
    source.init.source = str(run)
    assert f'init.source "" there, "{run}" now' in refused(source)
    assert "\n" not in refused(lr)


def test_keys_that_change_no_number_do_not_block_a_resume(store, tmp_path):
    """The parallel strategy (checkpoints are full state dicts), threads and logging may change on
    resume, also for a run whose checkpoint hashed the parallel strategy (as written before it was
    free: the run's recorded config.toml says only free keys changed)."""
    from contextlab.train import config as train_config

    run = tmp_path / "run"
    train(config(store, run, max_steps=4, parallel="fsdp"))
    state_file = run / "checkpoints" / "step_000004" / "state.json"
    state = json.loads(state_file.read_text())
    hashed = train_config._hashed(config(store, run, parallel="fsdp"), train_config.LEGACY_RESUME_FREE)
    defaults = train_config._hashed(RunConfig(), train_config.LEGACY_RESUME_FREE)
    changed = {s: {k: v for k, v in sec.items() if v != defaults[s][k]} for s, sec in hashed.items()}
    state["config_hash"] = train_config._sha({s: sec for s, sec in changed.items() if sec})
    assert state["config_hash"] != train_config.config_hash(config(store, run, parallel="fsdp"))
    state_file.write_text(json.dumps(state))
    assert train(config(store, run, max_steps=6, threads=2, log_every=3)).steps == 6  # ddp now
    assert train(config(store, run, max_steps=8, parallel="fsdp")).steps == 8


def test_a_checkpoint_with_the_legacy_config_hash_resumes(store, tmp_path):
    run = tmp_path / "run"
    train(config(store, run, max_steps=4))
    state_file = run / "checkpoints" / "step_000004" / "state.json"
    state = json.loads(state_file.read_text())
    state["config_hash"] = legacy_config_hash(config(store, run))  # as written before the non-default rule
    state_file.write_text(json.dumps(state))
    with pytest.raises(UserError, match="different config"):
        train(config(store, run, max_steps=8, seed=1))
    assert train(config(store, run, max_steps=8)).steps == 8


def test_checkpoint_write_failure_keeps_the_previous_one(store, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(config(store, run, max_steps=4))
    real = ckpt.save_file

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "save_file", disk_full)
    with pytest.raises(UserError, match="the disk is full.*step_000004 is intact"):
        train(config(store, run, max_steps=8))
    monkeypatch.setattr(ckpt, "save_file", real)
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [4]
    assert not list((run / "checkpoints").glob(".*tmp"))
    model_state, _, _, state = ckpt.load_checkpoint(run / "checkpoints" / "step_000004")
    assert (state["step"] == 4 and "model.tok_emb.weight" in model_state) or len(model_state) > 0


def test_budgets_convert_to_steps(store, tmp_path):
    t = Trainer(config(store, tmp_path / "a", max_tokens=256 * 7))
    assert t.total_steps() == 7
    t = Trainer(config(store, tmp_path / "b", max_flops=t.flops_per_token * 256 * 5))
    assert t.total_steps() == 5
    with pytest.raises(UserError, match="exactly one budget"):
        Trainer(config(store, tmp_path / "c", max_steps=3, max_tokens=100)).total_steps()
    with pytest.raises(UserError, match="multiple of train.context"):
        Trainer(config(store, tmp_path / "d", max_steps=3, tokens_per_step=100))


def test_constant_tokens_per_step_across_contexts(store, tmp_path):
    for context in (16, 32, 64):
        t = Trainer(config(store, tmp_path / f"r{context}", max_steps=1, context=context))
        assert t.rows * context == 256 and t.loader.next_batch().tokens.shape == (256 // context, context + 1)


def test_wall_clock_budget(store, tmp_path):
    res = train(config(store, tmp_path / "w", max_minutes=0.05))
    state = json.loads((tmp_path / "w" / "checkpoints" / f"step_{res.steps:06d}" / "state.json").read_text())
    assert res.steps >= 11 and state["total_steps"] == res.steps


def test_tokenizer_mismatch_on_resume(store, tmp_path):
    run = tmp_path / "run"
    train(config(store, run, max_steps=2))
    other = ingest(
        REPO / "src" / "contextlab" / "corpus" / "books",
        tmp_path / "books",
        IngestConfig(tokenizer=f"gpt2:{GPT2_DIR}"),
        progress=False,
    ).store
    cfg = config(store, run, max_steps=4)
    cfg.data.store = str(other.path)
    cfg.data.val_split = "documents"
    with pytest.raises(UserError, match="different"):
        train(cfg)


def test_export_round_trip(store, tmp_path):
    from transformers import AutoModelForCausalLM

    import contextlab.models.hf  # noqa: F401  registers the classes with transformers
    from contextlab.inference import read_checkpoint
    from contextlab.train.export import export_checkpoint

    run = tmp_path / "run"
    train(config(store, run, max_steps=3))
    model = read_checkpoint(run).build()
    out = export_checkpoint(run, tmp_path / "hf")
    hf = AutoModelForCausalLM.from_pretrained(out)
    idx = torch.randint(0, 257, (2, 20))
    with torch.no_grad():
        assert torch.allclose(hf(idx).logits, model(idx).logits, atol=1e-5)
    assert (out / "tokenizer" / "tokenizer_spec.json").is_file()
    with pytest.raises(UserError):
        export_checkpoint(run, tmp_path / "hf")


def test_early_stopping_ends_the_run_and_resume_keeps_it_stopped(store, tmp_path, monkeypatch):
    vals = iter([3.0, 2.0, 2.5, 1.9, 2.2, 2.3, 2.4, 1.0, 1.0])  # best 1.9 at the 4th validation (step 20)
    monkeypatch.setattr(Trainer, "validate", lambda self: next(vals))
    run = tmp_path / "es"
    res = train(config(store, run, max_steps=100, patience=3))
    assert res.stopped_early and res.steps == 35  # validations at 5..35; 3 without improvement after step 20
    assert (res.best_val_loss, res.best_step) == (1.9, 20)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 35 and rows[-1]["best_val_loss"] == 1.9 and rows[-1]["best_step"] == 20
    kept = [s for s, _ in ckpt.list_checkpoints(run)]
    assert kept[-1] == 35 and 20 in kept and len(kept) == 3  # the stopping step, the best one, keep_last = 2
    again = train(config(store, run, max_steps=100, patience=3))  # same command: nothing more to do
    assert again.steps == 35 and again.stopped_early and again.best_step == 20
    assert (
        again.final_loss == pytest.approx(res.final_loss) and again.val_loss == 2.4
    )  # reported from the log
    with pytest.raises(UserError, match="val_every"):
        train(config(store, tmp_path / "nv", max_steps=10, patience=2, val_every=0))


def test_train_tokens_caps_the_training_data(store, tmp_path):
    cfg = config(store, tmp_path / "cap", max_steps=1)
    cfg.data.train_tokens = 1000
    t = Trainer(cfg)
    doc = np.asarray(store.doc(0))[:1000].astype(np.int64)
    text = doc.tobytes()
    for _ in range(12):  # more rows than 1000 tokens hold: the loader repeats the capped data
        for row in t.loader.next_batch().tokens:
            body = row[row != store.tokenizer_spec.get("eot_id", -1)].astype(np.int64)
            assert body.tobytes() in text
    cfg.data.train_tokens = 10**9
    with pytest.raises(UserError, match="train_tokens"):
        Trainer(cfg)


def test_an_mtp_run_logs_every_head_loss(store, tmp_path):
    cfg = config(store, tmp_path / "mtp", max_steps=3, micro_batch_rows=2)  # 4 micro-batches per step
    cfg.objective.name, cfg.objective.options = "mtp", {"n_future": 3, "loss_weights": [2.0, 1.0, 1.0]}
    train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "mtp" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        heads = [row[f"loss_head{k}"] for k in (1, 2, 3)]
        # the loss is the weighted mean of the heads' losses, micro-batch by micro-batch
        assert row["loss"] == pytest.approx((2 * heads[0] + heads[1] + heads[2]) / 4, abs=1e-5)
        assert len(set(heads)) == 3  # three separate losses
    cfg = config(store, tmp_path / "mlm", max_steps=1)
    cfg.objective.name = "mlm"
    train(cfg)
    row = json.loads((tmp_path / "mlm" / "metrics.jsonl").read_text())
    assert 0 < row["loss_tokens"] < 256 and isinstance(
        row["loss_tokens"], int
    )  # the masked tokens of the step


@pytest.mark.parametrize("name", ["mlm", "fim", "ul2"])
def test_a_random_objective_trains_alike_for_any_micro_batch_size(store, tmp_path, name):
    """Each row draws its corruption from its own seed (the run's, the step's, its tokens), and the
    gradient, the step's loss and the validation loss are means over the scored tokens, so the same
    run in 1 forward or in 4 micro-batches per step trains alike and validates alike."""
    got, val = {}, {}
    for micro in (0, 2):  # 8 rows in one forward; 4 forwards of 2 rows
        cfg = config(store, tmp_path / f"{name}{micro}", max_steps=6, micro_batch_rows=micro, val_every=0)
        cfg.objective.name = name
        val[micro] = train(cfg).val_loss
        got[micro] = losses(tmp_path / f"{name}{micro}")
    assert sorted(got[0]) == sorted(got[2]) == list(range(1, 7))
    for step in got[0]:
        assert got[2][step] == pytest.approx(got[0][step], abs=2e-5), step
    assert val[2] == pytest.approx(val[0], abs=2e-5)


def test_training_row_seeds_follow_the_run_the_step_and_the_row():
    from contextlab.objectives.base import training_row_seeds

    rows = np.arange(24, dtype=np.uint16).reshape(3, 8)
    seeds = training_row_seeds(rows, 0, 5)
    assert len(set(seeds)) == 3 and seeds == training_row_seeds(rows.astype(np.int64), 0, 5)
    assert training_row_seeds(rows[1:], 0, 5) == seeds[1:]  # a row's seed is its own, wherever it lies
    assert not set(seeds) & set(training_row_seeds(rows, 0, 6))  # seen again later: drawn anew
    assert not set(seeds) & set(training_row_seeds(rows, 1, 5))  # another run seed: other draws


def test_a_trainer_reads_the_peak_and_never_measures_it(store, tmp_path, monkeypatch):
    from contextlab.train import flops

    peak_file = tmp_path / "cache" / "peak.json"
    monkeypatch.setenv("CONTEXTLAB_PEAK_FILE", str(peak_file))

    def no_benchmark(*a, **k):
        raise AssertionError("a Trainer must not benchmark the machine")

    monkeypatch.setattr(flops, "time_matmul", no_benchmark)
    t = Trainer(config(store, tmp_path / "a", max_steps=1, peak_flops=0.0))
    assert t.peak == 0.0 and not peak_file.exists()  # unknown: no MFU, nothing written
    flops.write_peak_entries({flops.peak_key(torch.float32, "cpu"): {"flops": 3.5e11}})  # `contextlab peak`
    assert Trainer(config(store, tmp_path / "b", max_steps=1, peak_flops=0.0)).peak == 3.5e11
    assert Trainer(config(store, tmp_path / "c", max_steps=1, peak_flops=2e12)).peak == 2e12  # declared wins


def test_an_impossible_mfu_is_never_shown(store, tmp_path, capsys):
    train(config(store, tmp_path / "run", max_steps=3, peak_flops=1.0))  # a peak of 1 FLOP/s
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("mfu" not in r and r["tokens_per_s"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert out.count("MFU not shown") == 1 and "MFU " not in out.replace("MFU not shown", "")


def test_a_new_step_budget_continues_the_run_but_says_so_and_records_it(store, tmp_path, capsys):
    """The learning rate decays over the run's budget, so resuming with another budget switches
    schedules midway (a finished 4-step run given 6 steps warms its decayed rate back up): training
    continues, with one line naming both lengths and rates, and every later checkpoint records the
    change; the same budget resumes without it."""
    run = tmp_path / "r"
    train(config(store, run, max_steps=4))
    capsys.readouterr()
    assert train(config(store, run, max_steps=6)).steps == 6
    few = "validation loss is read on"  # this store's tails: the start's note on few documents
    note = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note:") and few not in ln]
    assert len(note) == 1 and "schedule of 4 steps and this budget sets 6: from step 5" in note[0], note
    state = json.loads((run / "checkpoints" / "step_000006" / "state.json").read_text())
    assert state["schedule_changes"] == [[4, 4, 6]] and state["total_steps"] == 6
    from contextlab.report.runs import schedule_notes

    assert schedule_notes(run) == [
        "resumed at step 4 with a new budget: the learning-rate schedule of 4 steps became one of 6, so this "
        "run equals neither budget run uninterrupted"
    ]  # what the run's report shows under its key numbers
    assert train(config(store, run, max_steps=6)).steps == 6  # the same budget: up to date
    assert not [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note:") and few not in ln]


def test_the_done_line_names_the_validation_loss_and_gives_the_next_token_one(store, tmp_path, capsys):
    """The validation loss of the done line is the objective's own, named so; the next-token loss
    (val_lm_loss) stands beside it where it differs (fim, not clm; mlm has none)."""
    from contextlab.cli import main
    from contextlab.cli.train import done_line, next_line
    from contextlab.config import save_toml

    lines, last = {}, {}
    for name in ("fim", "mlm", "clm"):
        cfg = config(store, tmp_path / name, max_steps=2)
        cfg.objective.name = name
        res = train(cfg)
        last[name] = json.loads((tmp_path / name / "metrics.jsonl").read_text().splitlines()[-1])
        assert res.val_loss == last[name]["val_loss"] and res.val_lm_loss == last[name].get("val_lm_loss")
        lines[name] = done_line(res)
    fim, (val, lm) = lines["fim"], (last["fim"]["val_loss"], last["fim"]["val_lm_loss"])
    assert f", validation FIM loss (next-token on FIM-rearranged rows) {val:.4f}, " in fim
    assert fim.endswith(f", next-token validation loss {lm:.4f}") and val != lm
    assert ", validation masked-token loss " in lines["mlm"] and "next-token" not in lines["mlm"]
    assert ", validation next-token loss " in lines["clm"] and lines["clm"].count("next-token") == 1
    capsys.readouterr()
    save_toml(config(store, tmp_path / "fim", max_steps=2), tmp_path / "fim.toml")
    assert main(["train", str(tmp_path / "fim.toml"), "--set", "objective.name=fim"]) == 0  # at its end
    assert capsys.readouterr().out.splitlines()[-1] == fim  # context 32 is too short to profile: no next line
    runs = {}
    for name in ("clm", "mlm"):  # at context 64 the command that profiles a causal LM on what it held out
        runs[name] = config(store, tmp_path / f"{name}64", max_steps=2, context=64)
        runs[name].objective.name = name
        train(runs[name])
    then = next_line(tmp_path / "clm64", runs["clm"])
    assert then.startswith(
        f"next: contextlab profile --model {tmp_path / 'clm64'} --split run   (how it uses"
    )
    assert next_line(tmp_path / "mlm64", runs["mlm"]) is None  # a masked LM is not profiled


def test_a_run_shorter_than_its_warm_up_says_so_once(store, tmp_path, capsys):
    train(config(store, tmp_path / "short", max_steps=2))  # TINY warms up over 3 steps
    notes = [line for line in capsys.readouterr().out.splitlines() if "optim.warmup_steps" in line]
    assert notes == [
        "note: optim.warmup_steps = 3 is not below this run's 2 steps, so the learning rate rises the whole "
        "run (to 67% of optim.lr = 0.003) and never decays; a warm-up of a tenth of the run is "
        "optim.warmup_steps = 1"
    ]
    train(config(store, tmp_path / "long", max_steps=4))
    assert "optim.warmup_steps" not in capsys.readouterr().out


def test_a_resume_of_a_run_from_before_token_weighted_losses_says_its_curve_may_move(store, tmp_path, capsys):
    """A checkpoint written before the losses of objectives that count their tokens were token means (it
    has no recorded dtype) resumes with a note: its curve and early stopping's best may shift."""
    run = tmp_path / "ul2"
    cfg = config(store, run, max_steps=4, micro_batch_rows=2)
    cfg.objective.name = "ul2"
    train(cfg)
    for f in run.glob("checkpoints/*/state.json"):
        state = json.loads(f.read_text())
        state.pop("dtype")
        f.write_text(json.dumps(state))
    capsys.readouterr()
    cfg.train.max_steps = 6
    train(cfg)
    assert "means over the scored tokens" in capsys.readouterr().out
    clm = config(store, tmp_path / "clm", max_steps=4)
    train(clm)
    for f in (tmp_path / "clm").glob("checkpoints/*/state.json"):
        state = json.loads(f.read_text())
        state.pop("dtype")
        f.write_text(json.dumps(state))
    clm.train.max_steps = 6
    train(clm)
    assert "means over the scored tokens" not in capsys.readouterr().out  # clm's loss was a token mean
