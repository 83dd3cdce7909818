"""``contextlab generate --model RUN_OR_HF_DIR --prompt TEXT | --prompts FILE``: text from a model.

A contextlab run or checkpoint decodes with its KV cache (``inference/decode.py``); a Hugging Face
folder (a contextlab export, or any causal LM) with ``transformers``' generate, ``use_cache=True``.
One prompt streams to the terminal as it is generated; many prompts are decoded in batches
(left-padded) and written as JSONL (``--out``, written atomically at the end, or stdout). An
``--out`` already there is replaced only with ``--overwrite`` and only when it holds such rows;
the check comes before the model is loaded.
``--infill-prefix/--infill-suffix`` asks a FIM-trained model for the middle (eval/fim_prompt.py).

Trade-off: prompts become ids in one place (``prompt_ids``) and ids become continuations in
one place (``continuations``), so other prompt formats (infilling) and other decoders
(speculative decoding) are added there without touching the rest.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from contextlab.cli.runtime import (
    DEVICE_HELP,
    check_compute,
    quiet_transformers,
    refuse_data_as_model,
    warnings_as_lines,
)
from contextlab.config import add_dataclass_args, dataclass_from_args
from contextlab.errors import UserError
from contextlab.rundir import STEP_HELP, parse_step

ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def stop_text(text: str) -> str:
    """--stop's TEXT with \\n, \\t and \\\\ read as a newline, a tab and one backslash (a shell passes
    "\\n" on as two characters); any other backslash stays as it is."""
    if not text:  # an empty string is found in every text: every continuation would stop at once
        raise argparse.ArgumentTypeError("an empty --stop TEXT would stop every continuation at once")
    return re.sub(r"\\([nt\\])", lambda m: ESCAPES[m.group(1)], text)


def _parser() -> argparse.ArgumentParser:
    from contextlab.eval.adapter import Sampling

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab generate",
        description="Generate text with a contextlab run/checkpoint (KV cache) or a local Hugging Face "
        "model folder (transformers' generate with its cache). Greedy unless --temperature > 0.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="a contextlab run or checkpoint directory, "
        "or a local Hugging Face model folder with its tokenizer",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="one prompt (its continuation streams to the terminal)")
    src.add_argument(
        "--prompts",
        metavar="FILE",
        help='many prompts: a .jsonl file of {"prompt": TEXT} '
        "objects (or JSON strings), or any other text file with one prompt per line",
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate at most (default: 64)")
    p.add_argument(
        "--stop",
        action="append",
        default=[],
        type=stop_text,
        metavar="TEXT",
        help="stop a continuation once its text holds TEXT (cut there); repeatable. \\n, \\t and \\\\ in "
        "TEXT are a newline, a tab and one backslash (--stop '\\n\\n': a blank line). The model's "
        "end-of-text token always stops it (default: only that)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="prompts decoded together (default: 8)")
    p.add_argument(
        "--out",
        metavar="FILE.jsonl",
        help="with --prompts: write {prompt, completion, new_tokens} lines here (default: print them)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --out that exists (only a file of these rows; anything else is refused either way)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar over the batches of --prompts (shown on a terminal only)",
    )
    p.add_argument(
        "--speculative",
        action="store_true",
        help="self-speculative decoding of an MTP run (objective mtp, n_future >= 2): heads 2..n draft, "
        "one forward verifies; greedy only, the same output as plain greedy in fewer forwards",
    )
    p.add_argument("--step", type=parse_step, help=STEP_HELP)
    p.add_argument(
        "--dtype", default="fp32", choices=["fp32", "bf16"], help="compute precision (default: fp32)"
    )
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0 = torch's own)")
    add_dataclass_args(p.add_argument_group("sampling"), Sampling)
    _infill_args(p.add_argument_group("infilling (a model trained with objective fim)"))
    return p


def _infill_args(g) -> None:
    g.add_argument(
        "--infill-prefix",
        metavar="TEXT",
        help="text before the gap; with --infill-suffix (instead of --prompt), a FIM-trained model fills "
        "the middle, prompted in its own sentinels and training layout; greedy",
    )
    g.add_argument("--infill-suffix", metavar="TEXT", help="text after the gap")
    g.add_argument(
        "--infill-mode",
        default="psm",
        choices=["psm", "spm"],
        help="prompt layout: prefix-suffix-middle or suffix-prefix-middle (fim trains both) (default: psm)",
    )


def _infilling(args, sampling) -> bool:
    """Whether this is an infilling request; one line when the flags do not fit together."""
    infill = args.infill_prefix is not None or args.infill_suffix is not None
    given = [args.prompt is not None, args.prompts is not None, infill]
    if sum(given) != 1:
        raise UserError("give one of --prompt TEXT, --prompts FILE, or --infill-prefix with --infill-suffix")
    if infill and (args.infill_prefix is None or args.infill_suffix is None):
        raise UserError("infilling needs both --infill-prefix and --infill-suffix (either may be '')")
    if infill and (sampling.temperature > 0 or args.speculative or args.out):
        raise UserError("infilling is greedy and prints the middle: drop --temperature, --speculative, --out")
    return infill


def _print_infill(adapter, args) -> None:
    from contextlab.eval.fim_prompt import infill
    from contextlab.inference.decode import cut_at_stop

    middle = infill(adapter, args.infill_prefix, args.infill_suffix, args.infill_mode, args.max_new_tokens)
    print(cut_at_stop(middle, args.stop))


def check_out(args) -> None:
    """One line, before any model is loaded, for an --out that cannot be written: the --prompts file, a
    folder, a file in a run's checkpoints folder (training prunes those), or a file already there without
    --overwrite or (with it) not of generate's rows."""
    from contextlab.outputs import refuse_below_file, refuse_in_checkpoints

    if not args.out:
        return
    refuse_in_checkpoints(args.out, file=True)
    refuse_below_file(args.out)  # before generating: the continuations were lost at the write
    out = Path(args.out)
    if args.prompts and out.exists() and out.resolve() == Path(args.prompts).resolve():
        raise UserError(f"--out {out} is the --prompts file; choose another --out")
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; give a file name such as {out / 'generated.jsonl'}")
    if not (out.exists() or out.is_symlink()):
        return
    if not args.overwrite:
        raise UserError(
            f"--out {out} already exists; pass --overwrite to replace it, or choose another --out"
        )
    if not _is_rows(out):
        raise UserError(
            f"--out {out} is not a file of `contextlab generate` rows; --overwrite replaces only those: "
            "choose another --out (it is left as it is)"
        )


