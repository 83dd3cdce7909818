"""Models: the contextlab GPT and Hugging Face interop.

``gpt`` depends on torch only. ``hf`` (export to / load from Hugging Face format) imports
``transformers`` and is therefore not imported here: ``import contextlab.models.hf`` when you
need it (that import also registers the contextlab architecture with ``transformers``).
Model sizes live in the plain dict ``SIZES``.
"""

from contextlab.models.gpt import GPT, SIZES, Block, GPTConfig, GPTOutput, describe_model, size_config

__all__ = ["GPT", "SIZES", "Block", "GPTConfig", "GPTOutput", "describe_model", "size_config"]
