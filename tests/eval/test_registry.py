"""The EVALS registry: one record per evaluation, read by the command line, with no import circle."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import contextlab.eval as eval_pkg
from contextlab.cli.eval import cmd_eval
from contextlab.eval import EVALS, Eval


def test_every_record_is_complete():
    assert list(EVALS) == [
        "ppl",
        "contextwise",
        "bayes-fit",
        "niah",
        "kv",
        "mqar",
        "passkey",
        "vartrack",
        "icl",
        "infill",
        "visible",
    ]
    for name, spec in EVALS.items():
        assert isinstance(spec, Eval) and callable(spec.run), name
        assert dataclasses.is_dataclass(spec.options) and spec.options.__module__ == spec.run.__module__, name
        assert spec.help and spec.data and "\n" not in spec.help, name
    assert EVALS["niah"].default_data() and Path(EVALS["niah"].default_data()).is_dir()  # shipped books
    assert all(spec.default_data is None for name, spec in EVALS.items() if name != "niah")


def squeeze(text: str) -> str:
    return "".join(text.split())


def test_the_command_line_reads_help_data_and_options_from_the_registry(capsys):
    with pytest.raises(SystemExit):
        cmd_eval(["--help"])
    text = squeeze(capsys.readouterr().out)  # argparse wraps lines, also at hyphens
    for name, spec in EVALS.items():
        assert squeeze(f"{name} ({spec.help})") in text
    with pytest.raises(SystemExit):
        cmd_eval(["kv", "--help"])
    text = squeeze(capsys.readouterr().out)
    assert squeeze(EVALS["kv"].data) in text
    for f in dataclasses.fields(EVALS["kv"].options):
        assert "--" + f.name.replace("_", "-") in text


def test_no_evaluation_module_imports_the_package_back():
    """The registry imports the evaluation modules; none of them may import ``contextlab.eval``
    itself (``from contextlab.eval import x`` does), or the registry sits in an import circle."""
    root = Path(eval_pkg.__file__).parent
    offenders = []
    for f in sorted(root.rglob("*.py")):
        if f == root / "__init__.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "contextlab.eval":
                offenders.append(f"{f.relative_to(root)}:{node.lineno}")
            if isinstance(node, ast.Import) and any(a.name == "contextlab.eval" for a in node.names):
                offenders.append(f"{f.relative_to(root)}:{node.lineno}")
    assert offenders == []


def test_the_ingest_command_a_message_suggests_quotes_a_tokenizer_path_with_spaces(tmp_path):
    """`--tokenizer dir:/tmp/x/run é 1/tokenizer` split into three words in a shell: the command line a
    message gives to copy quotes it."""
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.errors import UserError
    from contextlab.eval.base import open_store, tokenizer_arg
    from tests.eval.conftest import byte_adapter, tiny_gpt

    run = tmp_path / "run é 1"
    ByteTokenizer().save(run / "tokenizer")
    adapter = byte_adapter(tiny_gpt())
    adapter.info.path = str(run)
    assert tokenizer_arg(adapter) == f"'dir:{run / 'tokenizer'}'"
    with pytest.raises(UserError) as err:
        open_store(None, adapter, "ppl")
    assert f"--tokenizer 'dir:{run}/tokenizer' --out STORE`" in str(err.value)
