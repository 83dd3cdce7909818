"""Weights files other users can read, and weights a user may not read said so in one line.

safetensors writes its files with mode 0o600 whatever the umask, so another user of a shared run
or export got "No such file or directory" (safetensors' word for any file it cannot open) and a
line calling the weights damaged. Weights now get the mode every other file gets, and a file a
user may not read is "permission denied for PATH" with the fix.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from contextlab.cli import main
from contextlab.data.tokenizers import load_tokenizer
from contextlab.models import GPT, GPTConfig
from contextlab.train.checkpoint import write_untrained_run
from tests.conftest import REPO


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A run (its one checkpoint) and its export, both written under umask 022."""
    root = tmp_path_factory.mktemp("weights")
    model = GPT(GPTConfig(vocab_size=260, n_layer=1, n_head=2, n_embd=32, context=16))
    old = os.umask(0o022)  # the test's own process: nothing else runs in it meanwhile
    try:
        write_untrained_run(root / "run", model, load_tokenizer("byte"), note="tiny (tests)")
        assert main(["export", str(root / "run"), "--out", str(root / "hf")]) == 0
    finally:
        os.umask(old)
    return root


def test_weights_follow_the_umask_like_every_other_file(written):
    weights = [written / "run" / "checkpoints" / "step_000000" / "model.safetensors"]
    weights.append(written / "hf" / "model.safetensors")
    others = [written / "run" / "checkpoints" / "step_000000" / "state.json", written / "hf" / "config.json"]
    assert {oct(_mode(p)) for p in weights + others} == {oct(0o644)}


CHILD = textwrap.dedent(
    """
    import sys
    from contextlab.cli import main
    from contextlab.errors import UserError
    from contextlab.train.checkpoint import load_checkpoint
    root = sys.argv[1]
    for model in ("hf", "run"):
        main(["generate", "--model", f"{root}/{model}", "--prompt", "ab", "--max-new-tokens", "2"])
    try:
        load_checkpoint(f"{root}/run/checkpoints/step_000000")  # what train reads to resume
    except UserError as exc:
        print(f"contextlab train: error: {exc}", file=sys.stderr)
    """
)


def test_weights_a_user_may_not_read_are_permission_denied_not_damaged(written):
    """As another user (``nobody``, when the tests run as root) or with the files at mode 0 (else)."""
    root = Path(tempfile.mkdtemp(prefix="contextlab-weights-"))  # where another user can reach it
    try:
        for name in ("run", "hf"):
            shutil.copytree(written / name, root / name)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        locked = [root / "hf" / "model.safetensors", root / "run/checkpoints/step_000000/model.safetensors"]
        for path in locked:
            path.chmod(0o600 if os.geteuid() == 0 else 0)
        as_other = (
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        )
        env = {**os.environ, "HOME": str(root), "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
        res = subprocess.run(
            [*as_other, sys.executable, "-c", CHILD, str(root)],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
            timeout=300,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = res.stderr.strip().splitlines()
    assert "Traceback" not in res.stderr and len(lines) == 3, res.stderr[-3000:]
    for line, path in zip(lines, [locked[0], locked[1], locked[1]]):
        assert f"error: permission denied for {path}; " in line and "chmod" in line, line
        assert "damaged" not in line and "earlier" not in line, line
