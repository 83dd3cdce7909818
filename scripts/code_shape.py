"""The shape of the package's code: function, class and file lengths and import circles.

    python scripts/code_shape.py [--src src/contextlab] [--top 15]

Function length is counted from the ``def`` line (decorators excluded) to the last line of
the body, docstring included, nested functions counted inside their parent and on their
own. Imports are resolved to package modules; an import inside a function counts the same
as one at the top of the file, because a circle hidden in a function is still a circle.
Class length is counted the same way for every class (nested ones on their own too). The
numbers are signals to look at the design (does this file or class do one job?), never a
reason to move code. The last line is one JSON object: p95_function_lines,
max_function_lines, files_over_400, functions_over_60, max_class_lines, import_cycles.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import numpy as np


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function and method."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def classes(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, length) of every class."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                out.append((f"{prefix}{child.name}", child.end_lineno - child.lineno + 1))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def imports(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """Package modules that module ``name`` imports anywhere in its body."""
    found = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src" / "contextlab")
    ap.add_argument("--top", type=int, default=15, help="how many of the longest functions to list")
    args = ap.parse_args()
    files = sorted(args.src.rglob("*.py"))
    trees = {f: ast.parse(f.read_text(), str(f)) for f in files}
    names = {f: module_name(f, args.src) for f in files}
    modules = set(names.values())
    graph = {names[f]: imports(t, names[f], f.name == "__init__.py", modules) for f, t in trees.items()}
    funcs = [(f"{names[f]}:{n}", line, size) for f, t in trees.items() for n, line, size in functions(t)]
    lengths = np.array([s for _, _, s in funcs])
    file_lines = {str(f.relative_to(args.src.parent)): len(f.read_text().splitlines()) for f in files}
    long_files = {k: v for k, v in file_lines.items() if v > 400}
    over_60 = sorted((s, n) for n, _, s in funcs if s > 60)[::-1]
    circles = cycles(graph)
    print(f"{len(files)} files, {sum(file_lines.values())} lines, {len(funcs)} functions")
    print(
        f"function lines: median {np.median(lengths):.0f}, p95 {np.percentile(lengths, 95):.0f}, "
        f"max {lengths.max()}"
    )
    for size, name in sorted(((s, n) for n, _, s in funcs), reverse=True)[: args.top]:
        print(f"  {size:4d}  {name}")
    sized = sorted(
        ((size, f"{names[f]}:{n}") for f, t in trees.items() for n, size in classes(t)), reverse=True
    )
    print("largest classes: " + ", ".join(f"{n} {size}" for size, n in sized[:5]))
    print(f"files over 400 lines: {long_files or 'none'}")
    print(f"import circles: {circles or 'none'}")
    print(
        json.dumps(
            {
                "p95_function_lines": float(np.percentile(lengths, 95)),
                "max_function_lines": int(lengths.max()),
                "files_over_400": len(long_files),
                "functions_over_60": len(over_60),
                "max_class_lines": sized[0][0] if sized else 0,
                "import_cycles": len(circles),
            }
        )
    )


if __name__ == "__main__":
    main()
