"""REPORT.md's "One model in two experiments" (issue 83): the same model (preset, non-embedding parameters,
parametrisation) trained by two experiments, its final losses compared against 2 of the larger seed SD, and every
recipe field in which the two train it differently named, with each experiment's token rule."""

import statistics

import pytest

from scaling_axes.harness.claims.observed import SEED_COLUMNS
from scaling_axes.harness.experiment.comparisons import RECIPE_COLUMNS
from scaling_axes.harness.experiment.report_recipes import recipe_lines
from scaling_axes.harness.results import COLUMNS
from scaling_axes.io import write_csv


def _experiment(root, name: str, arm: str, recipe: dict[str, str], rule: str, losses: list[float]) -> None:
    rows = [{"comparison": "c", "arm": arm, "field": f, "value": v} for f, v in recipe.items()]
    rows.append({"comparison": "c", "arm": "", "field": "token_rule", "value": rule})
    write_csv(root / "recipes" / f"{name}.csv", RECIPE_COLUMNS, rows, checksum=True)
    write_csv(root / f"{name}.csv", COLUMNS, [])
    seeds = [
        {"kind": "run", "run": arm, "seed": k, "metric": "test_loss", "value": f"{v:.9g}"}
        for k, v in enumerate(losses, 4)
    ]
    write_csv(root / "seeds" / f"{name}.csv", SEED_COLUMNS, seeds, checksum=True)


RECIPE = {"architecture": "TransformerConfig", "model": "t", "non_embedding": "98624", "parametrisation": "standard"}


@pytest.mark.parametrize("apart", [0.01, 0.03, 0.2])
def test_a_model_two_experiments_train_is_compared_within_two_seed_sds_and_its_recipe_differences_named(
    tmp_path, apart
):
    first, second = [4.50, 4.52, 4.54], [4.50 + apart, 4.52 + apart, 4.54 + apart]
    _experiment(tmp_path, "cross", "transformer_125m", RECIPE, "20 tokens per parameter", first)
    _experiment(tmp_path, "rmt", "transformer_64", {**RECIPE, "model": "u", "parametrisation": "muP"}, "", second)
    _experiment(tmp_path, "other", "x", {**RECIPE, "non_embedding": "73728"}, "", [4.0, 4.1])  # another model
    lines = recipe_lines(tmp_path)
    (line,) = [x for x in lines[lines.index("## One model in two experiments") :] if x.startswith("- ")]
    gap, sd = apart, max(statistics.stdev(first), statistics.stdev(second))
    assert f"{gap:.4f} apart, {'within' if gap <= 2 * sd else 'beyond'} 2 seed SDs ({2 * sd:.4f})" in line
    assert line.endswith(
        "Recipes differ in: parametrisation (standard / muP) (token rules: cross: 20 tokens per parameter)."
    )
    assert "cross `transformer_125m` (`t`) 4.5200 ± 0.0200 test loss (3 seeds)" in line
