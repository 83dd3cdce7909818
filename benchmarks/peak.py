"""Peak matmul throughput (GFLOP/s) in fp32 and bf16, on CPU and CUDA if present.

Square matmuls at a few sizes, the 90th percentile of several timed repetitions per size
(noise on a shared machine only ever slows a matmul down, so a median underestimates the
hardware, while the single best repetition can be a one-off); the best size is the peak.
The result is written to the cache that ``contextlab.train.flops`` reads for
MFU (~/.cache/contextlab/peak.json or $CONTEXTLAB_PEAK_FILE), keyed by device, dtype and
CPU thread count. The last line printed is one JSON object.

    python benchmarks/peak.py [--threads N] [--sizes 1024 2048 4096] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from contextlab.train.flops import fast_rate, peak_file, peak_key, time_matmul, write_peak_entries

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096], help="matrix sizes")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per (size, dtype) cell")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{'device':<6} {'dtype':<5} {'size':>6} {'GFLOP/s':>10}")
    best: dict[tuple[str, str], tuple[float, int]] = {}
    for device in devices:
        for name, dtype in DTYPES.items():
            for size in args.sizes:
                rates = time_matmul(size, dtype, device, seconds=args.seconds, min_reps=5)
                gflops = fast_rate(rates) / 1e9
                print(f"{device:<6} {name:<5} {size:>6} {gflops:>10.1f}")
                if gflops > best.get((device, name), (0.0, 0))[0]:
                    best[(device, name)] = (gflops, size)

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    write_peak_entries(
        {
            peak_key(DTYPES[name], device): {
                "flops": gflops * 1e9,
                "size": size,
                "source": "benchmarks/peak.py",
                "measured_at": stamp,
            }
            for (device, name), (gflops, size) in best.items()
        }
    )
    print(f"wrote {peak_file()}")
    fp32, bf16 = best[("cpu", "fp32")][0], best[("cpu", "bf16")][0]
    result = {
        "bench": "peak",
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "fp32_gflops": round(fp32, 1),
        "bf16_gflops": round(bf16, 1),
        "bf16_over_fp32": round(bf16 / fp32, 2),
    }
    if "cuda" in devices:
        result.update(
            cuda_fp32_gflops=round(best[("cuda", "fp32")][0], 1),
            cuda_bf16_gflops=round(best[("cuda", "bf16")][0], 1),
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
