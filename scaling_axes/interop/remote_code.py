"""An exported model's remote code: the suite's own files that build it, copied beside its weights with their
imports made relative, so that `trust_remote_code=True` loads it with torch and transformers alone.

Nothing is written twice: the files are the suite's (`hf_config.py` and `hf_modeling.py` as the folder's
`configuration_scaling_axes.py` and `modeling_scaling_axes.py`, the model's architecture file and what it imports
from the suite), each as it is except for its `scaling_axes` imports. `transformers` copies a remote-code folder's
relatively imported files by the pattern `from .name import ...`, one folder deep, so each suite module becomes one
flat file named by its last component, and each import of it `from .name import ...`. transformers 4.x copies only
the files an entry file imports itself, so each entry file also names every other file of the folder in a block that
never runs (`_declared`). A model file reaches what it
must not carry (Triton kernels, the tokenizer's tables, growth) by a "module:name" string resolved when used
(`kernels.fused`, `registry.resolve`), which an export never does.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from scaling_axes.io import SuiteError

PACKAGE = "scaling_axes"
MODELING = "scaling_axes.interop.hf_modeling"
ENTRY = {"scaling_axes.interop.hf_config": "configuration_scaling_axes", MODELING: "modeling_scaling_axes"}
REGISTERS_ALL = "scaling_axes.modules.architectures"  # stands for the one architecture an export carries


def remote_code(architecture: str) -> dict[str, str]:
    """File name -> source of the remote code of a model defined in module `architecture`."""
    stand_in = {REGISTERS_ALL: architecture}
    names: dict[str, str] = {}  # module -> flat file stem
    pending, sources = [MODELING], {}
    while pending:
        module = pending.pop()
        if module in names:
            continue
        names[module] = ENTRY.get(module) or module.rpartition(".")[2]
        sources[module] = _source(module)
        pending += [stand_in.get(m, m) for m in _suite_imports(sources[module], module)]
    clashes = {stem for stem in names.values() if list(names.values()).count(stem) > 1}
    if clashes:
        raise SuiteError(f"remote code would hold two files named {sorted(clashes)}: rename one of the modules")
    files = {
        f"{names[m]}.py": _relative(sources[m], m, {**names, **{k: names[v] for k, v in stand_in.items()}})
        for m in names
    }
    others = sorted(stem for stem in names.values() if stem not in ENTRY.values())
    return {name: text + _declared(others) if name[:-3] in ENTRY.values() else text for name, text in files.items()}


def _declared(stems: list[str]) -> str:
    """Every file of the folder but the entry files named as a relative import, never run: transformers 4.x copies
    into its module cache only the files an entry file imports itself (5.x follows imports on), by these lines'
    pattern. Never the other entry file: a cycle of relative imports loops 4.x before 4.57 forever, before the
    configuration's version check could refuse it."""
    return DECLARATION + "".join(f"    from .{stem} import __name__ as _{stem}\n" for stem in stems)


DECLARATION = (
    "\n\nimport typing\n\nif typing.TYPE_CHECKING:  # transformers 4.x copies only the files an entry file imports\n"
)


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SuiteError(f"remote code: no source for {module}")
    return Path(spec.origin).read_text()


def _suite_import_nodes(source: str, module: str) -> list[ast.ImportFrom]:
    """`source`'s `from scaling_axes... import` statements, at any depth (transformers checks every import a file
    makes); an `import scaling_axes...`, which no relative import can replace, is refused."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names):
            raise SuiteError(f"{module}: `import {node.names[0].name}` cannot be made relative; use `from ... import`")
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == PACKAGE:
            found.append(node)
    return found


def _suite_imports(source: str, module: str) -> list[str]:
    """The suite modules `source` imports: each imported submodule, else the module imported from."""
    found = []
    for node in _suite_import_nodes(source, module):
        submodules = [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
        found += submodules or [node.module]
    return found


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _relative(source: str, module: str, names: dict[str, str]) -> str:
    """`source` with each `from scaling_axes.x import a` as `from .<x's file> import a`; an imported submodule
    `from scaling_axes.x import m` as `from .<m's file> import __name__ as m` (imported for what it registers)."""
    lines = source.splitlines(keepends=True)
    for node in sorted(_suite_import_nodes(source, module), key=lambda n: -n.lineno):  # from the end: lines shift
        indent = " " * node.col_offset
        comment = lines[node.end_lineno - 1].partition("#")[2]
        submodules = [a for a in node.names if f"{node.module}.{a.name}" in names]
        if submodules:
            (alias,) = submodules
            text = (
                f"{indent}from .{names[f'{node.module}.{alias.name}']} import __name__ as {alias.asname or alias.name}"
            )
        else:
            imported = ", ".join(a.name if a.asname is None else f"{a.name} as {a.asname}" for a in node.names)
            text = f"{indent}from .{names[node.module]} import {imported}"
        lines[node.lineno - 1 : node.end_lineno] = [text + (f"  #{comment}" if comment else "\n")]
    return "".join(lines)
