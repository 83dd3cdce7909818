"""Export a trained checkpoint to Hugging Face format (safetensors + config + tokenizer).

A contextlab model becomes a native Llama folder when it has the Llama shape, else a folder
carrying its modeling code (``models/hf/export.py``), with the tokenizer at the folder's root; a
continued Hugging Face model is saved back in its own format (Llama stays Llama) with its
tokenizer files. A contextlab model's exported tokenizer names the special tokens the run's
objective appended (FIM's sentinels) at the ids the model trained with; so do a continued Hugging
Face model's tokenizer files, copied from its source, and when they name such tokens the data's
own tokenizer is kept beside them in ``tokenizer/`` (contextlab identifies the model's tokenizer
by it, so the export still matches the store it was trained on).
The tokenizer comes from the run itself (``contextlab.rundir.find_tokenizer_dir``), never from a
path relative to the current directory. Trade-off: an export without its tokenizer is useless
to whoever receives it, so when none can be found the export is refused with one clear error
rather than written half; only a byte tokenizer, fully described by its spec, is rebuilt.
With ``progress`` a bar (on a terminal only) names the step under way: reading the checkpoint and
building the model, then writing the folder; both are single calls, so the bar moves by step.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from contextlab import rundir
from contextlab.data.store import holds_output_lock
from contextlab.errors import UserError
from contextlab.inference import read_checkpoint
from contextlab.models.archs import HF_ARCH
from contextlab.outputs import refuse_overlap


def _export_inputs(call: dict) -> list:
    return [call["run_or_ckpt"]]  # the checkpoint's run, tokenizer and source: checked once loaded


@holds_output_lock("export folder", inputs=_export_inputs)
def export_checkpoint(
    run_or_ckpt: str | Path,
    out: str | Path,
    *,
    step: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    from contextlab import bars
    from contextlab.rundir import is_hf_folder

    if is_hf_folder(run_or_ckpt):  # it said "has no checkpoints ... train first"
        raise UserError(
            f"{run_or_ckpt} is already a Hugging Face model folder (an export, or a model of its own); "
            "export takes a contextlab run or checkpoint; copy the folder to have another"
        )
    hide = None if progress else True  # None: tqdm shows the bar only when stderr is a terminal
    with bars.bar(total=2, desc="export: read the checkpoint", unit="step", leave=False, disable=hide) as bar:
        ckpt = read_checkpoint(run_or_ckpt, step)
        model = ckpt.build()
        bar.update()
        bar.set_description(f"export: write {out}")
        _export(ckpt, model, run_or_ckpt, out, overwrite)
        bar.update()
    return Path(out)


def _export(ckpt, model, run_or_ckpt: str | Path, out: str | Path, overwrite: bool) -> None:
    """Write the built ``model`` of ``ckpt`` as a Hugging Face folder at ``out`` (module docstring)."""
    from contextlab.models.hf.export import export_arch_to_hf  # GPT, MTP (as its GPT) and ContextLM

    state, path = ckpt.state, ckpt.dir
    prefix, why = ckpt.left_to_right()
    lead = int(
        (state.get("left_to_right") or {}).get("tokenizer_lead", 0)
    )  # the BOS its tokenizer adds itself
    if prefix is None or prefix[lead:]:
        raise UserError(
            f"{run_or_ckpt} is not exported: an export is a causal language model, and this run's "
            f"model is not one as it is ({why or 'it runs left to right only after its mode token'})"
        )
    spec = state.get("tokenizer") or {}
    tokenizer_dir = rundir.find_tokenizer_dir(path, spec)
    init_source = (state.get("init") or {}).get("source") or None
    refuse_overlap(out, [run_or_ckpt, path, rundir.run_of(path), tokenizer_dir, init_source])
    extra = {
        "contextlab_tokenizer": state.get("tokenizer"),
        "contextlab_step": state["step"],
        "contextlab_objective": state.get("objective"),
        "contextlab_run": str(Path(rundir.run_of(path)).resolve()),  # found from any directory
        "contextlab_run_relative": os.path.relpath(Path(rundir.run_of(path)).resolve(), Path(out).resolve()),
        **({"contextlab_lead": "tokenizer"} if lead else {}),  # trained with the BOS its tokenizer adds
    }
    if ckpt.arch == HF_ARCH:  # a continued Hugging Face model goes back to its own format
        from contextlab.models.hf.causal import TOKENIZER_FILES, save_hf

        source = Path((state.get("init") or {}).get("source", ""))
        folders = [source, source / "tokenizer"] + ([tokenizer_dir] if tokenizer_dir else [])
        if not any((f / name).is_file() for f in folders for name in TOKENIZER_FILES):
            raise _no_tokenizer(run_or_ckpt, spec)
        save_hf(
            model,
            out,
            tokenizer_from=folders,
            extra_config=extra,
            overwrite=overwrite,
            added_tokens=objective_tokens(ckpt.objective, spec),
            data_tokenizer=tokenizer_dir,
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_dir = tokenizer_dir or _byte_tokenizer(spec, Path(tmp))
        if tokenizer_dir is None:
            raise _no_tokenizer(run_or_ckpt, spec)
        export_arch_to_hf(
            model,
            out,
            tokenizer_dir=tokenizer_dir,
            extra_config=extra,
            added_tokens=objective_tokens(ckpt.objective, spec),
            overwrite=overwrite,
        )


def objective_tokens(objective: str, spec: dict) -> dict[str, int]:
    """The special tokens objective ``objective`` appended to the tokenizer ``spec`` describes (FIM's
    sentinels), name -> the id training gave it (``models.special_tokens``); {} for none."""
    from contextlab.models.special_tokens import bind_special_tokens
    from contextlab.objectives import OBJECTIVES

    names = getattr(OBJECTIVES.get(objective), "special_tokens", ())
    if not isinstance(names, tuple) or not names or "vocab_size" not in spec:
        return {}  # tokens chosen by options (span, ul2): those runs are not exported
    ids, _ = bind_special_tokens(spec, names)
    return {name: i for name, i in ids.items() if name not in (spec.get("special_tokens") or {})}


def _byte_tokenizer(spec: dict, folder: Path) -> Path | None:
    """A byte tokenizer saved into ``folder`` when ``spec`` describes one exactly, else None."""
    if spec.get("kind") != "byte":
        return None
    from contextlab.data.tokenizers import ByteTokenizer

    tok = ByteTokenizer(spec.get("special_tokens") or None)
    if tok.hash != spec.get("hash"):
        return None
    tok.save(folder / "tokenizer")
    return folder / "tokenizer"


def _no_tokenizer(run: str | Path, spec: dict) -> UserError:
    return UserError(
        f"cannot find the tokenizer of {run} ({spec.get('name')}, hash {str(spec.get('hash'))[:8]}): "
        "the run has no tokenizer/ folder and its training store is not where its config says; put the "
        "store back (or copy STORE/tokenizer to RUN/tokenizer) and export again"
    )
