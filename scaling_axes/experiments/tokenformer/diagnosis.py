"""Why the Tokenformer trails the Transformer below paper scale: one variable of its recipe at a time.

The suite's own table, no paper's: at cpu scale the Tokenformer ends 0.5-0.9 nats behind the Transformer wherever the
two meet. Each row changes one thing of the cross-architecture Tokenformer (the Pile family of the released GPU code,
its head untied as the Transformer's, on the cross-architecture budget) and trains it at its own swept lr on the
claims' seeds; its margin is what the change gains over today's recipe (the recipe's loss minus the variant's, per
seed, with its 95% interval), beside the gap that remains to the Transformer:

===================  ==========================================================================================
variant              what changes (today's recipe in brackets)
===================  ==========================================================================================
tpu_numerics         the TPU code's numerics: N(0, 1) embeddings, logits / sqrt(d), tanh GELU, eps 1e-5 [GPU's];
                     where the recipe already follows them (cpu, since this table), `gpu_numerics` instead
fan_in_keys          keys N(0, 1 / sqrt(d)), the TPU code's fan-in [N(0, 0.02): Pattention's output ignores the
                     keys' scale, so Adam moves 0.02-sized keys about 15% a step]
small_values         values N(0, 0.02) [2 / (L sqrt(d)) = 0.125 at 2 x 64]
tokens_equal_width   n = d parameter tokens for Q/K/V/O, 4d for the FFN [3d/4, 3d]
full_rotary          rotary on every head dimension [the first 25%: 4 of 16]
tied_head            the unembedding tied to the embedding [untied, as the Transformer's]
===================  ==========================================================================================

Trained where claims are judged below paper scale (and at smoke, the pipeline), by `run tokenformer_cpu_diagnosis`
in the runs directory of `all` (whose cross-architecture runs it shares): `all` reports it without training it, since
it chose the cpu recipe once, and `results/cpu/tokenformer_cpu_diagnosis.csv` is committed from one such call. Each
option is one the released code also offers; the cpu recipe follows the rows whose gain is decided
(`cross_architecture.recipes`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from scaling_axes.experiments.cross_architecture.setup import make_run
from scaling_axes.harness.claims.contrasts import own_spread
from scaling_axes.harness.claims.margins import metric_margin, paired_margins
from scaling_axes.harness.results import Row
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.significance import t_critical

SIZE = "125m"
RECIPE, TRANSFORMER = f"tokenformer_{SIZE}", f"transformer_{SIZE}"


def variants(d_model: int, numerics: str) -> dict[str, dict]:
    """Variant name -> the config fields it changes, for a Tokenformer of width `d_model` whose recipe follows the
    `numerics` of one released code (the variant follows the other's)."""
    other = "gpu" if numerics == "tpu" else "tpu"
    return {
        f"{other}_numerics": {"numerics": other},
        "fan_in_keys": {"key_init_std": 1 / math.sqrt(d_model)},
        "small_values": {"value_init_std": 0.02},
        "tokens_equal_width": {"qkv_tokens": d_model, "proj_tokens": d_model, "ffn_tokens": 4 * d_model},
        "full_rotary": {"rotary_pct": 1.0},
        "tied_head": {"tie_embeddings": True},
    }


@fitted
def runs(scale: Scale) -> list[Run]:
    if scale.paper_configs:
        return []
    recipe = make_run(scale, "tokenformer", SIZE)
    unswept = {} if scale.judges_claims else {"sweep": None}  # smoke checks the pipeline, not the variants' rates
    changed = [
        dataclasses.replace(recipe, name=f"tokenformer_{name}", overrides={**recipe.overrides, **change}, **unswept)
        for name, change in variants(recipe.config.d_model, recipe.config.numerics).items()
    ]
    return [recipe, make_run(scale, "transformer", SIZE), *changed]


COMPARISONS = (  # (row metric, the run compared with, sign of its loss minus the variant's, in words)
    ("gain_over_recipe", RECIPE, 1, "today's recipe's loss minus this one's"),
    ("gap_to_transformer", TRANSFORMER, -1, "this loss minus the Transformer's"),
)


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Per variant: its gain over today's recipe and the gap left to the Transformer (mean over seeds, with the
    95% interval of its own spread: a diagnosis, no claim)."""
    rows = []
    for run in runs(scale)[2:]:
        variant = run.name.removeprefix("tokenformer_")
        for metric, against, sign, what in COMPARISONS:
            margins = paired_margins(results, (against, run.name), metric_margin("val_loss", scale_by=sign))
            rows.append(_row(variant, metric, list(margins.values()), f"{what}, per seed", (run.name, against)))
    return rows


def _row(variant: str, metric: str, margins: list[float], what: str, names: tuple[str, str]) -> Row:
    if not margins:
        return Row(
            table="diagnosis", row=variant, metric=metric, unit="nats/token", run=",".join(names), status="not_run"
        )
    mean = statistics.mean(margins)
    test = own_spread(margins)
    bound = t_critical(test.df) * test.se if test else math.inf
    return Row(
        table="diagnosis",
        row=variant,
        metric=metric,
        ours=mean,
        low=mean - bound,
        high=mean + bound,
        seeds=len(margins),
        unit="nats/token",
        run=",".join(names),
        status="measured",
        note=f"{what}; each arm at its own swept lr",
    )


EXPERIMENT = Experiment(
    name="tokenformer_cpu_diagnosis",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=report,
    on_request=True,  # it chose the cpu recipe once (36 runs, about 12 minutes); `all` reports what it found
)
