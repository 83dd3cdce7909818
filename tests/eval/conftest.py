"""Tiny models and stores for the evaluation tests (built in tmp_path, CPU, seconds)."""

from __future__ import annotations

import pytest
import torch

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval.adapter import ModelAdapter, in_memory_adapter
from contextlab.models.gpt import GPT, GPTConfig
from tests.conftest import shakespeare


def tiny_gpt(seed: int = 0, context: int = 64) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=context))
    with torch.no_grad():  # larger weights than the init so that context matters to the outputs
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(5.0)
    return model.eval()


def byte_adapter(model: GPT, batch_size: int = 4, dtype: str = "fp32") -> ModelAdapter:
    return in_memory_adapter(model, ByteTokenizer(), "tiny", batch_size=batch_size, dtype=dtype)


def tiny_llama_adapter(batch_size: int = 4, context: int = 256, seed: int = 5) -> ModelAdapter:
    """A tiny Llama made in memory (bytes as ids, nothing downloaded), run by the Hugging Face backend."""
    import transformers

    from contextlab.inference import ModelInfo

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=257,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=context,
    )
    tok = ByteTokenizer()
    info = ModelInfo("llama", "hf", "-", "llama", 0, context, False, tok.spec())
    return ModelAdapter(transformers.LlamaForCausalLM(cfg), tok, info, batch_size=batch_size)


@pytest.fixture(scope="session")
def byte_store(tmp_path_factory):
    """A byte-level store of 6 documents of varied lengths (Tiny Shakespeare pieces)."""
    src = tmp_path_factory.mktemp("src")
    text = shakespeare()
    for i, n in enumerate([40, 130, 300, 90, 260, 500]):
        (src / f"d{i}.txt").write_text(text[i * 1000 : i * 1000 + n])
    return ingest(
        src, tmp_path_factory.mktemp("st") / "bytes", IngestConfig(tokenizer="byte"), progress=False
    ).store
