"""Model FLOPs utilisation (MFU) and the peak FLOP/s to divide by.

The FLOPs per token themselves (6N + attention, nanoGPT's convention, and the extra FLOPs
objectives add) are counted in ``contextlab.models.flops`` and re-exported here.

The peak to divide by is either declared (``train.peak_flops``: a GPU's datasheet number) or
measured with a short matmul loop and cached in a JSON file, since a CPU's real peak depends
on dtype (AMX bf16 is ~8x fp32 on this project's machine) and thread count. Measuring is an
explicit act (``contextlab peak``, ``benchmarks/peak.py``, ``measured_peak_flops``); the
trainer only reads the cache (``cached_peak_flops``) and shows no MFU when it holds nothing
for its device. Trade-off: a fresh machine trains without an MFU until someone measures,
instead of every run silently benchmarking the machine and writing to the home directory.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import time
from pathlib import Path

import torch

from contextlab.errors import UserError
from contextlab.io import atomic_write_json
from contextlab.models.flops import (  # noqa: F401  (re-exported: the counting lives with the models)
    block_flops_per_token,
    block_params,
    extra_flops_per_token,
    flops_per_token,
    lm_head_flops_per_token,
    non_embedding_params,
)

PEAK_FILE_ENV = "CONTEXTLAB_PEAK_FILE"


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float) -> float:  # noqa: F811 (a parameter)
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
    try:
        atomic_write_json(path, {"format_version": 1, "entries": merged})
    except OSError as exc:
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise  # a full disk: the command line's own line says so
        where = exc.filename or path
        if Path(where).parent == path.parent:  # the temporary file beside it: name the folder
            where = path.parent
        what = f"permission denied for {where}" if exc.errno != errno.EROFS else f"{where} is read-only"
        raise UserError(
            f"{what} (writing the peak cache {path}); set {PEAK_FILE_ENV} to a file in a folder you can "
            "write, for `peak` and for `train` alike"
        ) from None


def time_matmul(
    size: int, dtype: torch.dtype, device: str = "cpu", seconds: float = 1.0, min_reps: int = 3
) -> list[float]:
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


def fast_rate(rates: list[float]) -> float:
    """The 90th percentile of repeated matmul rates: noise on a shared machine only slows a matmul
    down, so the median underestimates the hardware; the very best rep can be a one-off outlier."""
    ordered = sorted(rates)
    return ordered[int(0.9 * (len(ordered) - 1))]


def cached_peak_flops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu") -> float:
    """The cached peak matmul FLOP/s for dtype on this device and thread count; 0.0 when none was measured.

    Reads the cache file only: nothing is measured or written.
    """
    cached = read_peak_cache().get(peak_key(dtype, device))
    return float(cached["flops"]) if cached and cached.get("flops", 0) > 0 else 0.0


def measured_peak_flops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu") -> float:
    """Peak matmul FLOP/s for dtype on this machine: from the cache file, else measured (~1 s) and cached.

    On CPU the measurement uses torch's current thread count, which is part of the cache key.
    Callers that know their hardware's declared peak should pass that to ``mfu`` instead.
    """
    return cached_peak_flops(dtype, device) or measure_peak_flops(dtype, device)


def measure_peak_flops(
    dtype: torch.dtype = torch.bfloat16, device: str = "cpu", seconds: float = 1.0
) -> float:
    """Measure the peak matmul FLOP/s for dtype now (about ``seconds``) and merge it into the cache file,
    which keeps the highest measurement of every key. Returns this measurement."""
    key = peak_key(dtype, device)
    size = 8192 if device.startswith("cuda") else 2048  # a GPU needs large products to reach its peak
    flops = fast_rate(time_matmul(size, dtype, device, seconds=seconds))
    write_peak_entries(
        {
            key: {
                "flops": flops,
                "size": size,
                "source": "contextlab.train.flops",
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        }
    )
    return flops
