"""Reading a weights file: every tensor of a safetensors file by name, and the one line for a file
the user may not read.

safetensors reports a file it may not open as missing, and a file a user may not read is not
damaged either: ``check_readable`` opens the files first, so that case is one line saying what to
ask for (``not_permitted``) rather than "missing" or "damaged". Every reader of model weights (a
checkpoint, an export, a Hugging Face folder) goes through here. Trade-off: one extra open per
file, nothing next to reading the weights.
"""

from __future__ import annotations

import os

from torch import Tensor

from contextlab.errors import UserError


def read_safetensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """Every tensor of a safetensors file, by name. A file the user may not read is one line saying so
    (``not_permitted``); anything else raises what safetensors raises. safetensors reports a file it
    may not open as missing (FileNotFoundError), so the file is opened here first."""
    from safetensors.torch import load_file

    check_readable([path])
    return load_file(str(path))


def check_readable(files) -> None:
    """Open each of ``files``: one line (``not_permitted``) for the first one the user may not read."""
    for f in files:
        try:
            with open(f, "rb"):
                pass
        except PermissionError:
            raise not_permitted(f) from None


def not_permitted(path: str | os.PathLike) -> UserError:
    """The line for a file the user may not read: it exists and may be whole, so never "damaged"."""
    return UserError(
        f"permission denied for {path}; ask its owner to make it readable (chmod a+r) or copy the folder "
        "somewhere you can read"
    )
