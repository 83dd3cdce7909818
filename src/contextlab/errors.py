"""The one exception type a user can cause.

Anything a user can get wrong (a bad path, an unknown config key, a corrupt store, a model
and data with different tokenizers) raises ``UserError`` with one line that names the
problem and the fix. The command line prints that line and exits with code 2; every other
exception is a bug and keeps its traceback.
"""


class UserError(Exception):
    """An error the user can fix; its message is one line naming the problem and the fix."""
