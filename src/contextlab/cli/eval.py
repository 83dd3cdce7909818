"""``contextlab eval NAME --model PATH [--data ...] [--out DIR] [eval options]``.

One parser per evaluation: the common options (model, data, output, precision, batch)
plus that evaluation's typed options dataclass, so ``contextlab eval niah --help``
documents every knob of the needle test. Several ``--model`` run the same evaluation on
each model; for ``contextwise`` their curves are also drawn on one plot. Every evaluation prints
one line of its resolved settings before its first forward pass and shows a progress bar on a
terminal (``--no-progress``: none); a prompt past the model's context is one warning line on
stderr naming the longest prompt and the option that shortens it. Trade-off: the bars go to
stderr and only on a terminal, so logs and pipes hold the settings line and the results, never
bar redraws. An OUT/NAME.json already there is replaced by a run of the same settings (a
reproduction); one of other options, another model or other data is refused before anything
runs, unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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


def _parser(name: str | None) -> argparse.ArgumentParser:
    from contextlab.eval import EVALS

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
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
    p.add_argument(
        "--data", help=_data_help(EVALS[name]) if name else "the evaluation's data (see NAME --help)"
    )
    p.add_argument(
        "--out",
        help="output folder (default: RUN/eval for a run or any of its checkpoints, FOLDER/eval for a "
        "Hugging Face folder); with several models each writes to its own default unless --out is given, "
        "then to --out/<model folder name>",
    )
    p.add_argument("--step", type=parse_step, help=STEP_HELP)
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=["fp32", "bf16"],
        help="compute precision: bf16 runs the forward in bfloat16 autocast (CPU or CUDA), log-softmax "
        "stays fp32 (default: fp32)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default: 8)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0 = torch's own)")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars: neither the evaluation's (shown on a terminal only) nor transformers' "
        "(while it loads a Hugging Face folder); the settings line is printed either way",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT/NAME.json even when it was written with other options, another model or other "
        "data (without it that is refused; the same settings run again replace it, as a reproduction)",
    )
    if name in (None, "contextwise"):  # the only evaluation that draws several models on one plot
        p.add_argument(
            "--plot",
            metavar="FILE.png",
            help="contextwise only, with several --model: where to write the combined plot of their "
            "curves (default: --out/contextwise_models.png, without --out contextwise_models.png in the "
            "first model's output folder)",
        )
    if name:
        add_dataclass_args(p.add_argument_group(f"{name} options"), EVALS[name].options)
    return p


def _default_out(model: str, args, several: bool) -> Path:
    if args.out:
        return Path(args.out) / Path(model).name if several else Path(args.out)
    from contextlab.rundir import eval_dir

    return eval_dir(model)


def _data_help(spec) -> str:
    """--data's help: what the evaluation reads, said to be required when it has no default and uses it."""
    needed = spec.default_data is None and not spec.makes_data and not spec.data.startswith("not used")
    if needed and "split" in {f.name for f in dataclasses.fields(spec.options)}:
        return f"required: {spec.data}; with --split run, default: the run's own store"
    return f"required: {spec.data}" if needed else spec.data


def _data(name: str, given: str | None, model: str, split: str | None = None, of: str = "") -> str | None:
    """The data the evaluation reads, resolved as ``evaluate`` records it: --data (a relative path that
    is not here but in the folder the run ``model`` was trained in, with the content it trained on, is
    read there: ``trained_store``; one line when it exists nowhere), else with ``--split run`` the store
    the run held out from (``heldout.default_store``; the run ``of`` when given), else the evaluation's
    default data, else None."""
    from contextlab.eval import EVALS
    from contextlab.eval.base import trained_store

    spec = EVALS[name]
    if given and not spec.reads_data:  # it was ignored in silence
        raise UserError(f"{name} reads no --data: its text is built in; leave --data out")
    given = trained_store(given, model) if given else given
    if not given and split == "run":
        from contextlab.eval.heldout import default_store

        given = default_store(of or model)
    if given and not Path(given).exists():
        raise UserError(f"--data {given} not found; {name} reads {spec.data}")
    data = given or (spec.default_data() if spec.default_data is not None else None)
    return str(Path(data).resolve()) if data and Path(data).exists() else data


