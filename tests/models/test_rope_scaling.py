"""RoPE context extension: each method against its published formula on hand-computed values,
against transformers' independent implementation, and inside the GPT."""

import math

import pytest
import torch

from contextlab.errors import UserError
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.rope import (
    METHODS,
    base_inv_freq,
    ntk_base,
    rope_frequencies,
    yarn_attention_scale,
    yarn_boundary,
    yarn_inv_freq,
)


def test_unscaled_frequencies_known_values():
    # d = 8, b = 10^4: θ_j = 10^(-j) for j = 0..3
    assert torch.allclose(base_inv_freq(8, 1e4), torch.tensor([1.0, 1e-1, 1e-2, 1e-3]), rtol=1e-6)


def test_position_interpolation_divides_every_frequency():
    got = METHODS["pi"](8, 1e4, 4.0, 256)
    assert torch.allclose(got, torch.tensor([1.0, 1e-1, 1e-2, 1e-3]) / 4, rtol=1e-6)


def test_ntk_base_and_its_defining_property():
    # b' = b s^(d/(d-2)) = 10^4 * 4^(8/6)
    assert ntk_base(1e4, 4.0, 8) == pytest.approx(1e4 * 4 ** (4 / 3), rel=1e-12)
    got = METHODS["ntk"](8, 1e4, 4.0, 256)
    assert got[0] == pytest.approx(1.0)  # the highest frequency is kept
    assert got[-1] == pytest.approx(1e-3 / 4, rel=1e-5)  # the lowest is divided by exactly s
    assert torch.allclose(
        got, torch.tensor([(1e4 * 4 ** (4 / 3)) ** (-2 * j / 8) for j in range(4)]), rtol=1e-5
    )


def test_yarn_known_values():
    # d = 16, b = 10^4, L = 64, s = 4. Frequency j turns 64 / (2π 10^(j/2)) times over L:
    # more than β = 32 times for no j (boundary -0.99 -> floor -> 0), fewer than α = 1 time from
    # j = 2.02 (ceil -> 3). Ramp over j in [0, 3]: keep γ = 1, 2/3, 1/3, then 0.
    assert yarn_boundary(32, 16, 1e4, 64) == pytest.approx(
        16 * math.log(64 / (64 * math.pi)) / (2 * math.log(1e4))
    )
    assert yarn_boundary(1, 16, 1e4, 64) == pytest.approx(2.0160, abs=1e-4)
    theta = [10 ** (-j / 2) for j in range(8)]
    keep = [1.0, 2 / 3, 1 / 3] + [0.0] * 5
    expected = torch.tensor([t * (g + (1 - g) / 4) for t, g in zip(theta, keep)])
    assert torch.allclose(yarn_inv_freq(16, 1e4, 4.0, 64), expected, rtol=1e-5)
    assert yarn_attention_scale(4.0) == pytest.approx(0.1 * math.log(4) + 1)  # 1.1386
    assert yarn_attention_scale(1.0) == 1.0


@pytest.mark.parametrize("method,hf_type", [("pi", "linear"), ("yarn", "yarn")])
def test_matches_transformers_implementation(method, hf_type):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for head_dim, base, factor, original in [(16, 1e4, 4.0, 64), (64, 5e5, 8.0, 256), (32, 1e4, 2.0, 2048)]:
        hf = LlamaConfig(
            hidden_size=head_dim * 2,
            num_attention_heads=2,
            max_position_embeddings=original * 4,
            rope_parameters={
                "rope_type": hf_type,
                "rope_theta": base,
                "factor": factor,
                "original_max_position_embeddings": original,
            },
        )
        want, want_scale = ROPE_INIT_FUNCTIONS[hf_type](hf, "cpu")
        cfg = GPTConfig(
            n_embd=head_dim * 2,
            n_head=2,
            context=original * int(factor),
            rope_base=base,
            rope_extension=method,
            rope_factor=factor,
            rope_original_context=original,
        )
        got, scale = rope_frequencies(cfg)
        assert torch.allclose(got, want, rtol=1e-6), (head_dim, base, factor)
        assert scale == pytest.approx(want_scale)


def test_ntk_equals_a_base_change_in_transformers():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    hf = LlamaConfig(
        hidden_size=64,
        num_attention_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": ntk_base(1e4, 8.0, 32)},
    )
    want = LlamaRotaryEmbedding(hf).inv_freq  # transformers' default RoPE with the NTK base
    cfg = GPTConfig(n_embd=64, n_head=2, rope_extension="ntk", rope_factor=8.0)
    assert torch.allclose(rope_frequencies(cfg)[0], want, rtol=1e-6)


def test_gpt_position_interpolation_maps_position_s_m_to_m():
    base = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, context=16))
    ext = GPT(
        GPTConfig(
            n_layer=1,
            n_embd=32,
            n_head=2,
            context=64,
            rope_extension="pi",
            rope_factor=4.0,
            rope_original_context=16,
        )
    )
    cos_b, sin_b = base.rope(16)
    cos_e, sin_e = ext.rope(64)
    assert torch.allclose(cos_e[::4], cos_b, atol=1e-6) and torch.allclose(sin_e[::4], sin_b, atol=1e-6)


def test_gpt_yarn_scales_tables_and_explicit_positions_agree():
    cfg = GPTConfig(
        n_layer=1,
        n_embd=32,
        n_head=2,
        context=64,
        rope_extension="yarn",
        rope_factor=4.0,
        rope_original_context=16,
    )
    model = GPT(cfg).eval()
    cos, _ = model.rope(8)
    assert cos[0].abs().max().item() == pytest.approx(
        yarn_attention_scale(4.0), rel=1e-6
    )  # cos 0 = 1, times mscale
    idx = torch.randint(0, 257, (2, 12))
    a = model(idx).logits
    b = model(idx, position_ids=torch.arange(12)).logits  # the uncached path uses the same frequencies
    assert torch.allclose(a, b, atol=1e-5)
    plain = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, context=64))
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain.eval()(idx).logits, a, atol=1e-4)  # the extension changes the model


def test_bad_extension_is_one_clear_error():
    with pytest.raises(UserError, match="RoPE extension 'rope' is unknown"):
        GPTConfig(rope_extension="rope")
    with pytest.raises(UserError, match="factor must be >= 1"):
        GPTConfig(rope_extension="pi", rope_factor=0.5)
