"""Tiny models and stores for the command-line tests (built in tmp_path, CPU, seconds)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import save_tiny_llama, shakespeare


def untrained_run(folder, seed: int = 0, context: int = 512):
    """A contextlab run holding one random-weight GPT (byte tokenizer) as its step-0 checkpoint."""
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.models.gpt import GPT, GPTConfig
    from contextlab.train.checkpoint import write_untrained_run

    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=257, n_layer=1, n_head=2, n_embd=32, context=context, mlp="swiglu"))
    write_untrained_run(folder, model, ByteTokenizer(), note="test")
    return folder


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Two random-weight runs (context 512, byte tokenizer): "a" and "b"."""
    root = tmp_path_factory.mktemp("runs")
    return {name: untrained_run(root / name, seed) for seed, name in enumerate("ab")}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two byte-level token stores of different text: "one" (3 documents) and "two" (2)."""
    from contextlab.data.ingest import IngestConfig, ingest

    root = tmp_path_factory.mktemp("stores")
    text = shakespeare(6000)
    out = {}
    for name, parts in (
        ("one", [text[:900], text[900:2000], text[2000:2600]]),
        ("two", [text[3000:4200]] * 2),
    ):
        src = root / f"src-{name}"
        src.mkdir()
        for i, part in enumerate(parts):
            (src / f"d{i}.txt").write_text(part + str(i))
        out[name] = ingest(src, root / name, IngestConfig(tokenizer="byte"), progress=False).store.path
    return out


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny random-weight Hugging Face Llama folder (save_pretrained) with a small BPE tokenizer.json."""
    return save_tiny_llama(tmp_path_factory.mktemp("hf") / "tiny-llama", vocab=300, layers=1, chars=20_000)
