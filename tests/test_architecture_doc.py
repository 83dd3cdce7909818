"""The four "how to add" examples of docs/architecture.md work as written.

Each ```python block is executed as its own module, its record is put into the real
registry (monkeypatched, so the registries are restored after the test), and the variant
is used the way the document says: a training step with the objective, the evaluation
through ``evaluate``, a pack with the method, a SPLICE pack with the retriever, and the
architecture saved as a checkpoint, opened back, evaluated and exported.
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
    assert len(blocks) == 5, "docs/architecture.md should show one example per kind of variant"
    names = ["objective", "evaluation", "packer", "retriever", "architecture"]
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
    cfg = PackConfig(method="splice", retriever="length", context=255, val_fraction=0)
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    used = np.concatenate([packed.sequence_entries(i)[:, 0] for i in range(packed.n_sequences)])
    assert sorted(set(used.tolist())) == list(range(store.n_docs))


def test_architecture_example_is_one_record_for_checkpoints_opening_and_export(
    examples, tmp_path, monkeypatch
):
    import dataclasses

    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.inference import open_model, read_checkpoint
    from contextlab.models.archs import ARCHS, Arch, arch_of, arch_option_names, build_arch
    from contextlab.models.gpt import GPTConfig
    from contextlab.models.hf.custom_code import gpt_from_hf_export
    from contextlab.models.hf.export import export_arch_to_hf
    from contextlab.train.checkpoint import save_checkpoint

    m = examples["architecture"]
    monkeypatch.setitem(
        ARCHS, "probe", Arch(m.ProbeConfig, m.ProbeGPT, lambda g: (g.to_gpt(), {"arch": "probe"}))
    )
    assert arch_option_names("probe") == ["probe_layer"]
    base = GPTConfig(vocab_size=260, n_layer=2, n_head=2, n_embd=32, context=32)
    model = build_arch("probe", base, probe_layer=0).eval()
    assert arch_of(model) == "probe" and model.config.probe_layer == 0

    tok = ByteTokenizer()  # a checkpoint as the trainer writes it, with the run's tokenizer beside it
    run = tmp_path / "run"
    tok.save(run / "tokenizer")
    state = {
        "step": 3,
        "arch": "probe",
        "model_config": dataclasses.asdict(model.config),
        "tokenizer": tok.spec(),
    }
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    save_checkpoint(run, 3, model_state=weights, optim_state={}, state=state, config_toml="")

    x = torch.randint(0, 260, (2, 16))
    back = read_checkpoint(run).build()
    assert type(back) is m.ProbeGPT and torch.equal(back(x).logits, model(x).logits)
    opened, _tok, info = open_model(run)
    assert type(opened) is m.ProbeGPT and info.step == 3 and info.context == 32
    out = export_arch_to_hf(back, tmp_path / "hf", tokenizer_dir=run / "tokenizer")
    exported = gpt_from_hf_export(out)  # the next-token model, without the probe
    assert torch.allclose(exported(x).logits, model(x).logits, atol=1e-5)
