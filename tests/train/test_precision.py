"""train.dtype "auto": bf16 only where the hardware multiplies it natively; a resumed run keeps its own."""

from __future__ import annotations

import json

import pytest
import torch

from contextlab.config import from_dict
from contextlab.errors import UserError
from contextlab.train import precision
from contextlab.train.config import RunConfig, first_difference
from contextlab.train.trainer import train
from tests.train.test_trainer import TINY, store  # noqa: F401  (the module's store fixture)

AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\nprocessor\t: 1\nflags\t\t: fpu sse2 avx2 fma\n"


def test_the_cpu_is_judged_by_its_flags():
    assert precision.cpu_has_native_bf16(AMX) and not precision.cpu_has_native_bf16(AVX2)
    assert not precision.cpu_has_native_bf16("")  # no flags read: fp32


def test_auto_takes_bf16_only_where_native_and_a_recorded_precision_first(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    assert precision.resolve_dtype("auto", cpu) == "fp32"
    assert precision.resolve_dtype("auto", cpu, recorded="bf16") == "bf16"  # a resumed bf16 run
    assert precision.resolve_dtype("bf16", cpu) == "bf16"  # as asked
    assert "without native bf16" in precision.slow_bf16_note("bf16", "bf16", cpu)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda cpuinfo=None: True)
    assert precision.resolve_dtype("auto", cpu) == "bf16"
    assert precision.resolve_dtype("auto", cpu, recorded="fp32") == "fp32"
    assert precision.slow_bf16_note("bf16", "auto", cpu) is None


def config(store, out_dir, **train) -> RunConfig:  # noqa: F811
    data = json.loads(json.dumps(TINY))
    data["data"]["store"] = str(store.path)
    data["train"].update(out_dir=str(out_dir), **train)
    return from_dict(RunConfig, data)


def test_a_run_records_what_auto_chose_and_its_resume_keeps_it(store, tmp_path, monkeypatch, capsys):  # noqa: F811
    from contextlab.train import trainer as trainer_module

    native = {"yes": True}
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda cpuinfo=None: native["yes"])
    run = tmp_path / "run"
    train(config(store, run, max_steps=4, dtype="auto"))
    state = json.loads((run / "checkpoints" / "step_000004" / "state.json").read_text())
    assert state["dtype"] == "bf16"
    assert "cpu, bf16 (auto: this CPU has native bf16)" in capsys.readouterr().out
    native["yes"] = False  # the run moved to a CPU without it: it goes on in bf16, and says it is slow
    got = trainer_module.Trainer(config(store, run, max_steps=8, dtype="auto"))
    assert got.dtype == "bf16"
    fresh = trainer_module.Trainer(config(store, tmp_path / "new", max_steps=8, dtype="auto"))
    assert fresh.dtype == "fp32"
    assert train(config(store, run, max_steps=6, dtype="auto")).steps == 6  # resumed, in bf16
    train(config(store, tmp_path / "new", max_steps=2, dtype="auto"))  # fp32 here
    said = r"trained in fp32 up to step_000002, and train.dtype = bf16 would go on in bf16"
    with pytest.raises(UserError, match=said):  # auto hashes as bf16 did: the precision itself is checked
        train(config(store, tmp_path / "new", max_steps=4, dtype="bf16"))
    assert train(config(store, tmp_path / "new", max_steps=4, dtype="fp32")).steps == 4  # what it advised


def test_a_run_recorded_in_a_precision_resumes_under_auto():
    """Runs written before "auto" recorded train.dtype = "bf16" (the default then); "auto" goes on
    with it, while another explicit precision is still a difference."""
    before = from_dict(RunConfig, {"train": {"dtype": "bf16"}})
    assert first_difference(before, from_dict(RunConfig, {"train": {"dtype": "auto"}})) is None
    assert first_difference(before, from_dict(RunConfig, {"train": {"dtype": "fp32"}}))[0] == "train.dtype"
    auto = from_dict(RunConfig, {"train": {"dtype": "auto"}})  # recorded auto: its state's precision decides
    assert first_difference(auto, from_dict(RunConfig, {"train": {"dtype": "fp32"}})) is None