def _is_rows(path: Path) -> bool:
    """Whether ``path`` holds what generate writes: {prompt, completion, new_tokens} lines, or nothing."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return False
    return all(isinstance(r, dict) and {"prompt", "completion", "new_tokens"} <= r.keys() for r in rows)


def read_prompts(path: str) -> list[str]:
    """The prompts of a --prompts file (see --help)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"--prompts {p} is a folder; pass a .jsonl or text file with one prompt per line")
    if not p.is_file():
        raise UserError(f"prompts file not found: {p}; pass a .jsonl or text file with one prompt per line")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"--prompts {p} is not UTF-8 text (byte offset {exc.start}); save it as UTF-8 (iconv -t utf-8)"
        ) from None
    every = text.splitlines()
    lines = [line for line in every if line.strip()]
    if not lines:
        raise UserError(f"--prompts {p} holds no prompt (it is empty or blank); write one prompt per line")
    blank = len(every) - len(lines)
    if blank:
        print(f"note: --prompts {p}: {blank} blank line{'s' * (blank != 1)} skipped", file=sys.stderr)
    if p.suffix != ".jsonl":
        return lines
    out = []
    for n, line in enumerate(lines, start=1):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(
                f'{p}:{n} is not JSON ({exc.msg}); write one {{"prompt": TEXT}} per line'
            ) from None
        text = item.get("prompt") if isinstance(item, dict) else item
        if not isinstance(text, str):
            raise UserError(f'{p}:{n} has no "prompt" string; write one {{"prompt": TEXT}} per line')
        out.append(text)
    return out


def prompt_ids(adapter, text: str) -> list[int]:
    """A prompt's token ids (the place for other prompt formats, e.g. infilling)."""
    ids = adapter.encode(text)
    if not ids:
        raise UserError("a prompt is empty; give at least one character")
    if len(ids) > adapter.context:
        raise UserError(
            f"a prompt has {len(ids)} tokens but {adapter.info.id} has a context of {adapter.context}; "
            "shorten the prompt"
        )
    return ids


