"""FLOPs per token, model FLOPs utilisation (MFU), and the peak FLOP/s to divide by.

Convention (Kaplan et al. 2020 / nanoGPT's ``estimate_mfu``), all per token:

- Every parameter in a matrix multiply costs 2 FLOPs forward and 4 backward: 6N for a
  training step, 2N for a forward pass. N is the non-embedding parameter count (attention
  and MLP weights, biases and norm gains, which are negligible but counted so that N equals
  ``GPT.num_params(non_embedding=True)``) **plus the output layer** ``n_embd * vocab_size``:
  the token-embedding lookup is free, but the logits matmul is not, tied or untied.
  ``vocab_size`` is the real vocabulary, not the padded one: padding is an implementation
  detail and counting it would inflate MFU.
- Attention scores and the weighted sum cost 2 * 2 * n_layer * n_embd * T forward per
  token with T keys; times 3 for training gives nanoGPT's ``12 * n_layer * n_embd * T``.
  With ``causal_attention_discount=True`` it is halved, since a causal token sees T/2 keys
  on average (what flash attention actually computes). The default keeps nanoGPT's number
  so MFU figures compare with published ones.

Objectives that add compute (multi-token-prediction heads, a ContextLM predictor) add their
own per-token FLOPs through a function with the signature of ``extra_flops_per_token``,
built from ``block_flops_per_token`` and ``lm_head_flops_per_token``.

The peak to divide by is either declared by the caller (a GPU's datasheet number) or
measured here with a short matmul loop and cached in a JSON file, since a CPU's real peak
depends on dtype (AMX bf16 is ~8x fp32 on this project's machine) and thread count.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from contextlab.io import atomic_write_json
from contextlab.models.gpt import GPTConfig

PEAK_FILE_ENV = "CONTEXTLAB_PEAK_FILE"


def _flops_per_param(training: bool) -> int:
    return 6 if training else 2  # forward 2 (multiply + add); backward 4 (grads wrt input and weight)


def block_params(cfg: GPTConfig) -> int:
    """Parameters of one transformer Block: qkv, proj, MLP, two norm gains, biases if any."""
    C, H = cfg.n_embd, cfg.mlp_dim
    mlp_out = 2 * H if cfg.mlp == "swiglu" else H  # the first MLP Linear fuses gate and value for swiglu
    weights = C * 3 * C + C * C + C * mlp_out + H * C
    biases = (3 * C + C + mlp_out + C) if cfg.bias else 0
    return weights + biases + 2 * C


def non_embedding_params(cfg: GPTConfig) -> int:
    """Equals GPT(cfg).num_params(non_embedding=True): all blocks plus the final norm gain."""
    return cfg.n_layer * block_params(cfg) + cfg.n_embd


def block_flops_per_token(cfg: GPTConfig, seq_len: int, *, training: bool = True,
                          causal_attention_discount: bool = False) -> float:
    """FLOPs per token of one Block attending over seq_len keys (for objectives adding blocks)."""
    attention = 4 * cfg.n_embd * seq_len * (0.5 if causal_attention_discount else 1.0)
    return _flops_per_param(training) * block_params(cfg) + (3 if training else 1) * attention


def lm_head_flops_per_token(cfg: GPTConfig, *, training: bool = True) -> float:
    """FLOPs per token of one output layer (n_embd x vocab_size matmul)."""
    return _flops_per_param(training) * cfg.n_embd * cfg.vocab_size


def extra_flops_per_token(cfg: GPTConfig, seq_len: int, *, training: bool = True) -> float:
    """The hook for objectives: extra FLOPs per *input* token beyond the plain GPT. This default adds none.

    An objective with more compute writes a function with this signature and passes it as
    ``flops_per_token(..., extra=fn)``. Examples:

    - k extra multi-token-prediction heads, each one Block and one output layer:
      ``k * (block_flops_per_token(cfg, seq_len) + lm_head_flops_per_token(cfg))``
    - a 2-layer ContextLM predictor over chunks of w tokens (one predictor position per w
      tokens, attending over seq_len / w chunks):
      ``2 * block_flops_per_token(cfg, seq_len // w) / w``
    """
    return 0.0


def flops_per_token(cfg: GPTConfig, seq_len: int, *, training: bool = True,
                    causal_attention_discount: bool = False,
                    extra: Callable[..., float] = extra_flops_per_token) -> float:
    """Model FLOPs per token: (6 or 2) * (N_non_embedding + n_embd * vocab) + attention + extra."""
    n = non_embedding_params(cfg) + cfg.n_embd * cfg.vocab_size  # the output layer is a real matmul
    attention = 12 * cfg.n_layer * cfg.n_embd * seq_len  # nanoGPT: 6 * (2 * L * C * T) for training
    if causal_attention_discount:
        attention /= 2
    if not training:
        attention /= 3
    return _flops_per_param(training) * n + attention + extra(cfg, seq_len, training=training)


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over peak FLOP/s (0.4 means 40%)."""
    return tokens_per_s * flops_per_token / peak_flops


# ---------------------------------------------------------------------------------------
# Measured peak


def peak_file() -> Path:
    """Where measured peaks are cached: $CONTEXTLAB_PEAK_FILE or ~/.cache/contextlab/peak.json."""
    env = os.environ.get(PEAK_FILE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "contextlab" / "peak.json"


def _cpu_name() -> str:
    try:  # Linux: the CPU model, so a cache in a shared home directory tells machines apart
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_key(dtype: torch.dtype, device: str = "cpu", threads: int | None = None) -> str:
    """Cache key: the device (CPU model or GPU name), dtype and, on CPU, the thread count."""
    dtype_name = str(dtype).removeprefix("torch.")
    if device.startswith("cuda"):
        return f"cuda:{torch.cuda.get_device_name()}:{dtype_name}"
    threads = threads or torch.get_num_threads()
    return f"cpu:{_cpu_name()}:{dtype_name}:threads={threads}"


def read_peak_cache(path: Path | None = None) -> dict:
    path = path or peak_file()
    try:
        return json.loads(path.read_text()).get("entries", {})
    except (FileNotFoundError, json.JSONDecodeError, AttributeError):
        return {}  # a missing or broken cache is just re-measured


def write_peak_entries(entries: dict, path: Path | None = None) -> None:
    """Merge entries {key: {"flops": ..., ...}} into the cache file (atomic write).

    A key keeps its highest measurement: a busy machine can only lower a peak, so a
    measurement taken under load never replaces a better one. Delete the file to reset.
    """
    path = path or peak_file()
    merged = read_peak_cache(path)
    for key, entry in entries.items():
        if entry["flops"] > merged.get(key, {}).get("flops", 0.0):
            merged[key] = entry
    atomic_write_json(path, {"format_version": 1, "entries": merged})


def time_matmul(size: int, dtype: torch.dtype, device: str = "cpu", seconds: float = 1.0,
                min_reps: int = 3) -> list[float]:
    """FLOP/s of repeated (size x size) @ (size x size) matmuls for about `seconds`; one value per rep."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(2):  # warm-up: thread pool, AMX tile config, cuBLAS handles
        a @ b
    sync()
    rates, start = [], time.perf_counter()
    while len(rates) < min_reps or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        a @ b
        sync()
        rates.append(2 * size**3 / (time.perf_counter() - t))
    return rates


def measured_peak_flops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu") -> float:
    """Peak matmul FLOP/s for dtype on this machine: from the cache file, else measured (~1 s) and cached.

    On CPU the measurement uses torch's current thread count, which is part of the cache key.
    Callers that know their hardware's declared peak should pass that to ``mfu`` instead.
    """
    key = peak_key(dtype, device)
    cached = read_peak_cache().get(key)
    if cached and cached.get("flops", 0) > 0:
        return float(cached["flops"])
    flops = statistics.median(time_matmul(2048, dtype, device))
    write_peak_entries({key: {"flops": flops, "size": 2048, "source": "contextlab.train.flops",
                              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}})
    return flops
