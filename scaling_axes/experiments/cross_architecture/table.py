"""The architectures of the comparison's arms on one footing, a table no paper has: the same OpenWebText tokens (GPT-2
tokenizer), sequence length 1024, token budget, schedule and seed, at about 125M and 350M non-embedding parameters,
each architecture at its own learning rate, chosen by a sweep the harness runs first (`harness.sweeps`).

Each arm (`arms.ARMS`, one record each) keeps its own paper's family (options, init, norms, position encoding) and
gets shapes that match the Transformer's non-embedding parameters within 3% (lookup tables and the unembedding left
out, as in the RMT code): its shape function says how.

Paper scale: 125M = 18 x 768, 350M = 28 x 1024; 20 tokens per non-embedding parameter (2.5B, 7B), batches of 512 x
1024 tokens, AdamW (0.9, 0.95), weight decay 0.1 on matrices, z-loss 1e-4, clipping 1.0, the RMT paper's schedule
(5% warmup, cosine to 10%). MoT trains with AdamW like the rest (its paper's Muon would confound the comparison).
Learning rates: a sweep per architecture and size from a 3-point grid (x3.3 apart), on a seed of its own, extended
past an edge until its best is interior; the claims' seeds (three at cpu scale) train at the chosen rate.

Reported per architecture and size (its best-lr run): validation loss at equal tokens (the end of training) and at
equal training FLOPs (each curve read at the smallest total any architecture spent, true FLOPs per architecture),
parameters, FLOPs per token, tokens/s and MFU from the training clock. Smoke and small scales shrink every shape and
are never a comparison result.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from scaling_axes.experiments.cross_architecture.arms import ARM, CLAIM_KINDS
from scaling_axes.experiments.cross_architecture.recipes import SMALL_MINUTES_PER_ARM, recipe_at
from scaling_axes.experiments.cross_architecture.setup import (
    ARCHITECTURES,
    COMPARED,
    comparisons,
    make_run,
    matched,
    runs,
    sizes,
    sweep,
)
from scaling_axes.harness.claims.verdicts import as_good_as, lower_loss
from scaling_axes.harness.experiment.arms import MATCH_TOLERANCE, parameter_match, settled_lr
from scaling_axes.harness.experiment.figures import draw, marked, over_seeds, seed_curves
from scaling_axes.harness.results import Row, pyplot, save_figure
from scaling_axes.harness.runs import Experiment, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import tuned
from scaling_axes.modules.flops import formula_params, non_embedding_params, train_flops_per_token


def best(scale: Scale, arch: str, size: str, results: dict[str, dict]) -> tuple[Run, dict] | None:
    """The architecture at the rate its sweep chose, once trained there (its seed 1)."""
    done = results.get(f"{arch}_{size}") or {}
    if done.get("val_loss") is None or done.get("tuning") is None:
        return None
    return tuned(make_run(scale, arch, size), done["tuning"].lr), done


def _flops_per_step(run: Run) -> float:
    return train_flops_per_token(run.config, run.budget.seq_len) * run.budget.batch_size * run.budget.seq_len


def loss_curve(run: Run, done: dict) -> list[tuple[float, float]]:
    """(training FLOPs so far, validation loss) along the run, ending at its final validation."""
    points = dict(done["val_loss_curve"]) | {done["steps"]: done["val_loss"]}
    return [(step * _flops_per_step(run), loss) for step, loss in sorted(points.items()) if step > 0]


def subset_curve(run: Run, done: dict) -> list[tuple[float, float]]:
    """(training FLOPs so far, validation loss) at each evaluation of the fixed curve subset: the figure's line, which
    never joins the final figure on the whole split (another set of windows: the join would draw a step)."""
    return [(step * _flops_per_step(run), loss) for step, loss in done["val_loss_curve"] if step > 0]


def loss_at(curve: list[tuple[float, float]], flops: float) -> float:
    """The curve read at `flops`, linear in log FLOPs between validations."""
    xs, ys = zip(*curve, strict=True)
    return float(np.interp(math.log(flops), np.log(xs), ys))


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    rows = []
    for size in sizes(scale):
        winners = {a: best(scale, a, size, results) for a in ARCHITECTURES}
        spent = [run.train_flops() for run, _ in filter(None, winners.values())]
        equal_flops = min(spent) if len(spent) == len(ARCHITECTURES) else None
        params = matched(scale, size)
        precisions = sorted({str(done.get("precision")) for _, done in filter(None, winners.values())})
        for arch in ARCHITECTURES:
            rows += shape_rows(scale, arch, size, params)
            rows += trained_rows(scale, arch, size, winners[arch], equal_flops, precisions)
        rows += claim_rows(scale, size, winners, results)
    return rows


def claim_rows(
    scale: Scale, size: str, winners: dict[str, tuple[Run, dict] | None], results: dict[str, dict]
) -> list[Row]:
    """Each arm's claims (`arms.ARMS`: lower loss first, then as good as) against their arm at equal tokens, best
    learning rate each (per seed), and the ranking the runs give."""
    name = {arch: f"{arch}_{size}" for arch in winners}
    numerics = recipe_at(scale).tokenformer_numerics.upper()
    rows = []
    for arch, claim in sorted(
        ((a, c) for a in ARCHITECTURES for c in ARM[a].claims), key=lambda each: CLAIM_KINDS.index(each[1].kind)
    ):
        configs = {name[a]: make_run(scale, a, size).config for a in (arch, claim.against)}
        unmatched = parameter_match("cross_arch", configs, claim.matched)[1] if claim.matched else None
        statement = claim.statement.format(numerics=numerics)
        if claim.kind == "lower_loss":
            rows.append(lower_loss("cross_arch", statement, scale, name[arch], name[claim.against], results, unmatched))
        else:
            rows.append(
                as_good_as(
                    "cross_arch",
                    statement,
                    scale,
                    name[arch],
                    name[claim.against],
                    results,
                    "val_loss",
                    -1.0,
                    "nats/token",
                    unmatched=unmatched,
                )
            )
    finished = sorted((winner[1]["val_loss"], arch) for arch, winner in winners.items() if winner and arch in COMPARED)
    ranking = " < ".join(f"{arch} {loss:.3f}" for loss, arch in finished)
    rows.append(
        Row(
            table="cross_arch",
            row=f"ranking_{size}",
            metric="val_loss_order",
            paper=None,
            ours=None,
            status="measured" if finished else "not_run",
            note=f"{ranking} (validation loss at equal tokens, tuned lr each, seed 1)",
        )
    )
    return rows


def shape_rows(scale: Scale, arch: str, size: str, params: dict[str, int]) -> list[Row]:
    """What the shape gives, before any training: non-embedding parameters beside the Transformer's, FLOPs/token."""
    run = make_run(scale, arch, size)
    own = non_embedding_params(run.config)
    vs = own / params["transformer"] - 1
    if ARM[arch].control_of:
        matching = f"the positive control of {ARM[arch].control_of}: not matched"
    elif abs(vs) <= MATCH_TOLERANCE:
        matching = f"matched within {MATCH_TOLERANCE:.0%}"
    else:  # the MoT: its byte mixin's own parameters on its backbone's, the difference its claim is about
        matching = f"not matched within {MATCH_TOLERANCE:.0%}: its own parameters are part of what its claim adds"
    per_token = train_flops_per_token(run.config, run.budget.seq_len)
    total = sum(formula_params(run.config).values())
    return [
        Row(
            table="cross_arch",
            row=f"{arch}_{size}",
            metric="non_embedding_params",
            paper=None,
            ours=own,
            unit="parameters",
            note=f"{vs:+.2%} vs the Transformer ({matching})",
        ),
        Row(
            table="cross_arch",
            row=f"{arch}_{size}",
            metric="total_params",
            paper=None,
            ours=total,
            unit="parameters",
            note="embeddings and an untied head included",
        ),
        Row(
            table="cross_arch",
            row=f"{arch}_{size}",
            metric="train_flops_per_token",
            paper=None,
            ours=per_token,
            unit="FLOPs",
            note="3 x forward matmul FLOPs of this architecture",
        ),
    ]


