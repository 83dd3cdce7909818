"""The tokenizer-spec grammar: what ``--tokenizer`` accepts, parsed and explained in one place.

A spec is ``byte`` or ``KIND:ARG``, one of ``FORMS`` (the plain dict of kinds: the help text,
the error line and the parser all read it)::

    byte          raw bytes (256 ids and an end-of-text token)
    gpt2:DIR      GPT-2's BPE from encoder.json + vocab.bpe in DIR
    hf:PATH       a Hugging Face tokenizer.json, or the folder holding it
    bpe:N         a new byte-level BPE of N ids, trained on the source being ingested
    dir:DIR       a tokenizer saved by contextlab (a store's tokenizer/ folder)
    store:STORE   the tokenizer of the token store STORE (ingest resolves it to dir:STORE/tokenizer)

``parse_spec`` checks the form (and, when asked, that a path exists) and ``bad_spec`` is the one
line every bad spec ends with, naming the problem and listing the forms. Building the tokenizer
is ``tokenizers.load_tokenizer``'s job. Trade-off: the grammar knows paths only as text, so this
module needs no tokenizer library and no store, and anything may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contextlab.errors import UserError

FORMS = {  # kind: the form shown in --help and in the error line
    "byte": "byte",
    "gpt2": "gpt2:DIR",
    "hf": "hf:PATH",
    "bpe": "bpe:N",
    "dir": "dir:DIR (a saved tokenizer)",
    "store": "store:STORE",
}
SPECS_HELP = " | ".join(FORMS.values())
PATH_KINDS = ("gpt2", "hf", "dir", "store")  # the kinds whose argument is a path


@dataclass(frozen=True)
class TokenizerSpec:
    """A parsed spec: ``kind`` (a key of ``FORMS``) and ``arg``, the text after the colon."""

    kind: str
    arg: str = ""

    @property
    def path(self) -> Path | None:
        """The path the spec reads (None for byte and bpe:N)."""
        return Path(self.arg).expanduser() if self.kind in PATH_KINDS else None


def bad_spec(spec: str, problem: str) -> UserError:
    """The one line of a bad spec: what is wrong with it, and the forms there are."""
    return UserError(f"bad tokenizer spec {spec!r}: {problem}; use one of: {SPECS_HELP}")


def spec_problem(spec: str, check_path: bool = False) -> str | None:
    """What is wrong with the form of ``spec`` (None: nothing); ``check_path``: a path it reads
    must exist too (a store is checked when it is opened, with its own message)."""
    kind, _, arg = spec.partition(":")
    if spec == "byte":
        return None
    if kind not in FORMS or kind == "byte":
        return f"unknown kind {kind!r}"
    if not arg:
        return f"{kind} needs an argument after the colon"
    if kind == "bpe" and not arg.isdigit():
        return f"the vocab size {arg!r} is not a positive whole number (e.g. bpe:4096)"
    if check_path and kind in PATH_KINDS and kind != "store" and not Path(arg).expanduser().exists():
        return f"{Path(arg).expanduser()} does not exist"
    return None


def parse_spec(spec: str, check_path: bool = False) -> TokenizerSpec:
    """``spec`` parsed, or ``bad_spec``'s one line (see ``spec_problem``)."""
    problem = spec_problem(spec, check_path)
    if problem is not None:
        raise bad_spec(spec, problem)
    kind, _, arg = spec.partition(":")
    return TokenizerSpec(kind, arg)


def spec_path(spec: str) -> Path | None:
    """The path a spec reads, if it is well formed and reads one (never raises: for callers that
    only want to know which paths a command reads, before the spec is checked)."""
    return parse_spec(spec).path if spec_problem(spec) is None else None
