"""Rotary position embeddings: frequencies with context extension, cos/sin tables, the rotation.

The tables and the rotation follow the half-split convention (GPT-NeoX, LLaMA in HF): each
pair (x[i], x[i + hs/2]) of a head is rotated by position × θ_i. ``rope_tables`` builds the
tables from positions and a model config; ``apply_rope`` rotates q and k with them.

Context extension: a model trained with rotary positions at context L can be run at a longer
context L' = s L by changing only its inverse frequencies θ_j = b^(-2j/d) (j < d/2, d = head
width, b = base):

- ``pi``, position interpolation (Chen et al. 2023): positions m -> m / s, i.e. every
  frequency divided by s. Never leaves the angle range seen in training; squeezes the
  high frequencies that resolve neighbouring tokens as much as the low ones.
- ``ntk``, NTK-aware scaling (bloc97, 2023): a new base b' = b s^(d/(d-2)); the highest
  frequency is unchanged and the lowest is divided by exactly s. Static, not the "dynamic"
  variant that changes with the input length (that one makes logits depend on T).
- ``yarn`` (Peng et al. 2023, "NTK-by-parts" + temperature): frequencies that turn fewer
  than α = 1 times over the original context are interpolated (÷ s), those turning more than
  β = 32 times are kept, a linear ramp in between; q and k are scaled by
  sqrt(1/t) = 0.1 ln s + 1 (so attention logits by its square). The ramp follows the
  authors' reference code (linear over the frequency index between the rounded boundary
  indices), which is also what ``transformers`` implements: a contextlab model and a
  Hugging Face model extended with YaRN use identical frequencies. The paper's text writes
  the ramp as linear in the number of turns r instead; the two differ only inside the
  ramp.
- a base change (CodeLlama, Rozière et al. 2023: b = 10^4 -> 10^6) needs no method here:
  it is a different ``rope_base``.

Trade-off: each method is a pure function of (head width, base, factor, original context)
returning frequencies, computed once per cache in fp32; the model multiplies the cos/sin
tables by ``attention_scale`` instead of touching attention, so the fast SDPA path stays.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

YARN_ALPHA = 1.0  # turns over the original context below which a frequency is fully interpolated
YARN_BETA = 32.0  # turns above which a frequency is kept as it is


def base_inv_freq(head_dim: int, base: float, device=None) -> Tensor:
    """Unscaled RoPE: base^(-2j/head_dim) for j < head_dim/2, fp32 (hs/2,)."""
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return 1.0 / (base**exponents)


def pi_inv_freq(head_dim: int, base: float, factor: float, original_context: int, device=None) -> Tensor:
    """Position interpolation: every frequency divided by the factor."""
    return base_inv_freq(head_dim, base, device) / factor


def ntk_base(base: float, factor: float, head_dim: int) -> float:
    """The NTK-aware base b s^(d/(d-2)): keeps θ_0 and divides θ_(d/2-1) by exactly s."""
    return base * factor ** (head_dim / (head_dim - 2))


def ntk_inv_freq(head_dim: int, base: float, factor: float, original_context: int, device=None) -> Tensor:
    """NTK-aware scaling: unscaled RoPE with the base raised to ``ntk_base``."""
    return base_inv_freq(head_dim, ntk_base(base, factor, head_dim), device)


def yarn_boundary(turns: float, head_dim: int, base: float, original_context: int) -> float:
    """The (fractional) frequency index j whose wavelength fits ``turns`` times into the original context.

    Turns of frequency j over L tokens: L θ_j / 2π = L / (2π b^(2j/d)); solved for j.
    """
    return head_dim * math.log(original_context / (turns * 2 * math.pi)) / (2 * math.log(base))


def yarn_ramp(head_dim: int, base: float, original_context: int, device=None) -> Tensor:
    """γ_j in [0, 1] for each frequency j: 1 = keep (extrapolate), 0 = interpolate; (hs/2,) fp32."""
    half = head_dim // 2
    low = max(math.floor(yarn_boundary(YARN_BETA, head_dim, base, original_context)), 0)
    high = min(math.ceil(yarn_boundary(YARN_ALPHA, head_dim, base, original_context)), head_dim - 1)
    if high == low:
        high += 1e-3  # a step instead of a ramp; avoids 0/0
    j = torch.arange(half, device=device, dtype=torch.float32)
    interpolate = ((j - low) / (high - low)).clamp(0.0, 1.0)  # 0 below `low` (fast), 1 above `high` (slow)
    return 1.0 - interpolate


def yarn_inv_freq(head_dim: int, base: float, factor: float, original_context: int, device=None) -> Tensor:
    """YaRN frequencies: (1 - γ_j) θ_j / s + γ_j θ_j."""
    theta = base_inv_freq(head_dim, base, device)
    keep = yarn_ramp(head_dim, base, original_context, device)
    return theta / factor * (1.0 - keep) + theta * keep


def yarn_attention_scale(factor: float) -> float:
    """YaRN's sqrt(1/t) = 0.1 ln s + 1, applied to q and k (1 for s <= 1)."""
    return 1.0 if factor <= 1.0 else 0.1 * math.log(factor) + 1.0


# method -> inverse-frequency function(head_dim, base, factor, original_context, device)
METHODS = {
    "none": lambda head_dim, base, factor, original_context, device=None: base_inv_freq(
        head_dim, base, device
    ),
    "pi": pi_inv_freq,
    "ntk": ntk_inv_freq,
    "yarn": yarn_inv_freq,
}


def check_extension(method: str, factor: float) -> None:
    """Raise ValueError (turned into a one-line config error by callers) for an unknown method or factor."""
    if method not in METHODS:
        raise ValueError(
            f"RoPE extension {method!r} is unknown; use one of {', '.join(METHODS)} "
            "(a CodeLlama-style base change is just a new rope_base)"
        )
    if not factor >= 1.0:
        raise ValueError(f"RoPE extension factor must be >= 1, got {factor}")


def rope_frequencies(config, device=None) -> tuple[Tensor, float]:
    """(inverse frequencies (hs/2,) fp32, attention scale) of a GPTConfig with its RoPE extension."""
    method = getattr(config, "rope_extension", "none")
    factor = float(getattr(config, "rope_factor", 1.0))
    original = int(getattr(config, "rope_original_context", 0) or config.context)
    inv_freq = METHODS[method](config.head_dim, config.rope_base, factor, original, device)
    scale = yarn_attention_scale(factor) if method == "yarn" else 1.0
    return inv_freq, scale


def rope_tables(positions: Tensor, config) -> tuple[Tensor, Tensor]:
    """cos = [cos, cos] and sin = [-sin, sin] of positions (...,) -> each (..., hs) fp32, for apply_rope.

    With the config's RoPE extension: its frequencies, and the tables times its attention scale.
    """
    inv_freq, scale = rope_frequencies(config, positions.device)
    angles = positions.to(torch.float32)[..., None] * inv_freq  # (..., hs/2)
    cos, sin = angles.cos(), angles.sin()
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
    return (cos * scale, sin * scale) if scale != 1.0 else (cos, sin)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (x[i], x[i + hs/2]) of x (..., hs); cos, sin from rope_tables, broadcast to x.

    x * [cos, cos] + [x2, x1] * [-sin, sin] = [x1 cos - x2 sin, x2 cos + x1 sin]; rolling by
    hs/2 swaps the halves. Three kernels, ~25% faster on CPU than chunk + cat.
    """
    return torch.addcmul(x * cos, x.roll(x.size(-1) // 2, dims=-1), sin)
