"""Hugging Face interop: contextlab models to and from HF folders, and HF models in contextlab.

- ``custom_code.py``: contextlab's own model types (``contextlab-gpt``, ``contextlab-contextlm``),
  registered with ``transformers`` on import; writing them with their modeling code, loading
  them back, loading any local HF causal LM.
- ``remote/``: that modeling code, which imports only torch and transformers (shipped in exports).
- ``llama.py``: a GPT of the Llama shape as a native ``LlamaForCausalLM`` folder, and back.
- ``export.py``: which form each architecture exports to (``contextlab export``).
- ``tokenizer.py``: a contextlab tokenizer as the folder's ``PreTrainedTokenizerFast``.
- ``causal.py``: an HF model continued by contextlab's trainer (and RoPE extension of it).

Importing this package imports ``transformers`` (and registers the model types).
"""

from contextlab.models.hf.custom_code import (
    export_to_hf,
    gpt_from_hf_export,
    is_contextlab_export,
    is_gpt_export,
    load_hf_causal_lm,
    register_with_transformers,
)

__all__ = [
    "export_to_hf",
    "gpt_from_hf_export",
    "is_contextlab_export",
    "is_gpt_export",
    "load_hf_causal_lm",
    "register_with_transformers",
]
