"""Print the positive-control table: every retrieval task on models that do read their context.

``CopyLM`` (``contextlab.eval.controls``: the token after the most recent longest earlier match
of the current suffix, with probability 0.9) runs through needle, passkey, key-value (the
paper's question and the key restated as written: ``kv --query restated``), variable tracking
and ICL at >= 500 samples each and prompts of ``--length`` tokens, through the same adapter
and scoring as any checkpoint, with the byte tokenizer and (needle and passkey) with GPT-2's
BPE. Each line:
accuracy, its 95% Wilson interval, n, chance 1/k, and the calibrated scores in nats. The data
are the repository's fixtures (Tiny Shakespeare as the haystack, two lost-in-the-middle
examples, a label-split TREC folder).

Then the written induction GPT (``contextlab.eval.induction_gpt``, with a 1,024-id BPE trained on
Tiny Shakespeare), saved as a run, scored on needle and passkey at each of ``--written-lengths``
through ``evaluate`` (the code path of ``contextlab eval``); ``max_length`` is the longest length
scored >= 0.9. The last line is one JSON object: ``{"copy": {TASK: accuracy, ...}, "copy_gpt2":
{...}, "written": {"niah": ..., "passkey": ..., "max_length": ...}, "mqar": {"pairs_16": ...},
"length": L}`` (written: the accuracies at the longest length; mqar: from ``--mqar-json``).

    PYTHONPATH=src python scripts/positive_control_table.py [--length 2048] [--tokenizers byte,gpt2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import torch

from contextlab.data.tokenizers import ByteTokenizer, load_tokenizer
from contextlab.eval import controls

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
TASKS = ("niah", "passkey", "kv", "kv_recall", "vartrack", "icl")


def gpt2(tmp: Path):
    """GPT-2's BPE from the repository's fixture (encoder.json is kept gzipped there)."""
    folder = tmp / "gpt2"
    folder.mkdir()
    src = FIXTURES / "gpt2_tokenizer"
    (folder / "encoder.json").write_bytes(gzip.decompress((src / "encoder.json.gz").read_bytes()))
    (folder / "vocab.bpe").write_bytes((src / "vocab.bpe").read_bytes())
    return load_tokenizer(f"gpt2:{folder}")


def written_table(
    tmp: Path, lengths: list[int], samples: int, haystack: Path, vocab: int, chars: int
) -> dict:
    """The written induction GPT on needle and passkey at every length: {length: {task: row}}; its BPE
    of ``vocab`` ids is trained on the first ``chars`` characters of ``haystack`` (a file or a folder
    of .txt), which is also the needle's haystack."""
    from contextlab.eval import evaluate, load_model, needle, passkey
    from contextlab.eval.induction_gpt import induction_gpt
    from contextlab.train.checkpoint import write_untrained_run

    files = sorted(haystack.glob("*.txt")) if haystack.is_dir() else [haystack]
    text = "".join(f.read_text(encoding="utf-8") for f in files)[:chars]
    tok = load_tokenizer(f"bpe:{vocab}", texts=lambda: [text])
    run = tmp / "written"
    write_untrained_run(
        run, induction_gpt(tok.vocab_size, context=max(lengths) + 256), tok, note="written induction GPT"
    )
    adapter = load_model(run, batch_size=4)
    out: dict = {}
    for L in lengths:
        for name, module, data in (
            ("niah", needle, haystack),
            ("passkey", passkey, None),
        ):
            o = module.Options(lengths=[L], samples=samples, scoring="likelihood")
            _path, res = evaluate(name, adapter, o, str(data) if data else None, tmp / f"eval_{L}")
            s = res.results["summary"]
            out.setdefault(L, {})[name] = s
            lo, hi = s["likelihood_accuracy_ci95"]
            print(
                f"  written GPT  {name:<8} {L:>6} tokens: {s['likelihood_accuracy']:.3f} "
                f"[{lo:.3f}, {hi:.3f}] of n={s['n']}",
                flush=True,
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--length", type=int, default=2048, help="prompt length in tokens (needle, passkey, vartrack)"
    )
    ap.add_argument("--tokenizers", default="byte,gpt2", help="comma-separated: byte, gpt2")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks: " + ", ".join(TASKS))
    ap.add_argument(
        "--bpe-samples",
        type=int,
        default=4,
        help="haystacks per (length, depth) cell of needle and passkey with the BPE (x 25 prompts each; "
        "a 50,257-id vocabulary makes every prompt ~200x the work of a byte prompt)",
    )
    ap.add_argument(
        "--written-lengths",
        default="1024,2048,4096",
        help="prompt lengths for the written GPT (comma-separated)",
    )
    ap.add_argument("--written-samples", type=int, default=4, help="haystacks per cell for the written GPT")
    ap.add_argument(
        "--written-haystack",
        default=str(FIXTURES / "tinyshakespeare" / "input.txt"),
        help="the written GPT's needle haystack and BPE training text: a file or a folder of .txt "
        "(default: Tiny Shakespeare)",
    )
    ap.add_argument("--written-vocab", type=int, default=1024, help="ids of the written GPT's BPE")
    ap.add_argument(
        "--written-chars", type=int, default=200_000, help="characters of the haystack the BPE is trained on"
    )
    ap.add_argument(
        "--mqar-json",
        help="a file holding the last line of `scripts/mqar_table.py --chain` (the trained positive control, "
        "~20 CPU minutes): its pairs_16/32/64 go into this table's JSON under 'mqar'",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    names = args.tasks.split(",")
    out: dict = {"length": args.length}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        data = controls.fixture_data(FIXTURES, tmp)
        for which in [t for t in args.tokenizers.split(",") if t]:
            tok = ByteTokenizer() if which == "byte" else gpt2(tmp)
            t0 = time.perf_counter()
            model = controls.CopyLM(tok.vocab_size, context=1 << 20)  # a copier has no context limit
            adapter = controls.control_adapter(model, tok, f"copy ({which})")
            options = controls.copy_options(args.length)
            tasks = names
            if which != "byte":  # needle and passkey, at fewer prompts (see --bpe-samples)
                options["niah"].samples = options["passkey"].samples = args.bpe_samples
                tasks = [t for t in names if t in ("niah", "passkey")]
            table = controls.control_table(adapter, data, options, tasks)
            print(
                controls.format_table(f"copy, {which} ({time.perf_counter() - t0:.0f} s)", table), flush=True
            )
            out["copy" if which == "byte" else f"copy_{which}"] = {r["task"]: r["accuracy"] for r in table}
        lengths = [int(x) for x in args.written_lengths.split(",") if x]
        if lengths:
            table = written_table(
                tmp,
                lengths,
                args.written_samples,
                Path(args.written_haystack),
                args.written_vocab,
                args.written_chars,
            )
            good = [L for L in lengths if all(table[L][t]["likelihood_accuracy"] >= 0.9 for t in table[L])]
            longest = table[max(lengths)]
            out["written"] = {t: longest[t]["likelihood_accuracy"] for t in longest}
            out["written"]["max_length"] = max(good) if good else None
    if args.mqar_json:
        trained = json.loads(Path(args.mqar_json).read_text().strip().splitlines()[-1])
        out["mqar"] = {k: v for k, v in trained.items() if k.startswith("pairs_")}
        print("mqar (trained, scripts/mqar_table.py --chain): " + json.dumps(out["mqar"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
