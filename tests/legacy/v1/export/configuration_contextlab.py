"""transformers configs of contextlab's GPT and ContextLM (self-contained: imports transformers only).

The keys are the fields of contextlab's ``GPTConfig`` / ``ContextLMOptions`` with their
defaults, plus HF's standard attribute names mapped onto them. Every class defines
``__init__``: transformers 5 turns a config subclass without one into a dataclass whose
generated ``__init__`` skips these defaults. Trade-off: this file cannot import contextlab, so
the defaults are written twice; a test checks that the two declarations agree.
"""

from transformers import PretrainedConfig

GPT_DEFAULTS = {
    "vocab_size": 257,
    "n_layer": 4,
    "n_head": 4,
    "n_embd": 256,
    "context": 256,
    "rope_base": 10000.0,
    "rope_extension": "none",
    "rope_factor": 1.0,
    "rope_original_context": 0,
    "mlp": "gelu",
    "mlp_ratio": 4.0,
    "mlp_hidden": None,
    "dropout": 0.0,
    "bias": False,
    "norm_eps": 1e-5,
    "init_std": 0.02,
}
CONTEXTLM_DEFAULTS = {"chunk_size": 4, "predictor_layers": 2, "encoder_layers": 0, "fusion": "gated"}
RENAMED = {"block_size": "context"}  # keys of older exports -> current names


class ContextlabGPTConfig(PretrainedConfig):
    """A contextlab GPT's shape; rope_* keys are named so transformers' own rope code never reads them."""

    model_type = "contextlab-gpt"
    defaults = GPT_DEFAULTS
    attribute_map = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "context",
        "tie_embeddings": "tie_word_embeddings",
    }

    def __init__(self, tie_word_embeddings=True, use_cache=True, **kwargs):
        for old, new in RENAMED.items():
            if old in kwargs:
                value = kwargs.pop(old)
                kwargs.setdefault(new, value)
        for name, default in self.defaults.items():
            setattr(self, name, kwargs.pop(name, default))
        self.use_cache = use_cache  # generate keeps a DynamicCache (modeling_contextlab.py)
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


class ContextlabContextLMConfig(ContextlabGPTConfig):
    """The GPT shape plus the ContextLM options (chunk_size, predictor_layers, encoder_layers, fusion)."""

    model_type = "contextlab-contextlm"
    defaults = {**GPT_DEFAULTS, **CONTEXTLM_DEFAULTS}

    def __init__(self, **kwargs):  # transformers 5 replaces a config subclass's missing __init__
        super().__init__(**kwargs)
