"""Why the RMT's loss barely falls with size below paper scale: its Fig. 2 ladder one variable at a time.

The suite's own table, no paper's: at cpu scale RMT Fig. 2's four RMTs ended within 0.11 nats of each other where the
Transformers fell 0.17 (`docs/models.md`). Each row is one Fig. 2 RMT on one seed under the recipe its committed
seeds trained with (AdamW 0.9, 0.95) unless the row says otherwise; its measures are the run's final validation and
test losses, each read on the whole split:

=============  ===================================================================================================
row            what it trains
=============  ===================================================================================================
lr<rate>       the recipe at a rate of its own (0.01, 0.03, 0.1; 0.03 is the rate the sizes were carried at)
long           the recipe at 0.03 for 4x the steps and tokens (the smallest and the largest size)
new_recipe     today's recipe (AdamW 0.9, 0.99) at 0.03
=============  ===================================================================================================

Trained where claims are judged below paper scale, by `run rmt_cpu_diagnosis --pilot` only (17 minutes on 2 cores
beside a test run): `all` reports it without training it, and `results/cpu/pilot/rmt_cpu_diagnosis.csv` is committed
from one such call, on the issue-73 ladder (R 2-6 at D_v = D_k = 16, 250 steps of 16 x 128 tokens: each row's note
gives its steps and rate). The rows are built from Fig. 2's live ladder, so that a call now diagnoses the ladder the
diagnosis proposed (`recipes.py`), its pilot to compare. The forward and the init against the released code are
`tests/test_rmt_parity.py`'s.
"""

from __future__ import annotations

import dataclasses

from scaling_axes.experiments.rmt import fig2_scaling_laws as fig2
from scaling_axes.experiments.rmt.setup import RMTS
from scaling_axes.harness.claims.outcomes import final_losses
from scaling_axes.harness.results import Row
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import tuned

RATES = (0.01, 0.03, 0.1)
CARRIED = 0.03  # where the committed seeds trained every size
COMMITTED_BETAS = (0.9, 0.95)
LONGER = 4  # x the steps of the `long` rows
LONG_SIZES = (RMTS[0], RMTS[-1])


def _variant(run: Run, name: str, lr: float, betas: tuple[float, float] | None, longer: int = 1) -> Run:
    run = tuned(run, lr)
    budget = run.budget
    if longer > 1:
        budget = dataclasses.replace(
            budget,
            steps=budget.steps * longer,
            warmup_steps=budget.warmup_steps * longer,
            val_every=budget.val_every and budget.val_every * longer,
            checkpoint_every=budget.checkpoint_every * longer,
        )
    lm = run.lm if betas is None else {**run.lm, "betas": betas}
    return dataclasses.replace(run, name=f"{run.name}_{name}", budget=budget, lm=lm, sweep=None)


@fitted
def runs(scale: Scale) -> list[Run]:
    """Every row below paper scale; at smoke, a pipeline check, a rated and a today's-recipe row of the smallest."""
    if scale.paper_configs:
        return []
    ladder = {run.name: run for run in fig2.runs(scale) if run.name in RMTS}
    sizes, rates = (RMTS, RATES) if scale.judges_claims else (RMTS[:1], (CARRIED,))
    rated = [_variant(ladder[m], f"lr{lr:g}", lr, COMMITTED_BETAS) for m in sizes for lr in rates]
    long = [_variant(ladder[m], "long", CARRIED, COMMITTED_BETAS, LONGER) for m in LONG_SIZES if scale.judges_claims]
    return [*rated, *long, *(_variant(ladder[m], "new_recipe", CARRIED, None) for m in sizes)]


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Each run's final validation and test loss (one seed: a diagnosis, no claim)."""
    return final_losses("diagnosis", runs(scale), results, _described)


def _described(run: Run) -> str:
    return f"{run.budget.steps} steps at lr {run.budget.lr:g}, AdamW betas {run.lm['betas']}; "


EXPERIMENT = Experiment(
    name="rmt_cpu_diagnosis",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=report,
    seeds=lambda scale: 1,  # a diagnosis: one seed a row, said so on each row
    on_request=True,
)
