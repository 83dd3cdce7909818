"""The one exception type a user can cause.

Anything a user can get wrong (a bad path, an unknown config key, a corrupt store, a model
and data with different tokenizers) raises ``UserError`` with one line that names the
problem and the fix. The command line prints that line and exits with code 2; every other
exception is a bug and keeps its traceback.
"""


class UserError(Exception):
    """An error the user can fix; its message is one line naming the problem and the fix."""


def some(names: list, show: int = 3) -> str:
    """The first ``show`` of ``names`` for a message line, and how many more: ``a, b, c and 4 more``."""
    more = f" and {len(names) - show} more" if len(names) > show else ""
    return ", ".join(map(str, names[:show])) + more
