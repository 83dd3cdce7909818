"""Tiny models and stores for the command-line tests (built in tmp_path, CPU, seconds)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import shakespeare


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
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([shakespeare(20_000)], trainer)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    out = tmp_path_factory.mktemp("hf") / "tiny-llama"
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    return out