def continuations(adapter, ids: list[list[int]], args, sampling, on_token=None) -> list[list[int]]:
    """New token ids for a batch of prompt ids (the place for other decoders, e.g. speculative)."""
    return adapter.generate_many(
        ids,
        args.max_new_tokens,
        sampling=sampling,
        stop_strings=args.stop,
        on_token=on_token,
        speculative=args.speculative,
    )


def _note_unused_sampling(sampling) -> None:
    """One note when --top-k, --top-p or --seed are given to greedy decoding (--temperature 0)."""
    given = {"--top-k": sampling.top_k, "--top-p": sampling.top_p < 1, "--seed": sampling.seed is not None}
    unused = [flag for flag, v in given.items() if v]
    if sampling.temperature == 0 and unused:  # they shape sampling, which greedy decoding does not do
        print(
            f"note: {', '.join(unused)} shape{'s' * (len(unused) == 1)} sampling, and --temperature 0 "
            "decodes greedily (the most likely token), so they change nothing; give --temperature > 0 to "
            "sample",
            file=sys.stderr,
        )


def _say_speculative(adapter, args) -> None:
    """With --speculative, one line on stderr of what the drafts gave (it printed nothing of it)."""
    stats = getattr(adapter.backend, "speculative_stats", None)
    if args.speculative and stats is not None:
        print(stats.line(), file=sys.stderr)


class _Terminal:
    """Streams one continuation's text, holding back what could still become a stop string."""

    def __init__(self, decode, stops: list[str]):
        self.decode, self.stops, self.ids, self.shown = decode, stops, [], 0
        self.hold = max((len(s) for s in stops), default=1) - 1

    def text(self) -> str:
        from contextlab.inference.decode import cut_at_stop

        return cut_at_stop(self.decode(self.ids), self.stops)

    def __call__(self, row: int, token: int) -> None:
        self.ids.append(token)
        text = self.text()
        end = len(text) - self.hold
        while end > self.shown and text[end - 1] == "\ufffd":  # a character still being completed
            end -= 1
        self._show(text, end)

    def _show(self, text: str, end: int) -> None:
        if end > self.shown:
            sys.stdout.write(text[self.shown : end])
            sys.stdout.flush()
            self.shown = end

    def finish(self) -> None:
        text = self.text()
        self._show(text, len(text))
        sys.stdout.write("\n")


def cmd_generate(argv: list[str]) -> int:
    """Generate text with a model: KV-cached decoding, sampling, stop strings, batches."""
    from contextlab.eval import load_model, progress
    from contextlab.eval.adapter import Sampling
    from contextlab.inference.decode import cut_at_stop
    from contextlab.io import atomic_write_text

    args = _parser().parse_args(argv)
    sampling = dataclass_from_args(Sampling, args)
    _note_unused_sampling(sampling)
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be 1 or more, got {args.max_new_tokens}")
    check_compute(args)
    refuse_data_as_model([args.model])
    infilling = _infilling(args, sampling)
    check_out(args)
    texts = [] if infilling else [args.prompt] if args.prompt is not None else read_prompts(args.prompts)
    progress.set_enabled(not args.no_progress)
    quiet_transformers([args.model], args.no_progress)
    adapter = load_model(args.model, dtype=args.dtype, device=args.device, step=args.step)
    adapter.require_lm("generate")
    with warnings_as_lines("generate"):
        if infilling:
            _print_infill(adapter, args)
            return 0
        ids = [prompt_ids(adapter, t) for t in texts]
        if args.prompt is not None and not args.out:
            stream = _Terminal(adapter.tokenizer.decode, args.stop)
            continuations(adapter, ids, args, sampling, on_token=stream)
            stream.finish()
            _say_speculative(adapter, args)
            return 0
        rows = []
        for a in progress.bar(range(0, len(ids), args.batch_size), desc="generate", unit="batch"):
            for text, new in zip(
                texts[a : a + args.batch_size],
                continuations(adapter, ids[a : a + args.batch_size], args, sampling),
            ):
                completion = cut_at_stop(adapter.tokenizer.decode(new), args.stop)
                rows.append(json.dumps({"prompt": text, "completion": completion, "new_tokens": len(new)}))
        _say_speculative(adapter, args)
    body = "".join(r + "\n" for r in rows)
    if args.out:
        atomic_write_text(args.out, body)
        print(f"wrote {len(rows)} continuation{'s' * (len(rows) != 1)} to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(body)
    return 0
