"""``OUT/profile.json`` (``format = contextlab-profile``), the profile's manifest: the command, the
models, the data, the budget, the context measured, and one record per step (status ``done``,
``failed`` with its error line, ``skipped`` with the reason, or ``pending``), written atomically
after every step.

Trade-off: a profile resumes only into a folder of the same settings (models, data, budget,
context, split): a folder of other settings is refused with what differs, never mixed in, at the
cost of starting over when one setting changes.
"""

from __future__ import annotations

import json
from pathlib import Path

from contextlab.errors import UserError
from contextlab.io import atomic_write_json

PROFILE_FORMAT = "contextlab-profile"
VERSION = 1


def _shown(v) -> str:
    """A manifest setting in a message: numbers with thousands separators, models by label and path."""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, list) and all(isinstance(m, dict) for m in v):
        return ", ".join(str(m.get("path")) for m in v)
    return str(v)


def _started_here(out: Path) -> bool:
    """Whether ``out`` holds nothing, or only what a profile that stopped before its first step leaves:
    ``data/`` with the store it was ingesting and the key-value file (``store-*``, ``kv-*``, and their
    ``.store-*`` lock and temporary names)."""
    entries = list(out.iterdir())
    if any(e.name != "data" or not e.is_dir() for e in entries):
        return False
    return all(e.name.lstrip(".").startswith(("store-", "kv-")) for d in entries for e in d.iterdir())


class Manifest:
    """OUT/profile.json: read, checked against this profile's settings, updated after every step."""

    def __init__(self, out: Path, doc: dict):
        self.out, self.doc = out, doc

    @classmethod
    def open(cls, out: Path, settings: dict) -> Manifest:
        f = out / "profile.json"
        if f.is_file():
            old = json.loads(f.read_text())
            mine = {k: old.get(k) for k in settings}
            if old.get("format") != PROFILE_FORMAT or mine != settings:
                differ = [
                    f"{k} {_shown(old.get(k))} there, {_shown(settings[k])} now"
                    for k in settings
                    if old.get(k) != settings[k]
                ]
                raise UserError(
                    f"{out} holds a profile of other settings ({'; '.join(differ) or 'another format'}); "
                    "give another --out, or remove that folder to start over"
                )
            return cls(out, old)
        if out.exists() and not _started_here(out):
            raise UserError(f"{out} exists and holds no profile; give another --out")
        return cls(out, {"format": PROFILE_FORMAT, "version": VERSION, **settings, "steps": []})

    def record(self, name: str, model: str) -> dict:
        for s in self.doc["steps"]:
            if s["name"] == name and s["model"] == model:
                return s
        s = {
            "name": name,
            "model": model,
            "status": "pending",
            "seconds": None,
            "result": None,
            "error": None,
        }
        self.doc["steps"].append(s)
        return s

    def finished(self, rec: dict) -> bool:
        return rec["status"] == "done" and rec["result"] is not None and (self.out / rec["result"]).is_file()

    def save(self) -> None:
        atomic_write_json(self.out / "profile.json", self.doc)
