"""Small CPU copies of the GPU recipes of issue 20 part 3, for a rehearsal of the GPU scripts on a CPU.

    python scripts/gpu/small_copy.py OUT_DIR [--kv KV_FILE]

Writes OUT_DIR/optimal_context.toml, contextlm_vs_gpt.toml and splice_vs_ep.toml: the same recipes with a
2 x 128 model, budgets of seconds, two contexts, the CPU as the device in fp32 (bf16 is emulated, and
many times slower, on a CPU without AMX or AVX512-BF16: the SPLICE study's rehearsal ran out of its time
limit on one), a few evaluation documents (and the key-value file at KV_FILE, default the one the GPU
machine gets). Every edit is a text replacement
that must find its text, so a change to a GPU recipe that a rehearsal no longer covers fails here, loudly.

Trade-off: replacements of the recipe text rather than ``--set`` overrides: the sweeps' grid keys
contain dots (``--set`` cannot change them) and the SPLICE study's driver takes no overrides; the copies
keep every other line of the recipe, which is what a rehearsal is for.
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

EDITS = {
    "optimal_context_gpu.toml": [
        ('size = "tiny-6x384"', 'size = "tiny-2x128"'),
        ("tokens_per_step = 65536", "tokens_per_step = 4096"),
        ('"train.context" = [128, 256, 512, 1024, 2048, 4096]', '"train.context" = [128, 256]'),
        ('"train.max_flops" = [5e14, 1.58e15, 5e15]', '"train.max_flops" = [2e11, 6e11]'),
        ("parallel = 4", "parallel = 1"),
        ('"--max-docs", "0"', '"--max-docs", "6"'),
        ('"--device", "cuda"', '"--device", "cpu"'),
    ],
    "contextlm_vs_gpt_gpu.toml": [
        ('size = "tiny-4x256"', 'size = "tiny-2x128"'),
        ("tokens_per_step = 65536", "tokens_per_step = 4096"),
        ("micro_batch_rows = 32", "micro_batch_rows = 2"),
        ("max_flops = 4e15", "max_flops = 3e11"),
        ('device = "cuda"', 'device = "cpu"'),
        ('"--device", "cuda"', '"--device", "cpu"'),
        ('"--max-docs", "0"', '"--max-docs", "4"'),
        ('"model.n_layer" = [4, 6]', '"model.n_layer" = [2, 4]'),
        ("val_tokens = 262144", "val_tokens = 8192"),
        ("parallel = 3", "parallel = 1"),
        ("val_every = 100", "val_every = 0"),
    ],
    "splice_vs_ep_extension_gpu.toml": [
        ('dir = "runs/splice_vs_ep_extension_gpu"', 'dir = "runs/splice_vs_ep_extension_small"'),
        ('size = "tiny-6x384"', 'size = "tiny-2x128"'),
        (
            "context = 512\ntokens_per_step = 65536\nmax_tokens = 150_000_000",
            "context = 256\ntokens_per_step = 8192\nmax_tokens = 500_000",
        ),
        (
            "context = 4096\ntokens_per_step = 65536\nmax_tokens = 24_000_000",
            "context = 1024\ntokens_per_step = 8192\nmax_tokens = 65_536",
        ),
        ('device = "cuda"', 'device = "cpu"'),
        ("compile = true", "compile = false"),
        ("length = 4096\nmax_docs = 0", "length = 1024\nmax_docs = 8"),
        ("lengths = [512, 1024, 2048, 4000]", "lengths = [256, 1000]"),
        ("samples = 6", "samples = 1"),
        (
            "n_examples = 50\nn_pairs = 40\npositions = [0, 10, 20, 30, 39]",
            "n_examples = 3\nn_pairs = 10\npositions = [0, 9]",
        ),
        ("val_tokens = 262144", "val_tokens = 16384"),
    ],
}
FP32 = [('dtype = "bf16"', 'dtype = "fp32"')]  # every recipe trains (and evaluates) in bf16 on the GPU
EVAL_FP32 = [('"--dtype", "bf16"', '"--dtype", "fp32"')]  # the sweeps' eval_args
for _name in EDITS:
    EDITS[_name] += FP32 + (EVAL_FP32 if "splice" not in _name else [])

NAMES = {
    "optimal_context_gpu.toml": "optimal_context.toml",
    "contextlm_vs_gpt_gpu.toml": "contextlm_vs_gpt.toml",
    "splice_vs_ep_extension_gpu.toml": "splice_vs_ep.toml",
}
KV_GPU = ".gpu/kv-retrieval-75_keys.jsonl.gz"


def small_copy(name: str, kv: str = KV_GPU) -> str:
    """The text of recipes/NAME with every edit of EDITS[NAME] made (each must find its text)."""
    text = (REPO / "recipes" / name).read_text(encoding="utf-8")
    edits = EDITS[name] + ([(f'data = "{KV_GPU}"', f'data = "{kv}"')] if "splice" in name else [])
    for old, new in edits:
        if old not in text:
            raise SystemExit(
                f"error: recipes/{name} no longer contains {old!r}; update scripts/gpu/small_copy.py"
            )
        text = text.replace(old, new)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder for the three small recipes")
    p.add_argument("--kv", default=KV_GPU, help=f"the key-value retrieval file (default {KV_GPU})")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, small in NAMES.items():
        (out / small).write_text(small_copy(name, args.kv), encoding="utf-8")
        print(f"wrote {out / small}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
