"""Training metrics: a step's objective metrics, tokens/s and MFU, metrics.jsonl truncation."""

from __future__ import annotations

import json

import pytest
import torch

from contextlab.train.metrics import MetricsWriter, Throughput, step_metrics, truncate_metrics


def test_step_metrics_average_losses_and_sum_counts_over_micro_batches_and_processes():
    losses = [torch.tensor(2.0), torch.tensor(4.0)]
    metrics = [
        {"loss_head1": torch.tensor(1.0), "loss_head2": torch.tensor(3.0)},
        {"loss_head1": torch.tensor(2.0), "loss_head2": torch.tensor(5.0)},
    ]
    one = step_metrics(losses, metrics, lambda v: v, 1)
    assert one == {"loss": 3.0, "loss_head1": 1.5, "loss_head2": 4.0}
    # two processes with the same values: means stay
    two = step_metrics(losses, metrics, lambda v: [2 * x for x in v], 2)
    assert two == {"loss": 3.0, "loss_head1": 1.5, "loss_head2": 4.0}
    assert step_metrics(losses, [{}, {}], lambda v: v, 1) == {"loss": 3.0}  # objectives without metrics


def test_a_step_loss_over_counted_tokens_is_their_mean_whatever_the_batching():
    """With loss_tokens the loss is the mean over the scored tokens (10 at loss 2, 12 at loss 4), as the
    gradient is: not the mean of the micro-batch means (3.0)."""
    losses = [torch.tensor(2.0), torch.tensor(4.0)]
    metrics = [{"loss_tokens": torch.tensor(10)}, {"loss_tokens": torch.tensor(12)}]
    one = step_metrics(losses, metrics, lambda v: v, 1)
    assert one == {"loss": pytest.approx(68 / 22), "loss_tokens": 22}
    assert isinstance(one["loss_tokens"], int)  # a count stays an integer in metrics.jsonl
    two = step_metrics(losses, metrics, lambda v: [2 * x for x in v], 2)  # counts double, the mean stays
    assert two == {"loss": pytest.approx(68 / 22), "loss_tokens": 44}
    whole = step_metrics([torch.tensor(68 / 22)], [{"loss_tokens": torch.tensor(22)}], lambda v: v, 1)
    assert whole["loss"] == pytest.approx(one["loss"])  # the same rows in one forward


def test_step_metrics_loss_is_the_one_the_trainer_always_reported():
    losses = [torch.tensor(x, dtype=torch.float32) for x in (2.345678, 1.234567, 3.141592)]
    got = step_metrics(losses, [{}] * 3, lambda v: v, 1)["loss"]
    assert got == float(torch.stack(losses).double().div(3).sum())  # bitwise


def test_throughput_shows_mfu_only_when_the_peak_is_known_and_possible():
    said = []
    fine = Throughput(flops_per_token=1e6, peak_flops=1e15, say=said.append)
    fine.add(1000)
    row = fine.read()
    assert row["tokens_per_s"] > 0 and 0 < row["mfu"] <= 1 and not said
    low = Throughput(flops_per_token=1e6, peak_flops=1.0, say=said.append)  # a peak far too low
    for _ in range(3):
        low.add(1000)
        assert "mfu" not in low.read()
    assert len(said) == 1 and "MFU not shown" in said[0] and "too low" in said[0]  # said once
    unknown = Throughput(flops_per_token=1e6, peak_flops=0.0, say=said.append)
    unknown.add(1000)
    unknown.read()
    unknown.read()
    assert "mfu" not in unknown.read() and len(said) == 2 and "contextlab peak" in said[1]


class Bar:
    def __init__(self):
        self.lines = []

    def write(self, line: str) -> None:
        self.lines.append(line)


def test_console_line_without_mfu(tmp_path):
    bar = Bar()
    w = MetricsWriter(tmp_path, True, False)
    w.write({"step": 1, "loss": 2.5, "lr": 1e-3, "tokens": 8, "loss_head1": 2.0, "tokens_per_s": 100.0}, bar)
    w.write({"step": 2, "loss": 2.4, "lr": 1e-3, "tokens": 16, "tokens_per_s": 100.0, "mfu": 0.25}, bar)
    w.close()
    assert "tok/s" in bar.lines[0] and "MFU" not in bar.lines[0] and "MFU 25.0%" in bar.lines[1]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["loss_head1"] == 2.0 and "mfu" not in rows[0]


def test_truncation_keeps_the_steps_up_to_the_checkpoint_and_replaces_the_file(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 9)) + "\n")
    inode = f.stat().st_ino
    truncate_metrics(tmp_path, 5)
    assert [json.loads(x)["step"] for x in f.read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert f.stat().st_ino != inode  # a new file renamed over the old one: never half written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]  # no temporary file left
    truncate_metrics(tmp_path / "missing", 3)  # a run without metrics: nothing to do


@pytest.mark.parametrize("peak", [0.0, 1e15])
def test_throughput_never_says_anything_for_a_valid_or_known_state_twice(peak):
    said = []
    t = Throughput(flops_per_token=1.0, peak_flops=peak, say=said.append)
    for _ in range(5):
        t.add(10)
        t.read()
    assert len(said) == (1 if peak == 0.0 else 0)
