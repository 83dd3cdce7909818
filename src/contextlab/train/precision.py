"""Which precision a run trains in: ``train.dtype = "auto"`` picks bf16 only where it is fast.

bf16 autocast pays only on hardware that multiplies bf16 natively: a CUDA GPU that supports it, or
a CPU with AMX or AVX512-BF16 (measured on such a 2-core machine: 2,200 bf16 GFLOP/s against 270 in
fp32, a tiny GPT's steps 1.9x faster). Elsewhere PyTorch emulates bf16 matmuls on the CPU, and
they are far slower than fp32 (measured on an AVX2-only AMD EPYC: 0.7 against 32 GFLOP/s per
thread; a 2 x 128 GPT trained at 500 tokens/s in bf16 against 4,900 in fp32). So "auto" takes
bf16 there and fp32 everywhere else; "bf16" and "fp32" are taken as given.

A resumed run keeps the precision it trained in: "auto" reads the one its newest checkpoint
recorded, so a run moved to other hardware never changes its numerics half way.

Trade-off: the CPU is judged by its instruction-set flags (Linux's /proc/cpuinfo), not by a
benchmark (training never benchmarks by itself); an ARM CPU, or any other whose flags are not
read, trains in fp32 under "auto" until a user sets bf16.
"""

from __future__ import annotations

from pathlib import Path

import torch

from contextlab.errors import UserError

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 instruction sets that multiply bf16 natively


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU multiplies bf16 natively (AMX or AVX512-BF16 in /proc/cpuinfo's flags)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return any(f in flags for f in NATIVE_BF16_FLAGS)


def auto_dtype(device: torch.device) -> str:
    """ "bf16" where ``device`` computes it natively, else "fp32" (module docstring)."""
    if device.type == "cuda":  # natively: a V100 or T4 only emulates bf16 (torch's default counts that)
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # a torch without the argument counted native support only
            native = torch.cuda.is_bf16_supported()
        return "bf16" if native else "fp32"
    if device.type == "cpu":
        return "bf16" if cpu_has_native_bf16() else "fp32"
    return "fp32"


def resolve_dtype(asked: str, device: torch.device, recorded: str | None = None) -> str:
    """The precision a run trains in: ``asked`` unless "auto"; then the one its checkpoints
    ``recorded`` (a resumed run), else ``auto_dtype``."""
    if asked != "auto":
        return asked
    if recorded in ("bf16", "fp32"):
        return recorded
    return auto_dtype(device)


def recorded_dtype(run_dir) -> str | None:
    """The precision the newest checkpoint of ``run_dir`` trained in (its state's ``dtype``, else its
    config's ``train.dtype`` as runs before "auto" wrote it); None without a checkpoint."""
    from contextlab.rundir import latest_checkpoint, read_checkpoint_state, read_config

    try:
        latest = latest_checkpoint(run_dir)
        if latest is None:
            return None
        state = read_checkpoint_state(latest)
        return state.get("dtype") or (read_config(latest).get("train") or {}).get("dtype")
    except (UserError, OSError, ValueError):  # an unreadable checkpoint is named by the resume itself
        return None


def why_auto(dtype: str, device: torch.device, recorded: str | None = None) -> str:
    """How "auto" chose ``dtype`` on ``device`` (``recorded``: the precision its checkpoints trained in),
    for the run's first line."""
    if recorded in ("bf16", "fp32"):
        return "auto: kept from its checkpoints"
    if device.type == "cpu":
        return f"auto: this CPU {'has' if cpu_has_native_bf16() else 'has no'} native bf16"
    return "auto"


def slow_bf16_note(dtype: str, asked: str, device: torch.device) -> str | None:
    """A note when a run trains in bf16 on a CPU that only emulates it (set, or kept from its
    checkpoints), with the fix; None otherwise."""
    if dtype != "bf16" or device.type != "cpu" or cpu_has_native_bf16():
        return None
    if asked == "auto":  # kept from its checkpoints: it cannot change half way
        return (
            "note: training in bf16, as its checkpoints did, on a CPU without native bf16 (no AMX or "
            "AVX512-BF16): PyTorch emulates it, often 10x slower than fp32; a new run with train.dtype=auto "
            "trains in fp32 here"
        )
    return (
        "note: training in bf16 (train.dtype asks for it) on a CPU without native bf16 (no AMX or "
        "AVX512-BF16): PyTorch emulates it, often 10x slower than fp32; train.dtype=auto (fp32 here) is "
        "faster"
    )
