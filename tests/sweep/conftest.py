"""A tiny sweep file over a Tiny Shakespeare byte store, shared by the sweep tests that run it."""

from __future__ import annotations

import pytest

from contextlab.data.ingest import IngestConfig, ingest
from tests.conftest import shakespeare

TINY_MODEL_AND_DATA = """
[base.model]
size = "tiny-2x128"
n_layer = 1
n_embd = 32
n_head = 2

[base.data]
store = "{store}"
val_split = "tail"
val_fraction = 0.1
"""  # the [base] tables every tiny sweep of the tests shares

SWEEP = (
    """
[sweep]
name = "tiny"
out_dir = "{out}"
threads_per_run = 1
"""
    + TINY_MODEL_AND_DATA
    + """
[base.optim]
warmup_steps = 1{lr}

[base.train]
tokens_per_step = 128
max_steps = 2
val_tokens = 128
peak_flops = 1e12
dtype = "fp32"
log_every = 1

[grid]
"train.context" = {contexts}
"""
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = tmp_path_factory.mktemp("src") / "s.txt"
    src.write_text(shakespeare(20_000))
    return ingest(src, tmp_path_factory.mktemp("st") / "s", IngestConfig(), progress=False).store


def tiny_sweep(tmp_path, store, name: str, lr: str = "", contexts: str = "[16]"):
    """The sweep file NAME.toml in ``tmp_path``, its runs in tmp_path/out; ``lr``: a line added to
    [base.optim]; ``contexts``: the grid of train.context."""
    f = tmp_path / f"{name}.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, lr=lr, contexts=contexts))
    return f
