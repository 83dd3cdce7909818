"""Every objective of the registry (``objectives.OBJECTIVES``) has a row in docs/objectives.md's table and
is named in README's ``train`` row: the lists cannot fall behind the code again."""

from __future__ import annotations

import re

from contextlab.objectives import OBJECTIVES
from tests.conftest import REPO


def test_the_objectives_table_has_a_row_per_objective():
    doc = (REPO / "docs" / "objectives.md").read_text()
    table = doc.split("## The objectives", 1)[1].split("\n\n", 2)[1]  # the table after the heading
    rows = re.findall(r"^\| `([a-z0-9_]+)` \|", table, re.M)
    assert sorted(rows) == sorted(OBJECTIVES) and len(rows) == len(set(rows))


def test_readme_names_every_objective_in_the_train_row():
    row = next(
        line
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| `contextlab train ")
    )
    listed = re.search(r"with any objective \(([^;)]*)", row).group(1)
    assert sorted(n.strip() for n in listed.split(",")) == sorted(OBJECTIVES)
