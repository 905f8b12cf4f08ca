"""Scales are typed objects in one registry: nothing compares one with a string, `--scale` parses to one, and a scale
that a paper has no recipe for is refused by name instead of falling into another scale's branch."""

import ast
import dataclasses
from pathlib import Path

import pytest

from scaling_axes.experiments import all_experiments
from scaling_axes.experiments.rmt import recipes as rmt_recipes
from scaling_axes.harness import scales
from scaling_axes.harness.scales import CPU, PAPER, SMALL, SMOKE, Scale, UnknownScale, get_scale

PACKAGE = Path(__file__).resolve().parent.parent / "scaling_axes"
NAMES = {"smoke", "cpu", "small", "paper"}


def _is_scale_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_scale_literal(e) for e in node.elts)


def string_scales(source: str) -> list[str]:
    """Comparisons of something named `scale` with a scale's name, dicts keyed by scale names, and string
    defaults of a `--scale` option."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any("scale" in ast.unparse(o) for o in operands) and any(_is_scale_literal(o) for o in operands):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Dict) and len({k.value for k in node.keys if _is_scale_literal(k)}) >= 2:
            found.append(ast.unparse(node)[:60])
        elif isinstance(node, ast.Call) and node.args and ast.unparse(node.args[0]) == "'--scale'":
            found += [ast.unparse(k) for k in node.keywords if k.arg == "default" and _is_scale_literal(k.value)]
    return found


def test_no_code_outside_the_registry_compares_a_scale_with_a_string():
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "scales.py" and (found := string_scales(path.read_text()))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    "source",
    [
        "if scale == 'cpu': pass",
        "x = 1 if run_scale in ('smoke', 'cpu') else 2",
        "TABLE = {'smoke': 1, 'small': 2}",
        "parser.add_argument('--scale', default='smoke')",
    ],
)
def test_the_source_check_sees_each_kind_of_string_scale(source):
    assert string_scales(source) != []


def test_a_scale_compared_with_a_string_is_an_error_not_false():
    with pytest.raises(TypeError, match="compared with the string 'cpu'"):
        _ = CPU == "cpu"
    with pytest.raises(TypeError):
        _ = CPU in ("smoke", "cpu")
    assert CPU == get_scale("cpu") and CPU != SMALL and str(PAPER) == "paper"


def test_the_registry_holds_the_four_scales_in_order_of_size_and_refuses_others():
    assert list(scales.SCALES) == ["smoke", "cpu", "small", "paper"]
    assert [s.judges_claims for s in (SMOKE, CPU, SMALL, PAPER)] == [False, True, True, True]
    assert [s.seeds for s in (SMOKE, CPU, SMALL, PAPER)] == [1, 3, 1, 1]
    with pytest.raises(UnknownScale, match="unknown scale 'tiny'; the scales: smoke, cpu, small, paper"):
        get_scale("tiny")


def test_the_command_line_parses_scale_to_the_object(capsys):
    from scaling_axes.cli import cli

    with pytest.raises(SystemExit):
        cli(["run", "rmt_fig2_scaling_laws", "--scale", "tiny", "--list"])
    assert "argument --scale: unknown scale 'tiny'; the scales: smoke, cpu, small, paper" in capsys.readouterr().err
    cli(["run", "rmt_fig2_scaling_laws", "--scale", "cpu", "--list", "--pilot"])
    assert "rmt_305m_seed3" in capsys.readouterr().out  # the cpu scale's three pilot seeds
    from scaling_axes.harness.claims.plan import training_plan

    planned = training_plan(CPU).experiments["rmt_table3_4_resources"]  # the plan the confirmatory runs train under
    cli(["run", "rmt_table3_4_resources", "--scale", "cpu", "--list"])
    assert f"rmt_305m_seed{planned.seeds[-1]}" in capsys.readouterr().out  # its fresh seeds


TEST_ONLY = Scale(
    "test_only",
    judges_claims=True,
    paper_configs=False,
    data="stand_in",
    tokenizer="wiki_bpe2048",
    note="a scale registered by a test",
)


def test_a_new_scale_is_planned_from_its_own_recipe_or_refused_by_name(monkeypatch):
    """Registered without recipes, every experiment that trains refuses it by name (none falls into another scale's
    branch); given the RMT paper's recipe, the RMT experiments plan exactly that recipe."""
    monkeypatch.setitem(scales.SCALES, TEST_ONLY.name, TEST_ONLY)
    planned, refused = {}, {}
    for experiment in all_experiments():
        try:
            planned[experiment.name] = experiment.runs(get_scale("test_only"))
        except UnknownScale as error:
            assert "test_only scale" in str(error) and "add one to its recipes" in str(error)
            refused[experiment.name] = str(error)
    assert all(runs == [] for runs in planned.values()), {k: len(v) for k, v in planned.items() if v}
    trained = {e.name for e in all_experiments() if e.runs(SMOKE)}
    assert set(refused) == trained
    recipe = dataclasses.replace(rmt_recipes.SHRUNK[CPU], steps=40, val_windows=8, tokens_per_parameter=None)
    monkeypatch.setitem(rmt_recipes.SHRUNK, TEST_ONLY, recipe)
    experiments = {e.name: e for e in all_experiments()}
    for name in ("rmt_fig2_scaling_laws", "rmt_fig6_residual_scaling", "rmt_table10_variants"):
        runs = experiments[name].runs(TEST_ONLY)
        assert runs and all(r.budget.steps == 40 and r.budget.val_windows == 8 for r in runs)
        assert all(r.corpus == "embedded_wiki" and r.tokenizer == "wiki_bpe2048" for r in runs)  # its data policy


def test_every_rmt_recipe_validates_on_its_own_windows():
    """The fall-through this registry removed: the cpu scale validated on the paper's 1,024 windows."""
    fig2 = {e.name: e for e in all_experiments()}["rmt_fig2_scaling_laws"]
    for scale in (SMOKE, CPU, SMALL):
        assert {r.budget.val_windows for r in fig2.runs(scale)} == {rmt_recipes.SHRUNK[scale].val_windows}
    assert {r.budget.val_windows for r in fig2.runs(CPU)} == {128}  # 16k tokens (issue 83)
