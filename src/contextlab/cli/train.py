"""``contextlab train``, ``contextlab export`` and ``contextlab peak``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import textwrap
from pathlib import Path

from contextlab.config import field_help, from_dict, read_toml
from contextlab.errors import UserError
from contextlab.rundir import STEP_HELP, parse_step


def _config_help() -> str:
    from contextlab.train.config import RunConfig

    lines = ["config keys (TOML tables, or --set SECTION.KEY=VALUE):"]
    for section in dataclasses.fields(RunConfig):
        cls = section.type if isinstance(section.type, type) else section.default_factory().__class__
        for f in dataclasses.fields(cls):
            default = getattr(cls(), f.name)
            text = textwrap.fill(
                field_help(cls, f.name), 96, initial_indent=" " * 6, subsequent_indent=" " * 6
            )
            lines.append(f"  {section.name}.{f.name} = {default!r}\n{text}")
    return "\n".join(lines)


def load_run_config(config: str | None, sets: list[str]):
    """The run config of the TOML file and the ``--set`` overrides. A run on packed data (``data.packed``
    or a ``data.mixture`` packed for one context) that gives no ``train.context`` trains at the context
    the data was packed for (the default, 256, would refuse any other)."""
    from contextlab.data.training import data_context
    from contextlab.train.config import RunConfig, with_overrides

    if config and Path(config).is_dir():  # a run folder or checkpoint: read_toml met a folder
        from contextlab.rundir import CONFIG, is_checkpoint, is_run

        what = "a checkpoint" if is_checkpoint(config) else "a run folder" if is_run(config) else "a folder"
        hint = f"; its config is {Path(config) / CONFIG}" if (Path(config) / CONFIG).is_file() else ""
        raise UserError(
            f"{config} is {what}, and contextlab train takes a config file (TOML){hint}: resume a run with "
            "`contextlab train RUN/config.toml`, or start from a checkpoint's weights with --init-from"
        )
    data = with_overrides(read_toml(config) if config else {}, sets)  # a --set of rows_per_step wins
    cfg = from_dict(RunConfig, data)
    if "context" in (data.get("train") or {}) or not (cfg.data.packed or cfg.data.mixture):
        return cfg
    try:
        context = data_context(cfg.data)
    except UserError:  # a store that is not there, or packings of several contexts: the trainer says so
        return cfg
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, context=context))


def cmd_train(argv: list[str]) -> int:
    """Train (or resume) a model: contextlab train CONFIG.toml [--set key=value ...] [--init-from SOURCE]."""
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab train",
        description=textwrap.fill(
            "Train a model on a token store with a chosen objective. Running the same command again "
            "resumes from the newest checkpoint in train.out_dir. Scale out with: "
            "torchrun --nproc_per_node=N -m contextlab train ...",
            96,
        ),
        epilog=_config_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="a TOML run config (see recipes/)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    p.add_argument(
        "--init-from",
        metavar="SOURCE",
        help=(
            "continue from SOURCE: a contextlab run/checkpoint or a local Hugging Face causal LM folder "
            "(same as --set init.source=SOURCE; extend the context with --set extend.method=pi|ntk|yarn|base;"
            " default: the config's init.source, and without one random weights)"
        ),
    )
    args = p.parse_args(argv)
    from contextlab.train.trainer import train

    sets = args.set + ([f"init.source={json.dumps(args.init_from)}"] if args.init_from else [])
    cfg = load_run_config(args.config, sets)
    if cfg.init.source:
        from contextlab.cli.runtime import quiet_transformers

        quiet_transformers([cfg.init.source], not cfg.train.progress)
    result = train(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    print(done_line(result))
    if hint := next_line(result.run_dir, cfg):
        print(hint)
    return 0


def next_line(run_dir, cfg) -> str | None:
    """The command that measures how a finished left-to-right run uses its context on what it held
    out (``profile --split run``); None where that command would be refused: a model that is no
    causal LM, a context too short for the profile, no held-out part to read, or no single store
    to read it from (a mixture made from several token stores, which needs --data)."""
    import shlex

    from contextlab.data.store import TokenStore
    from contextlab.errors import UserError
    from contextlab.eval.heldout import default_store, documents
    from contextlab.inference.checkpoint import left_to_right
    from contextlab.profile.plan import MIN_CONTEXT
    from contextlab.rundir import STATE, latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    if ckpt is None or cfg.train.context < MIN_CONTEXT:
        return None
    try:
        if left_to_right(json.loads((ckpt / STATE).read_text()))[0] is None:
            return None
        store = default_store(str(run_dir))
        if store is None or not len(documents(TokenStore(store), str(run_dir), "run")[0]):
            return None
    except (OSError, ValueError, UserError):
        return None
    return (
        f"next: contextlab profile --model {shlex.quote(str(run_dir))} --split run   "
        "(how it uses its context, read on what it held out)"
    )


def done_line(result) -> str:
    """The summary of a finished run: its validation loss named for what it is (the objective's own),
    with the next-token loss beside it where that differs (the one loss objectives share)."""
    val = ""
    if result.val_loss is not None:
        val = f", validation {result.loss_name} {result.val_loss:.4f}"
        if result.best_val_loss is not None and result.best_val_loss != result.val_loss:
            val += f" (best {result.best_val_loss:.4f} at step {result.best_step})"
        if result.val_lm_loss is not None and result.val_lm_loss != result.val_loss:
            val += f", next-token validation loss {result.val_lm_loss:.4f}"
    return (
        f"done: {result.run_dir} after {result.steps} steps, {result.tokens:,} tokens, "
        f"train loss {result.final_loss:.4f}{val}"
    )


def cmd_export(argv: list[str]) -> int:
    """Export a checkpoint to a Hugging Face folder that transformers loads without contextlab."""
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab export",
        description=(
            "Write a checkpoint as a Hugging Face model folder (config.json, model.safetensors and the "
            "tokenizer as tokenizer.json, which AutoTokenizer reads) that transformers' "
            "AutoModelForCausalLM.from_pretrained(FOLDER) loads without contextlab installed. A GPT with "
            "the SwiGLU MLP is written as a native Llama (LlamaForCausalLM: no trust_remote_code); a GPT "
            "with another MLP and a ContextLM carry their modeling code in the folder "
            "(from_pretrained(FOLDER, trust_remote_code=True)); an MTP run is exported as its next-token "
            "model (head 1; the extra heads are training-only); a Hugging Face model continued with "
            "contextlab is written back in its own format. contextlab models also keep contextlab's copy "
            "of the tokenizer under FOLDER/tokenizer. A run whose model is not a plain left-to-right "
            "language model (an objective such as mlm or span corruption, or one that needs a mode token "
            "before the text) is refused."
        ),
    )
    p.add_argument("run", help="a run directory or a checkpoint directory")
    p.add_argument("--step", type=parse_step, help=STEP_HELP)
    p.add_argument("--out", required=True, help="the folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar over the export's steps (it shows on a terminal only)",
    )
    args = p.parse_args(argv)
    from transformers.utils import logging as hf_logging

    from contextlab.train.export import export_checkpoint

    hf_logging.disable_progress_bar()  # its "Writing model shards" bar for a one-file folder is noise

    _refuse_store_as_run(args.run)
    out = export_checkpoint(
        args.run, args.out, step=args.step, overwrite=args.overwrite, progress=not args.no_progress
    )
    print(f"exported to {out}")
    return 0


def _refuse_store_as_run(path: str) -> None:
    """One line for a store given to ``export`` (it said "has no checkpoints ...; train first")."""
    from contextlab.data.store_meta import meta_format, what_it_is

    what = what_it_is(path)
    if what:
        packed = meta_format(path) == "contextlab-packed-store"
        rows = "; `contextlab data export` writes its rows for other trainers" if packed else ""
        raise UserError(
            f"{path} is {what}{rows}. `contextlab export` writes a trained run's model: give "
            "a run directory or a checkpoint"
        )


def cmd_peak(argv: list[str]) -> int:
    """Measure this machine's peak matmul FLOP/s once and cache it, so training can print its MFU."""
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab peak",
        description=(
            "Time square matmuls (2048^2 on a CPU, 8192^2 on a GPU) for about --seconds per dtype and merge "
            "the 90th-percentile rate into the peak cache ($CONTEXTLAB_PEAK_FILE or "
            "~/.cache/contextlab/peak.json; a key keeps its highest measurement). Training reads that cache "
            "for its MFU and never measures by itself; train.peak_flops overrides it. Measure on an idle "
            "machine with the thread count you train with."
        ),
    )
    p.add_argument(
        "--device", default="auto", help="auto (cuda when a GPU is visible), cpu or cuda (default: auto)"
    )
    p.add_argument("--dtype", choices=["bf16", "fp32"], action="append", help="repeatable (default: both)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0 = torch's own)")
    p.add_argument("--seconds", type=float, default=1.0, help="time per dtype (default: 1.0)")
    args = p.parse_args(argv)
    import torch

    from contextlab.cli.runtime import check_compute
    from contextlab.train.distributed import pick_device
    from contextlab.train.flops import measure_peak_flops, peak_file, peak_key

    check_compute(args)
    device = pick_device(args.device).type
    for name in args.dtype or ["bf16", "fp32"]:
        dtype = torch.bfloat16 if name == "bf16" else torch.float32
        flops = measure_peak_flops(dtype, device, seconds=args.seconds)
        print(f"{peak_key(dtype, device)}: {flops / 1e9:,.1f} GFLOP/s")
    print(f"cached in {peak_file()}")
    return 0
