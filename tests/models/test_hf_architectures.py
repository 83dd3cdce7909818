"""Hugging Face architectures a user brings, each as a tiny random-weight folder made here: every
decoder-only one loads through the real opener and scores candidates from a shared KV cache exactly
as from whole sequences (a sliding-window Mistral, with the prompt longer than its window, included);
models that do not read left to right are refused (tests/models/test_hf_export.py)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from contextlab.data.hf_tokenizer import train_bpe
from contextlab.eval.adapter import load_model
from tests.conftest import save_tiny_llama, shakespeare

VOCAB = 300
SMALL = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=VOCAB
)
ARCHS = {
    "gpt2": (
        "GPT2",
        dict(
            bos_token_id=0, eos_token_id=0, n_embd=32, n_layer=2, n_head=2, n_positions=128, vocab_size=VOCAB
        ),
    ),
    "gpt_neox": ("GPTNeoX", dict(SMALL, max_position_embeddings=128, rotary_pct=0.25)),
    "mistral": (
        "Mistral",
        dict(SMALL, num_key_value_heads=1, max_position_embeddings=128, sliding_window=16),
    ),
    "qwen2": ("Qwen2", dict(SMALL, num_key_value_heads=1, max_position_embeddings=128)),
    "opt": (
        "OPT",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64, word_embed_proj_dim=32)
        | dict(max_position_embeddings=128, vocab_size=VOCAB),
    ),
    "bloom": ("Bloom", dict(hidden_size=32, n_layer=2, n_head=2, vocab_size=VOCAB)),
    "phi": ("Phi", dict(SMALL, max_position_embeddings=128)),
    "gemma": ("Gemma", dict(SMALL, num_key_value_heads=1, head_dim=16, max_position_embeddings=128)),
    # logits capped after the output layer: the chunked output layer must not be used for it
    "gemma2": (
        "Gemma2",
        dict(
            SMALL,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=128,
            final_logit_softcapping=0.5,
        ),
    ),
}


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    with tempfile.TemporaryDirectory() as tmp:
        train_bpe([shakespeare(20_000)], VOCAB).save(tmp)
        shutil.copy(Path(tmp) / "tokenizer.json", folder / "tokenizer.json")
    return folder / "tokenizer.json"


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_a_decoder_only_folder_loads_and_scores_from_a_shared_cache_as_from_whole_sequences(
    arch, tokenizer_json, tmp_path
):
    name, fields = ARCHS[arch]
    torch.manual_seed(0)
    config = getattr(transformers, f"{name}Config")(**fields)
    model_class = getattr(transformers, f"{name}LMHeadModel" if arch == "gpt2" else f"{name}ForCausalLM")
    model_class(config).save_pretrained(tmp_path / arch)
    shutil.copy(tokenizer_json, tmp_path / arch / "tokenizer.json")
    adapter = load_model(tmp_path / arch)
    assert adapter.info.kind == "hf" and adapter.info.architecture == arch
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, VOCAB, (40,), generator=g).tolist()  # past the Mistral's window of 16
    candidates = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (3, 1, 5, 2)]
    shared = adapter.score_continuations(prompt, candidates)
    assert not adapter._whole_sequences  # the cache was shared, not given up
    whole = adapter.score_spans([(prompt + c, len(prompt)) for c in candidates])
    np.testing.assert_allclose(shared, whole, rtol=1e-5, atol=1e-4)
    scored, generated = adapter.score_and_generate(prompt, candidates, 4)
    np.testing.assert_allclose(scored, whole, rtol=1e-5, atol=1e-4)
    assert generated == adapter.generate(prompt, 4)
    rows = torch.tensor([prompt[:20], prompt[20:]])  # the last token's loss from the last row alone
    every = adapter.token_logprobs(rows)  # (2, 19): the output layer a chunk of rows at a time, if plain
    torch.testing.assert_close(adapter.last_token_logprobs(rows), every[:, -1])
    whole = torch.log_softmax(adapter.logits(rows[:, :-1]).float(), -1).gather(-1, rows[:, 1:, None])[..., 0]
    torch.testing.assert_close(every, whole)  # as the model's own forward gives them
    assert adapter.backend._plain_head is (arch != "gemma2")


def test_a_folder_of_its_own_modeling_code_is_run_only_when_asked(tmp_path, monkeypatch, capsys):
    """A config.json with an auto_map made transformers ask "Do you wish to run the custom code? [y/N]"
    on the terminal, then fail with no word of how to say yes; the code now runs on request only."""
    import json

    from contextlab.errors import UserError
    from contextlab.models.hf import custom_code

    folder = save_tiny_llama(tmp_path / "own-code", vocab=VOCAB, layers=1, chars=20_000)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {
        "AutoConfig": "configuration_tiny.TinyConfig",
        "AutoModelForCausalLM": "modeling_tiny.TinyForCausalLM",
    }
    (folder / "config.json").write_text(json.dumps({**cfg, "model_type": "tiny-custom"}))
    monkeypatch.delenv(custom_code.TRUST_REMOTE_CODE, raising=False)
    monkeypatch.setattr("sys.stdin", None)  # a prompt would read it
    with pytest.raises(UserError) as refused:  # a type transformers has no class of: its code or nothing
        load_model(str(folder))
    said = str(refused.value)
    assert "runs on its own Python code (configuration_tiny.py, modeling_tiny.py)" in said
    assert "set CONTEXTLAB_TRUST_REMOTE_CODE=1 to run it" in said
    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(path, **kwargs):
        seen.append(kwargs.get("trust_remote_code"))
        return real(path, **{**kwargs, "trust_remote_code": False})  # (the files it names are not there)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    (folder / "config.json").write_text(json.dumps(cfg))  # a Llama with code of its own: transformers' Llama
    capsys.readouterr()
    assert load_model(str(folder)).info.architecture == "llama" and seen == [False]
    assert (
        "maps to modeling code of its own (configuration_tiny.py, modeling_tiny.py); transformers' own "
        in (capsys.readouterr().err)
    )
    monkeypatch.setenv(custom_code.TRUST_REMOTE_CODE, "1")
    load_model(str(folder))
    assert seen == [False, True]  # asked for: transformers is told to run the folder's code
