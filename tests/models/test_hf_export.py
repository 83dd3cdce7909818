"""Hugging Face interop: export a tiny GPT, load it with plain transformers (no
trust_remote_code), generate, round-trip back to a GPT, and load a real GPT-2 folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import transformers

import contextlab.models.hf.custom_code as hf  # registers contextlab-gpt with transformers
from contextlab.errors import UserError
from contextlab.models import GPT, GPTConfig

VOCAB = 257


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(**overrides) -> GPT:
    torch.manual_seed(0)
    cfg = {"vocab_size": VOCAB, "n_layer": 2, "n_head": 2, "n_embd": 64, "context": 32, **overrides}
    return GPT(GPTConfig(**cfg)).eval()


def ids(B: int, T: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("overrides", [{}, {"mlp": "swiglu", "tie_embeddings": False, "bias": True}])
def test_export_loads_with_plain_auto_model(tmp_path, overrides):
    model = tiny(**overrides)
    out = hf.export_to_hf(model, tmp_path / "export", extra_config={"tokenizer": "bytes"})
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors"}
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "contextlab-gpt" and config["contextlab"]["tokenizer"] == "bytes"

    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)  # no trust_remote_code
    assert type(loaded).__name__ == "ContextlabGPTForCausalLM"
    assert (loaded.gpt.lm_head.weight is loaded.gpt.wte.weight) == model.config.tie_embeddings
    x = ids(2, 40)  # longer than context: RoPE extrapolates in both
    with torch.no_grad():
        ours = model(x).logits
        theirs = loaded(x).logits
    assert theirs.shape == (2, 40, VOCAB)
    assert torch.allclose(theirs, ours, atol=1e-5)
    with torch.no_grad():  # the usual shifted loss
        loss = loaded(x, labels=x).loss
    expected = torch.nn.functional.cross_entropy(ours[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    assert torch.allclose(loss, expected, atol=1e-5)


def test_generate_matches_greedy_decoding(tmp_path):
    model = tiny()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(hf.export_to_hf(model, tmp_path / "m"))
    prompt = ids(1, 6)
    out = loaded.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 14)
    seq = prompt
    with torch.no_grad():
        for _ in range(8):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, seq)
    # a left-padded batch generates the same continuation as the unpadded prompt
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)], dim=1)
    out_padded = loaded.generate(
        padded, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0
    )
    assert torch.equal(out_padded[:, 3:], seq)


def test_round_trip_to_gpt_is_exact(tmp_path):
    model = tiny()
    with torch.no_grad():
        model.final_norm.weight.mul_(1.5)  # make sure non-default values survive
    back = hf.gpt_from_hf_export(hf.export_to_hf(model, tmp_path / "m"))
    assert back.config == model.config
    assert back.lm_head.weight is back.wte.weight
    original = model.state_dict()
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, original[name]), name
    x = ids(2, 20)
    with torch.no_grad():
        assert torch.equal(back(x).logits, model(x).logits)


def test_export_refuses_to_overwrite(tmp_path):
    model = tiny()
    out = hf.export_to_hf(model, tmp_path / "m")
    with pytest.raises(UserError, match="already exists"):
        hf.export_to_hf(model, out)
    with torch.no_grad():
        model.final_norm.weight.fill_(2.0)
    hf.export_to_hf(model, out, overwrite=True)
    assert torch.equal(hf.gpt_from_hf_export(out).final_norm.weight, model.final_norm.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp or old folders left
    (tmp_path / "empty").mkdir()
    hf.export_to_hf(model, tmp_path / "empty")  # an empty folder is fine


def test_export_copies_the_tokenizer_folder(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text('{"kind": "bytes"}')
    out = hf.export_to_hf(tiny(), tmp_path / "m", tokenizer_dir=tok)
    assert (out / "tokenizer" / "tokenizer.json").read_text() == '{"kind": "bytes"}'


def test_loading_a_missing_or_wrong_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        hf.load_hf_causal_lm(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        hf.load_hf_causal_lm(tmp_path / "empty")
    with pytest.raises(UserError, match="does not exist"):
        hf.gpt_from_hf_export(tmp_path / "nope")


def test_load_a_real_transformers_gpt2(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=300, n_positions=64)
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(tmp_path / "gpt2")
    loaded = hf.load_hf_causal_lm(tmp_path / "gpt2")
    assert type(loaded).__name__ == "GPT2LMHeadModel" and not loaded.training
    x = torch.randint(0, 300, (2, 16))
    with torch.no_grad():
        assert torch.allclose(loaded(x).logits, reference(x).logits, atol=1e-5)
    with pytest.raises(UserError, match="not a contextlab export"):
        hf.gpt_from_hf_export(tmp_path / "gpt2")


def test_registration_is_idempotent():
    hf.register_with_transformers()
    hf.register_with_transformers()
    config = transformers.AutoConfig.for_model("contextlab-gpt", n_layer=1, n_embd=32, n_head=2)
    model = transformers.AutoModelForCausalLM.from_config(config)
    assert model.gpt.config.n_layer == 1 and config.hidden_size == 32


def test_hf_configs_take_fields_and_defaults_from_the_model_configs():
    from contextlab.models.contextlm import ContextLMConfig

    assert hf.ContextlabGPTConfig().to_gpt_config() == GPTConfig()
    assert hf.ContextlabContextLMConfig().to_arch_config() == ContextLMConfig()
    cfg = ContextLMConfig(vocab_size=70, n_layer=3, chunk_size=8, encoder_layers=1, fusion="plain")
    assert hf.ContextlabContextLMConfig.from_gpt_config(cfg).to_arch_config() == cfg


def test_importing_hf_registers_both_types_without_the_export_module():
    """models/hf does not import models/hf/export.py (no import circle); it registers both types."""
    code = (
        "import sys, transformers, contextlab.models.hf\n"
        "assert 'contextlab.models.hf.export' not in sys.modules\n"
        "for t in ('contextlab-gpt', 'contextlab-contextlm'):\n"
        "    print(type(transformers.AutoConfig.for_model(t)).__name__)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["ContextlabGPTConfig", "ContextlabContextLMConfig"]


def test_an_export_from_before_the_context_rename_still_loads(tmp_path):
    """Exports written before GPTConfig.block_size became GPTConfig.context say block_size."""
    model = tiny()
    out = hf.export_to_hf(model, tmp_path / "old")
    config = json.loads((out / "config.json").read_text())
    config["block_size"] = config.pop("context")
    (out / "config.json").write_text(json.dumps(config))
    assert hf.gpt_from_hf_export(out).config == model.config
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert loaded.config.context == loaded.config.max_position_embeddings == 32
    with torch.no_grad():
        assert torch.allclose(loaded(ids(1, 20)).logits, model(ids(1, 20)).logits, atol=1e-5)


def test_a_model_that_attends_both_ways_or_is_not_a_causal_lm_is_refused_in_one_line(tmp_path):
    """A BERT saved as BertForMaskedLM loaded through AutoModelForCausalLM as BertLMHeadModel, attending
    both ways, and a profile of it ran to the end: every loss it gave was read with the scored tokens in
    view. Now loading tests that no prediction changes with a later token. A T5 (encoder-decoder) said
    only transformers' "Unrecognized configuration class"; now the line says what contextlab reads."""
    from contextlab.models.hf.causal import load_for_training, read_hf_config

    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=300, **small)).save_pretrained(
        tmp_path / "bert"
    )
    for load in (hf.load_hf_causal_lm, lambda p: load_for_training(p, read_hf_config(p))):
        with pytest.raises(
            UserError, match=r"BertForMaskedLM model's prediction at a position changes with a later token"
        ):
            load(tmp_path / "bert")
    decoder = transformers.BertConfig(vocab_size=300, is_decoder=True, **small)
    transformers.BertLMHeadModel(decoder).save_pretrained(tmp_path / "bert-decoder")
    assert type(hf.load_hf_causal_lm(tmp_path / "bert-decoder")).__name__ == "BertLMHeadModel"
    t5 = transformers.T5Config(vocab_size=300, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16)
    transformers.T5ForConditionalGeneration(t5).save_pretrained(tmp_path / "t5")
    with pytest.raises(
        UserError, match=r"no left-to-right language model for T5ForConditionalGeneration; contextlab"
    ):
        hf.load_hf_causal_lm(tmp_path / "t5")
