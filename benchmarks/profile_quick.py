"""Wall-clock time of ``contextlab profile --budget quick`` on the models of its goal (<= 5 minutes
for a 2 x 128 model on 2 CPU cores).

    python benchmarks/profile_quick.py                      # both models, context 512
    python benchmarks/profile_quick.py --models gpt --context 128 --chars 20000   # a smoke run

Builds, with random weights (the time does not depend on what a model knows): a Hugging Face
Llama folder (2 layers x 128, ``--context`` positions, a byte-level BPE of ``--vocab`` ids trained
on the text) and a contextlab GPT run (2 x 128, byte tokenizer, same context). The held-out text
is the public-domain books shipped with contextlab (``contextlab.corpus.books_dir``), cut to
``--chars`` characters per book. Each model is profiled through the command line in a fresh
folder; the steps' own times and the headline values come from ``profile.json``. Last line: one
JSON object with the seconds per model and per step, whether each stayed within the goal, and each
headline measure with its 95% interval.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SECONDS = 300.0


def make_text(out: Path, chars: int) -> Path:
    from contextlab.corpus import books_dir

    out.mkdir(parents=True)
    for f in sorted(books_dir().glob("*.txt")):
        (out / f.name).write_text(f.read_text(encoding="utf-8")[:chars], encoding="utf-8")
    return out


def make_llama(out: Path, text: Path, context: int, vocab: int) -> Path:
    import shutil
    import tempfile

    import torch
    import transformers

    from contextlab.data.hf_tokenizer import train_bpe

    tok = train_bpe([f.read_text() for f in sorted(text.glob("*.txt"))], vocab)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=False,
    )
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save(tmp)
        shutil.copy(Path(tmp) / "tokenizer.json", out / "tokenizer.json")
    return out


def make_gpt(out: Path, context: int) -> Path:
    import torch

    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.models.gpt import GPT, GPTConfig
    from contextlab.train.checkpoint import write_untrained_run

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=257, n_layer=2, n_head=2, n_embd=128, context=context))
    write_untrained_run(out, model, ByteTokenizer(), note="random weights (benchmarks/profile_quick.py)")
    return out


def profile(model: Path, text: Path, out: Path, threads: int) -> dict:
    args = [sys.executable, "-m", "contextlab", "profile", "--model", str(model), "--data", str(text)]
    args += ["--out", str(out), "--budget", "quick", "--no-progress"] + (
        ["--threads", str(threads)] if threads else []
    )
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    doc = json.loads((out / "profile.json").read_text())
    steps = {s["name"]: s["seconds"] for s in doc["steps"] if s["status"] == "done"}
    label = doc["models"][0]["label"]
    headline = {  # what the profile read: on random weights, chance and a context gain of 0
        r["measure"]: [r["values"][label], r["intervals"].get(label)]
        for r in doc["headline"]
        if label in r["values"]
    }
    return {
        "seconds": round(seconds, 1),
        "within_goal": seconds <= GOAL_SECONDS,
        "estimated_seconds": doc.get("estimated_seconds"),  # said before the battery ran
        "steps_seconds": round(sum(steps.values()), 1),
        "steps": steps,
        "headline": headline,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--models", default="llama,gpt", help="which models: llama (HF folder), gpt (contextlab run)"
    )
    p.add_argument("--context", type=int, default=512, help="positions of both models (default: 512)")
    p.add_argument("--vocab", type=int, default=4000, help="BPE vocabulary of the Llama (default: 4000)")
    p.add_argument(
        "--chars", type=int, default=60_000, help="characters kept of each shipped book (default: 60,000)"
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default (all cores)")
    args = p.parse_args()
    res = {"bench": "profile_quick", "context": args.context, "goal_seconds": GOAL_SECONDS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        text = make_text(root / "text", args.chars)
        for name in args.models.split(","):
            model = make_llama(root / "llama", text, args.context, args.vocab) if name == "llama" else None
            model = model or make_gpt(root / "gpt", args.context)
            res[name] = profile(model, text, root / f"profile-{name}", args.threads)
            r = res[name]
            print(
                f"{name}: {r['seconds']} s (steps {r['steps_seconds']} s, "
                f"estimated {r['estimated_seconds']} s); steps {r['steps']}",
                flush=True,
            )
    print(json.dumps(res))


if __name__ == "__main__":
    main()
