"""Every option of every command that takes a value and is not required says in its --help what it is
when it is not given: ``(default: ...)`` (or ``[...; default: ...]`` for a config field)."""

from __future__ import annotations

import argparse
import re

import pytest

from contextlab.cli import COMMANDS, main
from contextlab.eval import EVALS as EVAL_REGISTRY

EVALS = list(EVAL_REGISTRY)  # every evaluation's own --help is walked too
# a value with a default says it; one without says it is required or unused
STATES_DEFAULT = re.compile(
    r"\(default|default:|by default|defaults? to|\bempty = |\bnone = |^required: |^not used", re.I
)
# (command, option) whose help need not state a default: the alternatives of a required input (one of
# them must be given) and the overrides of a config (repeatable; nothing is overridden without one)
EXEMPT = {
    ("generate", "--prompt"),
    ("generate", "--prompts"),
    ("generate", "--infill-prefix"),
    ("generate", "--infill-suffix"),
    ("analyze attention", "--data"),
    ("analyze attention", "--text"),
    ("eval", "--data"),  # the overview: each evaluation's own help says what its --data is
}


def _parser(argv: list[str], monkeypatch, capsys) -> argparse.ArgumentParser:
    """The parser that prints ``contextlab ARGV --help``."""
    seen = []
    original = argparse.ArgumentParser.print_help
    monkeypatch.setattr(argparse.ArgumentParser, "print_help", lambda self, file=None: seen.append(self))
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    monkeypatch.setattr(argparse.ArgumentParser, "print_help", original)
    capsys.readouterr()
    return seen[-1]


@pytest.mark.parametrize("argv", [c.split() for c in COMMANDS] + [["eval", e] for e in EVALS], ids=" ".join)
def test_every_optional_value_states_its_default(argv, monkeypatch, capsys):
    p = _parser(argv, monkeypatch, capsys)
    formatter = p._get_formatter()  # ArgumentDefaultsHelpFormatter appends "(default: %(default)s)"
    silent = [
        a.option_strings[-1]
        for a in p._actions
        if a.option_strings
        and a.nargs != 0
        and not a.required
        and a.help != argparse.SUPPRESS
        and a.option_strings[-1] != "--set"
        and (" ".join(argv), a.option_strings[-1]) not in EXEMPT
        and not STATES_DEFAULT.search(formatter._get_help_string(a) or "")
    ]
    assert silent == [], f"contextlab {' '.join(argv)} --help states no default for {silent}"
