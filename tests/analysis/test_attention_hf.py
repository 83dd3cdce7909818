"""Attention of a model run by transformers: its own eager weights, checked against its default attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contextlab.analysis.attention import Options, run
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.errors import UserError
from contextlab.eval.adapter import ModelAdapter
from contextlab.inference import ModelInfo
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.hf.llama import save_llama
from tests.conftest import shakespeare
from tests.eval.conftest import byte_adapter

TEXT = shakespeare(200)


def gpt_and_its_llama(folder):
    """A SwiGLU GPT (weights scaled so attention is far from uniform) and the same model saved as a native
    Llama folder, loaded back by transformers and run by its Hugging Face backend."""
    import transformers

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=257, n_layer=3, n_head=4, n_embd=64, context=128, mlp="swiglu")).eval()
    with torch.no_grad():
        for p in gpt.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    llama = transformers.LlamaForCausalLM.from_pretrained(save_llama(gpt, folder), local_files_only=True)
    tok = ByteTokenizer()
    info = ModelInfo("llama", "hf", str(folder), "llama", 0, 128, False, tok.spec())
    return byte_adapter(gpt), ModelAdapter(llama, tok, info, batch_size=4)


def test_a_llama_folder_shows_the_attention_its_contextlab_model_shows(tmp_path):
    """Two independent readings of one model's attention: recomputed from q and k in the contextlab GPT,
    and transformers' own eager weights in its Llama export; every measure agrees, and the Llama is left
    attending as it did."""
    ours, theirs = gpt_and_its_llama(tmp_path / "llama")
    before = theirs.model.config._attn_implementation
    a = run(ours, Options(), text=TEXT, progress=False)
    b = run(theirs, Options(), text=TEXT, progress=False)
    ma, mb = a.results["models"]["a"], b.results["models"]["a"]
    assert mb["blocks"]["n_layers"] == 3 and mb["blocks"]["layers_averaged"] == [0, 1, 2]
    for key in ("received", "mass_by_distance", "mean_distance", "entropy"):
        np.testing.assert_allclose(mb["blocks"][key], ma["blocks"][key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert mb["blocks"]["mean_distance_averaged"] > 5  # not the diagonal: there is something to agree on
    assert 0 <= mb["max_abs_diff_vs_model"] < 1e-3 and mb["architecture"] == "LlamaForCausalLM"
    assert theirs.model.config._attn_implementation == before


def test_a_model_whose_attention_returns_no_weights_or_others_than_it_runs_is_refused(tmp_path, monkeypatch):
    import transformers.models.llama.modeling_llama as modeling

    _, theirs = gpt_and_its_llama(tmp_path / "llama")
    attn = theirs.model.model.layers[1].self_attn
    forward = attn.forward
    attn.forward = lambda *a, **k: (forward(*a, **k)[0], None)
    with pytest.raises(
        UserError, match=r"layers\.1\.self_attn \(LlamaAttention\) returns no attention weights"
    ):
        run(theirs, Options(), text=TEXT, progress=False)
    del attn.forward
    eager = modeling.eager_attention_forward

    def other(module, query, *args, **kwargs):  # weights of another scale than the model's attention
        return eager(module, query * 2.0, *args, **kwargs)

    monkeypatch.setattr(modeling, "eager_attention_forward", other)
    with pytest.raises(
        UserError, match="LlamaForCausalLM under eager attention differs from its sdpa attention"
    ):
        run(theirs, Options(), text=TEXT, progress=False)
    assert theirs.model.config._attn_implementation == "sdpa"


def test_a_bf16_checkpoint_is_read_as_it_runs_and_checked_at_its_precision(tmp_path):
    """Most checkpoints people bring are bf16 and are loaded as saved: eager and SDPA then round
    differently (about 1% of the states), which the check allows for bf16 weights alone; the measures
    stay those of the fp32 model to bf16's precision."""
    _, theirs = gpt_and_its_llama(tmp_path / "llama")
    fp32 = run(theirs, Options(), text=TEXT, progress=False).results["models"]["a"]["blocks"]
    theirs.model.to(torch.bfloat16)
    out = run(theirs, Options(), text=TEXT, progress=False).results["models"]["a"]
    assert out["max_abs_diff_vs_model"] > 1e-3  # the two kernels differ at bf16, and it is let through
    np.testing.assert_allclose(out["blocks"]["mass_by_distance"], fp32["mass_by_distance"], atol=2e-2)
    np.testing.assert_allclose(out["blocks"]["mean_distance"], fp32["mean_distance"], rtol=2e-2)