def _check_depths(options) -> None:
    """Depths are percents of the haystack or filler: 0 (its start) to 100 (its end)."""
    bad = [d for d in getattr(options, "depths", None) or [] if not 0 <= d <= 100]
    if bad:
        raise UserError(
            f"--depths {bad[0]:g} is out of range: a depth is a percent of the text, from 0 (its start) "
            "to 100 (its end)"
        )


def _check_plot(plot: str | None, several: bool) -> None:
    """--plot (contextwise's parser only) draws several models' curves on one plot: one line without them,
    or for a FILE in a run's checkpoints folder."""
    if not plot:
        return
    if not several:
        raise UserError(
            "--plot is the combined plot of several models' contextwise curves: give two or more --model, "
            "or drop --plot (one model's plot is OUT/contextwise.png)"
        )
    from contextlab.outputs import refuse_plot_target

    refuse_plot_target(plot, "--plot")  # a user's --plot replaced a store's tokens.bin and a run's metrics


def _refuse_shared_outs(models: list[str], outs: list[Path], name: str) -> None:
    """Two models whose results would go to one folder (folders of the same name under --out)."""
    seen: dict[Path, str] = {}
    for model, out in zip(models, outs):
        first = seen.setdefault(out.resolve(), model)
        if first != model or models.count(model) > 1:
            raise UserError(
                f"--model {first} and --model {model} would both write {out / f'{name}.json'}; evaluate "
                "them one at a time, each with its own --out"
            )


def cmd_eval(argv: list[str]) -> int:
    """Run an evaluation of how a model uses its context (`contextlab eval --help` lists them)."""
    from contextlab.data.store import output_lock
    from contextlab.eval import EVALS, evaluate, load_model, progress
    from contextlab.eval.results import check_rerun, model_record

    name = next((a for a in argv if a in EVALS), None)  # None: argparse prints usage, help or the choices
    args = _parser(name).parse_args(argv)
    name = args.name
    options = dataclass_from_args(EVALS[name].options, args)
    _check_depths(options)
    check_compute(args)
    refuse_data_as_model(args.model)
    data = _data(
        name, args.data, args.model[0], getattr(options, "split", None), getattr(options, "heldout_of", "")
    )
    if data and EVALS[name].check_data is not None:
        EVALS[name].check_data(data)  # before minutes of loading a model
    progress.set_enabled(not args.no_progress)
    quiet_transformers(args.model, args.no_progress)
    several = len(args.model) > 1
    _check_plot(getattr(args, "plot", None), several)
    if args.out:
        from contextlab.outputs import refuse_results_out

        refuse_results_out(args.out)  # before minutes of evaluation, not at the write
    outs = [_default_out(m, args, several) for m in args.model]
    from contextlab.outputs import refuse_unwritable

    for out_dir in outs:  # a model in a read-only folder: before minutes of loading and evaluating it
        refuse_unwritable(out_dir, given=bool(args.out))
    if data and (Path(data) / "meta.json").is_file():  # a token store: results inside it would mix with it
        from contextlab.outputs import refuse_overlap

        for out_dir in outs:
            refuse_overlap(out_dir, [data])
    _refuse_shared_outs(args.model, outs, name)
    rerun = dict(options=options, data=data, overwrite=args.overwrite, name=name)
    for out_dir in outs:  # before any model runs: a result of other settings is not replaced unasked
        check_rerun(out_dir / f"{name}.json", model={"dtype": args.dtype}, **rerun)
    written = []
    for model_path, out_dir in zip(args.model, outs):
        adapter = load_model(
            model_path, dtype=args.dtype, batch_size=args.batch_size, device=args.device, step=args.step
        )
        check_rerun(out_dir / f"{name}.json", model=model_record(adapter), **rerun)  # its path and step
        lock = output_lock(out_dir, "evaluation folder")  # one writer at a time
        with lock, warnings_as_lines("eval"):
            path, out = evaluate(name, adapter, options, data, out_dir)
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
        from contextlab.outputs import refuse_plot_target

        refuse_plot_target(plot, "--plot")  # the default's place too: a file of the user's is kept
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
