"""Every experiment's name and description read from its module's text, without importing it: what `list` prints,
in a process that imports no torch (an experiment's module imports its models). A declaration this cannot read (a
name that is not a string, a description other than a string or the module docstring's first line) makes `listed`
return None, and `list` imports the experiments instead; tests/test_layout.py holds the two to the same lines."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def listed() -> list[tuple[str, str]] | None:
    """(name, description) of every module under `scaling_axes/experiments/` that declares an EXPERIMENT, in name
    order; None where one cannot be read from its text."""
    spec = importlib.util.find_spec("scaling_axes.experiments")
    folders = [Path(folder) for folder in spec.submodule_search_locations or ()]
    found = []
    for path in sorted(p for folder in folders for p in folder.rglob("*.py")):
        tree = ast.parse(path.read_text())
        declaration = next((n.value for n in tree.body if _assigns_experiment(n)), None)
        if declaration is None:
            continue
        read = _read(declaration, tree)
        if read is None:
            return None
        found.append(read)
    return sorted(found)


def _assigns_experiment(node: ast.stmt) -> bool:
    return _assigns(node, "EXPERIMENT")


def _assigns(node: ast.stmt, name: str) -> bool:
    return isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]


def _read(declaration: ast.expr, tree: ast.Module) -> tuple[str, str] | None:
    """The name and description a declaration gives: `Experiment(name=..., description=...)`, a factory taking
    them first (`experiment("name", __doc__, ...)`), or `dataclasses.replace` of such a declaration above it."""
    if not isinstance(declaration, ast.Call):
        return None
    if ast.unparse(declaration.func) == "dataclasses.replace" and isinstance(declaration.args[0], ast.Name):
        source = next((n.value for n in tree.body if _assigns(n, declaration.args[0].id)), None)
        return None if source is None else _read(source, tree)
    keywords = {k.arg: k.value for k in declaration.keywords}
    name = keywords.get("name", declaration.args[0] if declaration.args else None)
    description = keywords.get("description", declaration.args[1] if len(declaration.args) > 1 else None)
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    if isinstance(description, ast.Constant) and isinstance(description.value, str):
        return name.value, description.value
    if description is not None and ast.unparse(description) in ("__doc__", "__doc__.splitlines()[0]"):
        return name.value, (ast.get_docstring(tree, clean=False) or "").splitlines()[0]
    return None
