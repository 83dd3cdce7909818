"""What a run config builds: the model (its shape from [model] and train.context) and the objective.

Trade-off: plain functions over the config, so the trainer, benchmarks and tests build the same
model and objective without a Trainer (which also opens the data and the device).
"""

from __future__ import annotations

from contextlab.config import from_dict, to_dict
from contextlab.errors import UserError
from contextlab.models.gpt import GPT, size_config
from contextlab.objectives import OBJECTIVES
from contextlab.train.config import RunConfig
from contextlab.train.init_from import is_hf


def build_model(cfg: RunConfig, vocab_size: int, arch: str = "gpt", arch_options: dict | None = None) -> GPT:
    """The run's GPT shape, as architecture ``arch`` (see contextlab.models.archs) with its options."""
    from contextlab.models.archs import build_arch

    m = cfg.model
    overrides = {k: v for k, v in (("n_layer", m.n_layer), ("n_head", m.n_head), ("n_embd", m.n_embd)) if v}
    mcfg = size_config(  # raises UserError for an unknown size or a shape that does not fit
        m.size,
        vocab_size,
        cfg.train.context,
        mlp=m.mlp,
        rope_base=m.rope_base,
        dropout=m.dropout,
        **overrides,
    )
    return build_arch(arch, mcfg, **(arch_options or {}))


def build_objective(cfg: RunConfig):
    name = cfg.objective.name
    if name not in OBJECTIVES:
        raise UserError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}")
    cls = OBJECTIVES[name]
    options = from_dict(cls.Options, dict(cfg.objective.options))
    return cls(options, doc_mask=cfg.data.doc_mask)


def model_config(model) -> dict:
    """The model's config as a JSON-safe dict (a GPTConfig, or a Hugging Face config)."""
    if is_hf(model):
        from contextlab.models.hf.causal import config_dict

        return config_dict(model.config)
    return to_dict(model.config)
