"""Print the negative-control table: every retrieval task on models that cannot use their context.

Builds a byte-level token store of Tiny Shakespeare (the repository's fixture) in a temporary
folder, counts its bigrams into ``BigramLM``, draws a random-init tiny GPT, and scores needle,
key-value, passkey, variable tracking and ICL at ``contextlab.eval.controls.control_options``
(>= 500 samples each, the settings tests/eval/test_negative_control.py asserts on). Each line:
accuracy, its 95% Wilson interval, n, chance 1/k, and the calibrated scores in nats (the true
answer's log-likelihood gain from the evidence, the distractors' gain, and their difference).

    PYTHONPATH=src python scripts/negative_control.py [--models random,bigram] [--seed 0] [--scale 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import controls

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def bigram_model(tmp: Path, context: int) -> torch.nn.Module:
    src = tmp / "text"
    src.mkdir()
    text = (FIXTURES / "tinyshakespeare" / "input.txt").read_text()
    for i in range(8):
        (src / f"part{i}.txt").write_text(text[i * 100_000 : (i + 1) * 100_000])
    store = ingest(src, tmp / "store", IngestConfig(tokenizer="byte"), progress=False).store
    return controls.bigram_from_store(store, context)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="random,bigram", help="comma-separated: random, bigram")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random-init GPT")
    ap.add_argument("--scale", type=float, default=1.0, help="factor on the random GPT's weight matrices")
    ap.add_argument("--layers", type=int, default=1, help="layers of the random GPT")
    ap.add_argument("--width", type=int, default=32, help="embedding width of the random GPT")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = ByteTokenizer()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        data = controls.fixture_data(FIXTURES, tmp)
        for name in args.models.split(","):
            t0 = time.perf_counter()
            if name == "random":
                model = controls.random_gpt(
                    tok.vocab_size, 1024, args.seed, args.scale, args.layers, args.width
                )
            else:
                model = bigram_model(tmp, 1024)
            table = controls.negative_control(controls.control_adapter(model, tok, name), data)
            print(controls.format_table(f"{name} ({time.perf_counter() - t0:.0f} s)", table))


if __name__ == "__main__":
    main()
