"""The tokenizer that belongs to a model: by its recorded spec, or a Hugging Face folder's own.

A contextlab model records the spec of the tokenizer it trained with (kind, name, hash); the
tokenizer is rebuilt (byte) or loaded from the first saved folder whose hash matches, so a
wrong tokenizer is never used. A Hugging Face folder carries ``tokenizer.json`` at its root
(or, in older contextlab exports and exports whose objective added tokens, under ``tokenizer/``).
"""

from __future__ import annotations

from pathlib import Path

from contextlab.data.tokenizers import ByteTokenizer, Tokenizer, load_saved_tokenizer
from contextlab.errors import UserError
from contextlab.rundir import TOKENIZER, TOKENIZER_SPEC


def tokenizer_from_spec(spec: dict, folders: list[Path], what: str) -> Tokenizer:
    """The tokenizer a spec describes: rebuilt (byte) or loaded from the first folder whose hash matches."""
    if spec.get("kind") == "byte":
        tok: Tokenizer = ByteTokenizer(spec.get("special_tokens") or None)
        if tok.hash == spec.get("hash"):
            return tok
    for d in folders:
        if (d / TOKENIZER_SPEC).is_file():
            tok = load_saved_tokenizer(d)
            if not spec.get("hash") or tok.hash == spec["hash"]:
                return tok
    raise UserError(
        f"cannot find the tokenizer of {what} ({spec.get('name')}, hash {str(spec.get('hash'))[:8]}); "
        "put the training store back where the run's config says (or copy STORE/tokenizer to RUN/tokenizer)"
    )


def hf_tokenizer_file(folder: Path) -> Path | None:
    """The ``tokenizer.json`` of a Hugging Face model folder (None when it has none). A contextlab
    export of a continued model whose objective added tokens keeps the data's tokenizer, saved by
    contextlab, in ``tokenizer/`` (its root one names the added tokens for ``transformers``): that one."""
    saved = folder / TOKENIZER / "tokenizer.json"
    if saved.is_file() and (folder / TOKENIZER / TOKENIZER_SPEC).is_file():
        return saved
    return next((f for f in (folder / "tokenizer.json", saved) if f.is_file()), None)
