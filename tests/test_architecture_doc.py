"""The four "how to add" examples of docs/architecture.md work as written.

Each ```python block is executed as its own module, its record is put into the real
registry (monkeypatched, so the registries are restored after the test), and the variant
is used the way the document says: a training step with the objective, the evaluation
through ``evaluate``, a pack with the method, a SPLICE pack with the retriever.
"""

from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest
import torch

from contextlab.data.ingest import IngestConfig, ingest
from tests.conftest import REPO, write_tree

DOC = REPO / "docs" / "architecture.md"


def doc_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def load(code: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    exec(compile(code, f"{DOC}:{name}", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def examples():
    blocks = doc_examples()
    assert len(blocks) == 4, "docs/architecture.md should show one example per kind of variant"
    names = ["objective", "evaluation", "packer", "retriever"]
    yield {n: load(code, f"doc_{n}") for n, code in zip(names, blocks)}
    for n in names:
        sys.modules.pop(f"doc_{n}", None)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("doc")
    files = {f"dir{i % 3}/d{i}.txt": (f"word{i} ") * (20 + 7 * i) for i in range(12)}
    write_tree(root / "src", files)
    return ingest(root / "src", root / "store", IngestConfig(tokenizer="byte"), progress=False).store


def test_objective_example_trains(examples):
    from contextlab.models.gpt import GPT, GPTConfig

    obj = examples["objective"].LastHalf(examples["objective"].LastHalf.Options())
    model = GPT(GPTConfig(vocab_size=260, n_layer=1, n_head=2, n_embd=32, context=16))
    tokens = torch.randint(0, 260, (2, 17))
    loss, metrics = obj(model, tokens)
    loss.backward()
    assert torch.isfinite(loss) and "loss_scored" in metrics
    assert all(p.grad is not None for p in model.parameters())


def test_evaluation_example_runs_through_the_registry(examples, store, tmp_path, monkeypatch):
    from contextlab.eval import EVALS, evaluate
    from contextlab.eval.base import Eval
    from tests.eval.conftest import byte_adapter, tiny_gpt

    m = examples["evaluation"]
    monkeypatch.setitem(EVALS, "first-token", Eval(m.run, m.Options, "loss of the first tokens", "a store"))
    adapter = byte_adapter(tiny_gpt(1, context=64), batch_size=4)
    path, out = evaluate("first-token", adapter, m.Options(tokens=8), str(store.path), tmp_path)
    assert np.isfinite(out.results["summary"]["loss"]) and path.is_file()


def test_packer_example_packs_longest_next(examples, store, tmp_path, monkeypatch):
    from contextlab.data.packing import PACKERS, PackConfig, pack
    from contextlab.data.packing.methods import Packer

    monkeypatch.setitem(PACKERS, "longest-next", Packer(examples["packer"].pack_longest_next, "longest"))
    cfg = PackConfig(method="longest-next", context=255)
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    root, after = packed.sequence_entries(0)[0, 0], packed.sequence_entries(0)[1, 0]
    others = np.delete(store.lengths(), root)
    assert store.lengths()[after] == others.max()  # after the random root: the longest document


def test_retriever_example_serves_splice(examples, store, tmp_path, monkeypatch):
    from contextlab.data.packing import RETRIEVERS, PackConfig, pack
    from contextlab.data.packing.methods import RetrieverKind

    r = examples["retriever"]
    monkeypatch.setitem(RETRIEVERS, "length", RetrieverKind(r.build_same_length, "similar length"))
    cfg = PackConfig(method="splice", retriever="length", context=255)
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    used = np.concatenate([packed.sequence_entries(i)[:, 0] for i in range(packed.n_sequences)])
    assert sorted(set(used.tolist())) == list(range(store.n_docs))
