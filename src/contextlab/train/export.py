"""Export a trained checkpoint to Hugging Face format (safetensors + config + tokenizer).

A contextlab model becomes a ``contextlab-gpt`` folder (``models/hf.py``); a continued Hugging
Face model is saved back in its own format (Llama stays Llama) with its tokenizer files.
"""

from __future__ import annotations

from pathlib import Path

from contextlab.models.loading import load_trained_model


def export_checkpoint(
    run_or_ckpt: str | Path, out: str | Path, *, step: int | None = None, overwrite: bool = False
) -> Path:
    from contextlab.models.hf_archs import export_arch_to_hf  # GPT, MTP (as its GPT) and ContextLM

    model, state, path = load_trained_model(run_or_ckpt, step)
    run_dir = path.parent.parent
    tokenizer_dir = None
    from contextlab.config import read_toml
    from contextlab.models.loading import training_stores

    for store in training_stores(read_toml(path / "config.toml")):  # data.store, data.packed or data.mixture
        if (Path(store) / "tokenizer").is_dir():
            tokenizer_dir = Path(store) / "tokenizer"
            break
    extra = {
        "contextlab_tokenizer": state.get("tokenizer"),
        "contextlab_step": state["step"],
        "contextlab_objective": state.get("objective"),
        "contextlab_run": str(run_dir),
    }
    if state.get("arch") == "hf":  # a continued Hugging Face model goes back to its own format
        from contextlab.models.hf_causal import save_hf

        source = Path((state.get("init") or {}).get("source", ""))
        folders = [source, source / "tokenizer"] + ([tokenizer_dir] if tokenizer_dir else [])
        save_hf(model, out, tokenizer_from=folders, extra_config=extra, overwrite=overwrite)
        return Path(out)
    export_arch_to_hf(model, out, tokenizer_dir=tokenizer_dir, extra_config=extra, overwrite=overwrite)
    return Path(out)
