"""The checkout as tools see it: one real package whose folders are its import names, found by the wheel, by an
editor's resolver and by a bare `PYTHONPATH`, and never importable a second time under a top-level name."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CARD_FOLDERS = ("kernels", "modules", "datamodules", "harness", "interop", "experiments", "benchmarks")
NEW_EXPERIMENT = '''"""A table added by a new paper."""
from scaling_axes.harness.runs import Experiment

EXPERIMENT = Experiment(name="newpaper_table1", description="a new paper's table", runs=lambda scale: [],
                        report=lambda scale, results: [])
'''


def _copy_checkout(dst: Path) -> Path:
    """The tracked files of the checkout (links kept as links), as a fresh clone has them."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, listed.stdout.split("\0")):
        src, target = ROOT / name, dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, target)
    return dst


def test_a_wheel_ships_an_added_subpackage_and_the_command_line_lists_its_experiment(tmp_path):
    """No hand-written package list: a new paper's folder and a new subpackage ship without touching pyproject."""
    checkout = _copy_checkout(tmp_path / "checkout")
    paper = checkout / "scaling_axes" / "experiments" / "newpaper"
    paper.mkdir()
    (paper / "__init__.py").write_text('"""A new paper."""\n')
    (paper / "table1.py").write_text(NEW_EXPERIMENT)
    (checkout / "scaling_axes" / "newpart").mkdir()
    (checkout / "scaling_axes" / "newpart" / "__init__.py").write_text('"""A new subpackage."""\n')
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(checkout)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"scaling_axes/experiments/newpaper/table1.py", "scaling_axes/newpart/__init__.py"} <= names
    assert {"scaling_axes/published/rmt.csv", "scaling_axes/modules/architectures/rmt.py"} <= names
    assert not any(n.split("/")[0] in CARD_FOLDERS for n in names), "a top-level link shipped as a package"
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = "import scaling_axes; print(scaling_axes.__file__)"
    where = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert Path(where.stdout.strip()).is_relative_to(site)  # the wheel's copy, not the checkout's editable one
    listed = subprocess.run(
        [sys.executable, "-m", "scaling_axes", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "newpaper_table1" in listed.stdout and "rmt_fig2_scaling_laws" in listed.stdout


BARE_IMPORT = """
import importlib, sys
name = sys.argv[1]
module = importlib.import_module(name)  # from the checkout root: the top-level link
print(getattr(module, "__file__", None), getattr(module, "__version__", None), hasattr(module, "__path__"))
try:
    getattr(module, "build_model")
except AttributeError as error:
    print(error)
try:
    importlib.import_module(name + ".anything")
except ModuleNotFoundError as error:
    print(type(error).__name__)
print(sorted(m for m in sys.modules if m.split(".")[0] == name))
"""


@pytest.mark.parametrize("name", CARD_FOLDERS)
def test_a_top_level_folder_imported_by_its_bare_name_is_no_package_and_no_second_copy(name):
    """From the checkout root the card's folders are links into the package. Imported by its bare name, one answers
    as a package that is not there (no file, version or path: transformers' probe for the Hub's `kernels` finds
    none), nothing under it imports (no model registers a second time), and asked for a name it says which import
    to use."""
    result = subprocess.run([sys.executable, "-c", BARE_IMPORT, name], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "None None False" and f"import scaling_axes.{name}" in lines[1]
    assert lines[2] == "ModuleNotFoundError" and lines[3] == f"[{name!r}]"


def test_the_card_folders_stay_visible_at_the_top():
    for folder in (*CARD_FOLDERS, "results/published"):
        assert (ROOT / folder).is_symlink() and (ROOT / folder).resolve().parent == ROOT / "scaling_axes"
    assert (ROOT / "tests").is_dir() and (ROOT / "results").is_dir()


@pytest.mark.parametrize(
    ("file", "name", "definition"),
    [
        ("experiments/rmt/setup.py", "Run", ("harness/runs.py", "class Run:")),
        ("experiments/rmt/setup.py", "Budget", ("harness/runs.py", "class Budget:")),
        ("experiments/tokenformer/table8_variants.py", "get_config", ("modules/registry.py", "def get_config(")),
        ("experiments/rmt/fig2_scaling_laws.py", "Experiment", ("harness/runs.py", "class Experiment:")),
    ],
)
def test_an_editor_goes_to_the_definition_inside_the_checkout(file, name, definition):
    """jedi (what editors use) resolves a name used in an experiment to where it is defined in this checkout."""
    jedi = pytest.importorskip("jedi")
    path = ROOT / "scaling_axes" / file
    lines = path.read_text().splitlines()
    line, column = next(
        (i + 1, line.rindex(name))
        for i, line in enumerate(lines)
        if line.startswith("from scaling_axes") and f" {name}" in line
    )
    script = jedi.Script(path=str(path), project=jedi.Project(ROOT))
    found = script.goto(line, column + 1, follow_imports=True)
    assert found, f"jedi found no definition of {name} in {file}"
    where = Path(found[0].module_path)
    assert where == ROOT / "scaling_axes" / definition[0]
    assert where.read_text().splitlines()[found[0].line - 1].lstrip().startswith(definition[1])


def test_a_plain_checkout_on_pythonpath_imports(tmp_path):
    """A bare GPU image's way: nothing installed, the checkout on PYTHONPATH (-S keeps this venv's editable install
    out of the way, so only PYTHONPATH can find the package)."""
    probe = "import scaling_axes.harness, scaling_axes.experiments; print(scaling_axes.harness.__file__)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == ROOT / "scaling_axes" / "harness" / "__init__.py"
