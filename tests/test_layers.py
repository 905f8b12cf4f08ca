"""The package's layering: one import name, imports that run one way, no cycles, files of readable size."""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scaling_axes"
# lowest first; a module may import its own layer and those before it, never one after. Tokenization is the bottom
# of the data layer, below the models (the Mixture of Tokenizers is defined by a tokenizer's bytes); the training
# tasks and the rest of the data layer are one level: neither imports the other.
LAYERS = (
    ("scaling_axes.io", "scaling_axes.significance"),
    ("scaling_axes.kernels",),
    (
        "scaling_axes.datamodules.byte_slots",
        "scaling_axes.datamodules.byte_vocabulary",
        "scaling_axes.datamodules.tokenizers",
        "scaling_axes.datamodules.token_bytes",
    ),
    ("scaling_axes.modules.registry", "scaling_axes.modules.flops"),
    ("scaling_axes.modules.configs",),  # presets and formulas, with no torch: what plans runs reads
    ("scaling_axes.modules.architectures",),
    ("scaling_axes.modules.growth",),
    ("scaling_axes.modules", "scaling_axes.modules.tasks", "scaling_axes.datamodules"),
    ("scaling_axes.harness",),  # the vocabulary the science speaks: it never imports the Trainer
    ("scaling_axes.harness.training",),  # one run's life
    ("scaling_axes.harness.experiment",),  # one experiment's runs and table
    ("scaling_axes.interop",),
    ("scaling_axes.experiments",),
    ("scaling_axes.benchmarks",),
    ("scaling_axes.cli",),
    ("scaling_axes.__main__",),
)


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module the package installs: its folders are its import names."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts).removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    """Every scaling_axes module `name` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else ".".join([*name.split(".")[: -node.level], node.module])
            out |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return {i for i in out if i.startswith("scaling_axes")}


def _layer(module: str) -> int:
    """The index of the layer whose longest prefix names `module` (-1: the root package's own __init__)."""
    prefixes = [
        (len(p), i) for i, layer in enumerate(LAYERS) for p in layer if module == p or module.startswith(p + ".")
    ]
    return max(prefixes)[1] if prefixes else -1


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {i for i in _imports(name, path) if i in modules and i != name} for name, path in modules.items()}


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in edges.items() for b in targets if _layer(b) > _layer(a))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_imports_run_one_way_without_cycles():
    edges = graph()
    assert len(edges) > 60  # the walk found the package
    assert upward_imports(edges) == []
    assert cycles(edges) == []


def test_the_check_sees_an_upward_import_and_a_cycle():
    edges = {
        "scaling_axes.modules.tasks.lm": {"scaling_axes.harness.runs"},
        "scaling_axes.harness.runs": set(),
        "kernels.a": {"kernels.b"},
        "kernels.b": {"kernels.a"},
    }
    assert upward_imports(edges) == ["scaling_axes.modules.tasks.lm -> scaling_axes.harness.runs"]
    assert cycles(edges) == [["kernels.a", "kernels.b"]]


def test_files_stay_readable():
    """No file over 420 lines, none of the harness's over 300; the harness's top level a room of at most 10 entries:
    the vocabulary, and one folder for a run's life and one for an experiment's."""
    limit = {path: 300 if path.is_relative_to(PACKAGE / "harness") else 420 for path in _modules().values()}
    long = {str(p.relative_to(ROOT)): n for p, most in limit.items() if (n := len(p.read_text().splitlines())) > most}
    assert long == {}
    top = sorted(p.name for p in (PACKAGE / "harness").iterdir() if p.name != "__pycache__")
    assert len(top) <= 10, top


def test_outside_the_checkout_only_scaling_axes_is_ours(tmp_path):
    """`modules`, `kernels`, `experiments` ... are other PyPI packages' names: nothing of ours may answer to them."""
    probe = (
        "import importlib.util, json, scaling_axes.modules\n"
        "names = ['modules', 'kernels', 'datamodules', 'experiments', 'harness', 'interop', 'benchmarks']\n"
        "found = {n: (s.origin or str(list(s.submodule_search_locations or []))) for n in names\n"
        "         if (s := importlib.util.find_spec(n)) is not None}\n"
        "print(json.dumps([scaling_axes.modules.__file__, found]))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    ours, found = __import__("json").loads(result.stdout)
    assert Path(ours).resolve().is_relative_to(ROOT)
    assert {name: where for name, where in found.items() if str(ROOT) in where} == {}


QUICK_COMMANDS = """
import contextlib, io, json, sys
from scaling_axes.cli import cli

heavy = ("lightning", "torchvision", "timm", "torchmetrics", "lm_eval", "transformers")
found = {}
for command in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli(command.split())
        except SystemExit as stop:
            assert stop.code in (0, None), (command, stop.code)
    found[command] = sorted(m for m in heavy if m in sys.modules) + ["torch"] * ("torch" in sys.modules)
print(json.dumps(found))
"""


def test_commands_that_train_nothing_import_no_torch():
    """--help, export --help, list, plan, run --list and --dry-run import no torch (issue 75: a list of names cost a
    training process's 2 s and 700 MB): the registry's presets and formulas are the torch-free `modules/configs/`,
    the models are imported when one is built, and Lightning, torchvision, timm, lm-eval and transformers by what
    trains or evaluates. One process runs them in turn, so each is checked with what the ones before it imported."""
    commands = [
        "--help",
        "export --help",
        "list",
        "run rmt_table10_variants --list",
        "run tokenformer_table2_imagenet --dry-run --scale smoke",
        "run cross_architecture --dry-run --scale smoke",
        "run mot_results_tables --dry-run --scale paper",
        "plan --scale smoke",
    ]
    done = subprocess.run(
        [sys.executable, "-c", QUICK_COMMANDS, *commands], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert all(imported == [] for imported in found.values()), found


def test_list_reads_from_the_modules_text_what_importing_them_gives():
    """`list` reads each experiment's name and description without importing it; importing them all gives the same
    lines (a declaration it cannot read would make it import them, and fail this test's first assertion)."""
    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.experiment.listing import listed

    read = listed()
    assert read is not None and read == sorted((e.name, e.description) for e in all_experiments())
