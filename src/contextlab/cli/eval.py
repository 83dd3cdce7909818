"""``contextlab eval NAME --model PATH [--data ...] [--out DIR] [eval options]``.

One parser per evaluation: the common options (model, data, output, precision, batch)
plus that evaluation's typed options dataclass, so ``contextlab eval niah --help``
documents every knob of the needle test. Several ``--model`` run the same evaluation on
each model; for ``contextwise`` their curves are also drawn on one plot. Every evaluation prints
one line of its resolved settings before its first forward pass and shows a progress bar on a
terminal (``--no-progress``: none); a prompt past the model's context is one warning line on
stderr naming the longest prompt and the option that shortens it. Trade-off: the bars go to
stderr and only on a terminal, so logs and pipes hold the settings line and the results, never
bar redraws.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from pathlib import Path

from contextlab.config import add_dataclass_args, dataclass_from_args


def _parser(name: str | None) -> argparse.ArgumentParser:
    from contextlab.eval import EVALS

    p = argparse.ArgumentParser(
        prog="contextlab eval" + (f" {name}" if name else ""),
        description=(
            "Evaluate how a model uses its context. Works the same on a contextlab run/checkpoint and on "
            "any local Hugging Face causal LM folder (with tokenizer.json). Prints one line of the resolved "
            "settings (defaults fitted to the model's context), then writes OUT/NAME.json (resolved "
            "options, model, data hash, code version, results) and, for evaluations with a plot (all but "
            "ppl and infill), OUT/NAME.png. Evaluations: "
            + "; ".join(f"{n} ({e.help})" for n, e in EVALS.items())
            + ". Run `contextlab eval NAME --help` for NAME's options."
        ),
    )
    p.add_argument("name", metavar="NAME", choices=list(EVALS), help="the evaluation: " + ", ".join(EVALS))
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="PATH",
        help="a contextlab run or checkpoint directory, or a local Hugging Face model folder "
        "(repeat for several models)",
    )
    p.add_argument("--data", help=EVALS[name].data if name else "the evaluation's data (see NAME --help)")
    p.add_argument(
        "--out",
        help="output folder (default: RUN/eval for a run or any of its checkpoints, FOLDER/eval for a "
        "Hugging Face folder); with several models each writes to its own default unless --out is given, "
        "then to --out/<model folder name>",
    )
    p.add_argument("--step", type=int, help="checkpoint step of a run (default: the newest)")
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=["fp32", "bf16"],
        help="compute precision: bf16 runs the forward in bfloat16 autocast (CPU or CUDA), log-softmax "
        "stays fp32 (default: fp32)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default: 8)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars: neither the evaluation's (shown on a terminal only) nor transformers' "
        "(while it loads a Hugging Face folder); the settings line is printed either way",
    )
    p.add_argument(
        "--plot",
        help="contextwise with several models: where to write the combined plot (default: "
        "--out/contextwise_models.png, without --out contextwise_models.png in the first model's "
        "output folder)",
    )
    if name:
        add_dataclass_args(p.add_argument_group(f"{name} options"), EVALS[name].options)
    return p


def _default_out(model: str, args, several: bool) -> Path:
    if args.out:
        return Path(args.out) / Path(model).name if several else Path(args.out)
    from contextlab.rundir import eval_dir

    return eval_dir(model)


def _quiet_transformers(models: list[str]) -> None:
    """Turn off transformers' own bar ("Loading weights", shown even in logs) when a model is a Hugging
    Face folder; other models never import transformers for it."""
    from contextlab.rundir import is_hf_folder

    if any(is_hf_folder(Path(m)) for m in models):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


@contextlib.contextmanager
def _warnings_as_lines():
    """A ContextLengthWarning shows as one line, ``contextlab eval: warning: ...``, not as the source
    line that raised it (through tqdm, so an open bar stays whole); other warnings as Python shows them."""
    from tqdm.auto import tqdm

    from contextlab.eval.adapter import ContextLengthWarning

    with warnings.catch_warnings():  # restores showwarning on the way out
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, ContextLengthWarning):
                tqdm.write(f"contextlab eval: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


def cmd_eval(argv: list[str]) -> int:
    """Run an evaluation of how a model uses its context (`contextlab eval --help` lists them)."""
    from contextlab.data.store import output_lock
    from contextlab.eval import EVALS, evaluate, load_model, progress

    name = next((a for a in argv if a in EVALS), None)  # None: argparse prints usage, help or the choices
    args = _parser(name).parse_args(argv)
    name = args.name
    options = dataclass_from_args(EVALS[name].options, args)
    progress.set_enabled(not args.no_progress)
    if args.no_progress:
        _quiet_transformers(args.model)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    several = len(args.model) > 1
    if args.out:
        from contextlab.io import refuse_non_folder

        refuse_non_folder(args.out)  # before minutes of evaluation, not at the write
    written = []
    for model_path in args.model:
        adapter = load_model(
            model_path, dtype=args.dtype, batch_size=args.batch_size, device=args.device, step=args.step
        )
        out_dir = _default_out(model_path, args, several)
        with output_lock(out_dir, "evaluation folder"), _warnings_as_lines():  # one writer at a time
            path, out = evaluate(name, adapter, options, args.data, out_dir)
        written.append(path)
        summary = json.dumps(
            _rounded(out.results.get("summary", {})), default=float
        )  # the file keeps all digits
        print(f"{name} {model_path}: {summary}")
        for line in out.results.get("text", []):  # the prompt tasks: accuracy [95% interval] of n, chance
            print(f"  {line}")
        print(f"  wrote {path}" + (f" and {path.with_suffix('.png')}" if out.plot else ""))
    if name == "contextwise" and several:
        from contextlab.eval.contextwise import combined_plot

        plot = (
            Path(args.plot)
            if args.plot
            else (Path(args.out) if args.out else written[0].parent) / "contextwise_models.png"
        )
        combined_plot(written, plot)
        print(f"  combined plot {plot}")
    return 0


def _rounded(v):
    """Floats to 4 significant digits, inside lists and dicts (for the console line only)."""
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rounded(x) for x in v]
    return v
