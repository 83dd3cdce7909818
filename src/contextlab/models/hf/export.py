"""What each training architecture exports to Hugging Face format, and in which form.

- GPT of the Llama shape (SwiGLU MLP; RMSNorm, RoPE and the rest are always Llama's): a
  native ``LlamaForCausalLM`` folder, no custom code (``models/hf/llama.py``).
- GPT of any other shape (GELU MLP): a ``contextlab-gpt`` folder carrying its modeling code
  and an ``auto_map`` (``models/hf/custom_code.py``, ``models/hf/remote/``).
- MTP: the next-token model (trunk + head 1 + final norm + unembedding) *is* a GPT, exported
  as one of the two above; the extra heads are training-only (the folder records
  ``arch = "mtp"`` and the number of trained heads).
- ContextLM: the predictor feeds every prediction, so the whole model is exported, as a
  ``contextlab-contextlm`` custom-code folder.

The tokenizer goes to the folder's root as a ``PreTrainedTokenizerFast`` (``models/hf/tokenizer.py``),
with the special tokens the run's objective appended (FIM's sentinels) at the ids it trained
them with, and, as contextlab saved it (with its spec and hash), under ``tokenizer/`` for
contextlab's own loaders (which derive those ids from the spec). Trade-off: the export keeps
only what inference uses, so an MTP export cannot resume multi-token training; the training
checkpoint is the place for that.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from contextlab.errors import UserError
from contextlab.models.archs import ARCHS, arch_of
from contextlab.models.hf.custom_code import EXPORT, provenance, write_remote_code_model
from contextlab.models.hf.llama import llama_compatible, save_llama
from contextlab.outputs import staged_dir


def export_arch_to_hf(
    model,
    out_dir: str | os.PathLike,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    extra_config: dict | None = None,
    added_tokens: dict[str, int] | None = None,
    overwrite: bool = False,
) -> Path:
    """Export a GPT, an MTPModel (as its next-token GPT) or a ContextLM as a HF folder (atomically);
    ``added_tokens`` (name -> id) are the special tokens its objective appended to the tokenizer."""
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model shares the parameters
    model, recorded = ARCHS[arch_of(model)].export(model)  # MTP: its next-token GPT
    extra = {**(extra_config or {}), **recorded}
    why_not_llama = llama_compatible(model)
    extra["hf_format"] = "llama" if not why_not_llama else f"custom code ({why_not_llama})"
    if not why_not_llama:  # lets contextlab load the folder back as the GPT it was (models/hf/custom_code.py)
        extra["gpt_config"] = dataclasses.asdict(model.config)
    if tokenizer_dir is not None and not (Path(tokenizer_dir) / "tokenizer_spec.json").is_file():
        raise UserError(
            f"{tokenizer_dir} is not a saved contextlab tokenizer (no tokenizer_spec.json); pass the "
            "tokenizer/ folder of the run or its training store"
        )
    out = Path(out_dir)
    with staged_dir(out, overwrite=overwrite, what="export folder", kind=EXPORT) as tmp:
        special = (
            _save_tokenizer(tokenizer_dir, tmp, model.config.context, added_tokens) if tokenizer_dir else {}
        )
        if why_not_llama:
            write_remote_code_model(model, tmp, extra, **special)
        else:
            save_llama(model, tmp, contextlab=provenance(extra), **special)
        if tokenizer_dir is not None:
            shutil.copytree(tokenizer_dir, tmp / "tokenizer")
    return out


def _save_tokenizer(
    tokenizer_dir, folder: Path, context: int, added: dict[str, int] | None
) -> dict[str, int]:
    from contextlab.models.hf.tokenizer import save_hf_tokenizer

    try:
        return save_hf_tokenizer(Path(tokenizer_dir), folder, context, added)
    except ValueError as exc:
        raise UserError(f"cannot write the export's tokenizer: {exc}") from None
