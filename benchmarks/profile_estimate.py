"""How close ``contextlab profile``'s opening estimate of its time comes to the time its steps take.

    python benchmarks/profile_estimate.py                 # four architectures, contexts 1,024 to 8,192
    python benchmarks/profile_estimate.py --archs gpt2 --chars 20000   # a smoke run

The profile times a few forward passes of the model before the battery (``profile.estimate.measure_rates``)
and turns each step's counted work into seconds (``plan.Step.seconds``). Here Hugging Face models
of four architectures, with random weights (time does not depend on what a model knows), a width
of 64, 2 layers and GPT-2's 50,257-id tokenizer (the repository's fixture), each at its own context,
are profiled with ``--budget quick`` on the books shipped with contextlab (``--chars`` of each), and
the estimate in ``profile.json`` is set against the sum of the steps' own seconds (loading, ingest
and the report come on top of both). The machine is shared, so the ratios vary from run to run.
Last line: one JSON object with each model's context, estimate, steps' seconds and their ratio, and
the largest ratio either way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPT2 = REPO / "tests" / "fixtures" / "gpt2_tokenizer"  # encoder.json.gz + vocab.bpe, as committed
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
ARCHS = {  # name: (config class, model class, fields, context)
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4, n_positions=1024), 1024),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(SHAPE, max_position_embeddings=2048), 2048),
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        dict(SHAPE, num_key_value_heads=2, max_position_embeddings=4096, sliding_window=128),
        4096,
    ),
    "gemma": (
        "GemmaConfig",
        "GemmaForCausalLM",
        dict(SHAPE, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192),
        8192,
    ),
}


def gpt2_tokenizer(folder: Path) -> None:
    """GPT-2's BPE as the tokenizer.json of a Hugging Face folder."""
    from tokenizers import ByteLevelBPETokenizer

    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "encoder.json"
        vocab.write_bytes(gzip.decompress((GPT2 / "encoder.json.gz").read_bytes()))
        ByteLevelBPETokenizer(str(vocab), str(GPT2 / "vocab.bpe")).save(str(folder / "tokenizer.json"))


def make_model(out: Path, arch: str) -> int:
    import torch
    import transformers

    config_class, model_class, fields, context = ARCHS[arch]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(
        vocab_size=50257, bos_token_id=50256, eos_token_id=50256, **fields
    )
    getattr(transformers, model_class)(config).save_pretrained(out)
    gpt2_tokenizer(out)
    return context


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", default=",".join(ARCHS), help=f"which models, of {', '.join(ARCHS)}")
    p.add_argument("--chars", type=int, default=200_000, help="characters kept of each shipped book")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from profile_quick import make_text

    res: dict = {"bench": "profile_estimate", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        text = make_text(root / "text", args.chars)
        for arch in args.archs.split(","):
            context = make_model(root / arch, arch)
            out = root / f"profile-{arch}"
            cmd = [
                sys.executable,
                "-m",
                "contextlab",
                "profile",
                "--model",
                str(root / arch),
                "--data",
                str(text),
            ]
            cmd += ["--out", str(out), "--budget", "quick", "--no-progress"]
            cmd += ["--threads", str(args.threads)] if args.threads else []
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            doc = json.loads((out / "profile.json").read_text())
            steps = sum(s["seconds"] or 0 for s in doc["steps"] if s["status"] == "done")
            row = {
                "context": context,
                "estimated_seconds": doc["estimated_seconds"],
                "steps_seconds": round(steps, 1),
                "steps_over_estimate": round(steps / doc["estimated_seconds"], 2),
            }
            res["models"][arch] = row
            print(
                f"{arch:9s} context {context:5d}: estimated {row['estimated_seconds']:6.1f} s, "
                f"steps took {row['steps_seconds']:6.1f} s (x{row['steps_over_estimate']})",
                flush=True,
            )
    ratios = [r["steps_over_estimate"] for r in res["models"].values()]
    res["largest_factor"] = round(max(max(ratios), 1 / min(ratios)), 2)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