def mfu_note(done: dict, device: str, precisions: list[str]) -> str:
    if done.get("mfu") is None:
        return f"needs a GPU whose peak Lightning knows (ran on {device}: {done.get('mfu_peak', 'no peak')})"
    note = f"on {device}, {done.get('precision')} against the {done.get('mfu_peak')}"
    if len(precisions) > 1:
        note += f"; NOT comparable across these rows, which ran in {', '.join(precisions)}"
    return note


def trained_rows(
    scale: Scale,
    arch: str,
    size: str,
    winner: tuple[Run, dict] | None,
    equal_flops: float | None,
    precisions: list[str] = (),
) -> list[Row]:
    """The best-lr run's loss at equal tokens and at equal FLOPs, its lr, size, cost and speed. `precisions`: those
    of all rows of this size; MFUs of different precisions divide by different peaks and the note says so."""
    name = f"{arch}_{size}"
    if winner is None:
        return [
            Row(
                table="cross_arch",
                row=name,
                metric="val_loss_equal_tokens",
                paper=None,
                ours=None,
                unit="nats/token",
                status="not_run",
            )
        ]
    run, done = winner
    choice = done["tuning"]
    device = f"{done.get('world_size', 1)} x {done.get('device', '?')}"
    mfu = done.get("mfu")

    def measured(metric: str, value: float | None, unit: str = "", why: str = "") -> Row:
        return Row(
            table="cross_arch",
            row=name,
            metric=metric,
            paper=None,
            ours=value,
            unit=unit,
            run=run.name,
            status="measured",
            note=why,
        )

    rows = [
        measured(
            "best_lr",
            settled_lr(done),  # a rate or, on Muon, the factor on its groups' rates
            why=f"swept from {', '.join(f'{lr:g}' for lr in sweep(scale, arch))}: {choice.describe()}",
        ),
        measured("params", done["params"], "parameters", "all, counted on the model"),
        measured("tokens", done["tokens"], "tokens", ""),
        Row(
            table="cross_arch",
            row=name,
            metric="train_flops",
            paper=None,
            ours=run.train_flops(),
            unit="FLOPs",
            run=run.name,
            status="analytic",
        ),
        measured("val_loss_equal_tokens", done["val_loss"], "nats/token"),
        measured("tokens_per_sec", done.get("tokens_per_sec"), "tokens/s", f"training clock on {device}"),
        Row(
            table="cross_arch",
            row=name,
            metric="mfu",
            paper=None,
            ours=mfu,
            unit="",
            run=run.name,
            status="not_run" if mfu is None else "measured",
            note=mfu_note(done, device, precisions),
        ),
    ]
    if equal_flops is not None:
        read = equal_flops / run.train_flops()
        decayed = "done" if read >= 1 else "not fully decayed there"
        rows.append(
            measured(
                "val_loss_equal_flops",
                loss_at(loss_curve(run, done), equal_flops),
                "nats/token",
                f"at {equal_flops:.3e} FLOPs, {read:.1%} of this run (its cosine is {decayed})",
            )
        )
    return rows


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    """Validation loss against training FLOPs, each arm as its seeds trained (at its sweep's choice, or the plan's
    rate) and each seed drawn: a colour per architecture, a line style per size; the curve on its fixed subset of
    windows, the final figure on the whole split a point apart."""
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for size, style in zip(sizes(scale), ("-", "--"), strict=False):
        for colour, arch in enumerate(ARCHITECTURES):
            done = results.get(f"{arch}_{size}") or {}
            if done.get("val_loss") is None:
                continue
            run = make_run(scale, arch, size)  # its FLOPs a step; the rate moves none of them
            rate = f" (lr {settled_lr(done):g})" if done.get("tuning") else " (the plan's rate)"
            curves = seed_curves(done, lambda each, run=run: subset_curve(run, each))
            draw(ax, curves, marked(f"{arch} {size}{rate}", done), style, color=f"C{colour}")
            final = [(run.budget.steps * _flops_per_step(run), *over_seeds(done))]
            draw(ax, final, "_final", "o", color=f"C{colour}")  # "_": kept out of the legend, explained below
    ax.plot([], [], "o", color="0.4", markersize=4, label="final figure on the whole validation split")
    ax.set(
        xscale="log",
        xlabel="training FLOPs",
        ylabel="validation loss (nats/token; lines: the curve subset)",
        title=f"Cross-architecture, each arm at its rate ({scale} scale)",
    )
    save_figure(fig, path)


def plan_note(scale: Scale) -> str:
    lines = ["non-embedding parameters per size (matched within 3% of the Transformer's):"]
    for size in sizes(scale):
        params = matched(scale, size)
        lines.append(
            f"  {size}: " + ", ".join(f"{a} {p:,d} ({p / params['transformer'] - 1:+.1%})" for a, p in params.items())
        )
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="cross_architecture",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=report,
    figure=figure,
    plan_note=plan_note,
    comparisons=comparisons,
    seeds=lambda scale: recipe_at(scale).seeds,
    small_plan_minutes=SMALL_MINUTES_PER_ARM * len(ARM),
)
