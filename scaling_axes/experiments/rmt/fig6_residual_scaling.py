"""RMT Fig. 6: a GPT2-small-sized RMT (D_v 64, R 12) with its residual stream grown through D_k = 6 ... 64.

Paper scale (App. C.3): 50K steps of batch 64 x 512 (1.64B tokens), max lr 1e-2, the RMT setup of
`experiments.rmt.setup`. The parameter count barely moves (134.2M to 134.5M); the loss should fall as the residual
grows. Reported: final validation loss, parameters and training FLOPs per D_k, and §4.4's comparison: the residual-4096
model (D_k 64) reaches the residual-768 model's (D_k 12, GPT2-small's residual) final loss with 25% fewer tokens and
23% fewer FLOPs, located where its validation curve first reaches that loss (interpolated between evaluations). The
23% follows from the 25% only because D_k 64 costs 2% more FLOPs per token by the paper's formula. Beside the
sweep, the GPT2-small Transformer on the same budget: at its residual size (768, D_k 12) the RMT should be as good.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.experiments.rmt.recipes import PAPER_SEQ, UNTUNED_LR, shrunk_at
from scaling_axes.experiments.rmt.setup import first_crossing, percent_change, table7_forward_flops
from scaling_axes.harness.claims.margins import paired_margins
from scaling_axes.harness.claims.outcomes import never_reached
from scaling_axes.harness.claims.verdicts import as_good_as, judge, lower_loss
from scaling_axes.harness.experiment.figures import caveats, line_figure, over_seeds
from scaling_axes.harness.results import Row, compare, published
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep
from scaling_axes.modules import get_config
from scaling_axes.modules.configs.rmt_config import RMTConfig
from scaling_axes.modules.registry import architecture_of

D_KEYS = (6, 12, 24, 32, 48, 64)
GPT2_SMALL, WIDEST = "rmt_residual_dk12", "rmt_residual_dk64"  # residual 768 and 4096 (§4.4)
SAVINGS_TOLERANCE = 1.0  # percentage points
SIZE = 2  # below paper scale: the GPT2-small-like member of the shrunk family (R x D_v = its Transformer's width)
EQUAL_RESIDUAL = "transformer_rmt_160m"  # GPT2-small: the Transformer whose residual equals D_k 12's


def residual_runs(scale: Scale) -> list[Run]:
    """The RMTs of the D_k sweep."""
    result = []
    shrunk_keys = None if scale.paper_configs else shrunk_at(scale).residual_d_keys
    for d_key, shrunk_key in zip(D_KEYS, shrunk_keys or D_KEYS, strict=True):
        name = f"rmt_residual_dk{d_key}"
        overrides = {} if scale.paper_configs else {**rmt_setup.shrunk(scale, "rmt_134m", SIZE), "d_key": shrunk_key}
        result.append(_run(scale, name, name, overrides, _residual_sweep(scale, name)))
    return result


def _residual_sweep(scale: Scale, name: str) -> Sweep | None:
    """One sweep for the D_k family: at the widest residual, carried to the others as the paper trains them all at
    one lr (App. C.4), checked at D_k 12 (the residual the claims compare most) by its two grid neighbours."""
    if name == WIDEST:
        return rmt_setup.sweep(scale)
    return rmt_setup.sweep(
        scale, anchor=WIDEST, rule="one lr at every D_k, as the paper trains them (App. C.4)", check=name == GPT2_SMALL
    )


@fitted
def runs(scale: Scale) -> list[Run]:
    """The D_k sweep and the GPT2-small Transformer at the residual size of D_k 12 (768; the shrunk family's width
    where R x D_v is), on the same budget."""
    overrides = {} if scale.paper_configs else rmt_setup.shrunk(scale, EQUAL_RESIDUAL, SIZE)
    return [*residual_runs(scale), _run(scale, EQUAL_RESIDUAL, EQUAL_RESIDUAL, overrides, rmt_setup.sweep(scale))]


def _run(scale: Scale, name: str, model: str, overrides: dict, sweep: Sweep | None) -> Run:
    if scale.paper_configs:
        budget = rmt_setup.schedule(50_000, 64, PAPER_SEQ, UNTUNED_LR)
    else:
        budget = rmt_setup.short_schedule(scale, UNTUNED_LR)
    return Run(
        name,
        model,
        budget,
        overrides,
        corpus=rmt_setup.corpus(scale),
        tokenizer=scale.tokenizer_for("gpt2"),
        lm=rmt_setup.lm_options(),
        sweep=sweep,
    )


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    note = scale.note
    rows = []
    for run in runs(scale):
        done = results.get(run.name)
        residual = architecture_of(run.config).width(run.config)
        status = "measured" if done else "not_run"
        rows.append(
            Row(
                table="fig6",
                row=run.name,
                metric="val_loss",
                paper=None,
                ours=done and done["val_loss"],
                unit="nats/token",
                run=run.name,
                status=status,
                note=f"residual {residual}; {note}".strip("; "),
            )
        )
        rows.append(
            Row(
                table="fig6",
                row=run.name,
                metric="params",
                paper=None,
                ours=done and done["params"],
                unit="parameters",
                run=run.name,
                status=status,
            )
        )
        rows.append(
            Row(
                table="fig6",
                row=run.name,
                metric="train_flops",
                paper=None,
                ours=run.train_flops(),
                unit="FLOPs",
                run=run.name,
            )
        )
    return rows + section_4_4_rows(scale, results) + claim_rows(scale, results)


def claim_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Fig. 6 / §4.4's claims, margins per seed: the loss falls monotonically as the residual grows (each D_k below
    the next smaller one), and the residual-4096 model reaches the residual-768 model's final loss on fewer tokens
    (the paper: 25%) and fewer training FLOPs (23%; counted on our models)."""
    names = [run.name for run in residual_runs(scale)]
    rows = [
        lower_loss("fig6", "the loss falls monotonically as the residual stream grows", scale, wider, narrower, results)
        for narrower, wider in itertools.pairwise(names)
    ]
    paper = published("rmt")
    missed = paired_margins(results, (GPT2_SMALL, WIDEST), _gap)  # the savings need the crossing at every seed
    for resource, ratio in _ratios(scale):
        expected = paper[("sec4_4", "rmt_residual_dk64_vs_dk12", f"{resource}_saving_percent")]
        row, names = f"{WIDEST}_vs_{GPT2_SMALL}_{resource}", (WIDEST, GPT2_SMALL)
        statement = (
            f"residual 4096 reaches residual 768's final loss with fewer {resource} (paper: {expected:g}% fewer)"
        )
        rows.append(
            never_reached("sec4_4", row, statement, missed, names)
            if missed
            else judge("sec4_4", row, statement, scale, _savings(scale, results, ratio), "fraction saved", runs=names)
        )
    rows.append(
        as_good_as(
            "fig6",
            "at the Transformer's residual size the RMT is as good as the Transformer (validation loss)",
            scale,
            GPT2_SMALL,
            EQUAL_RESIDUAL,
            results,
            "val_loss",
            -1.0,
            "nats/token",
            unmatched=residual_mismatch(scale),
        )
    )
    return rows


def residual_mismatch(scale: Scale) -> str | None:
    """How D_k 12 and the Transformer beside it are not at one residual size (D_k x D_v against d_model), which
    their claim is stated at; None where they are (at paper scale: 768 both)."""
    by_name = {run.name: run for run in runs(scale)}
    sizes = {
        name: architecture_of(by_name[name].config).width(by_name[name].config) for name in (GPT2_SMALL, EQUAL_RESIDUAL)
    }
    if len(set(sizes.values())) == 1:
        return None
    return f"residual sizes {', '.join(f'{name} {size}' for name, size in sizes.items())}: not the equal residual"


def _saving(small: dict, wide: dict, steps: int, flops_ratio: float) -> float | None:
    """The fraction of its budget (x `flops_ratio` for FLOPs) the wide run saves where its validation curve first
    reaches the small run's final loss; None where it never does (`_gap`)."""
    if small.get("val_loss") is None or not wide.get("val_loss_curve"):
        return None
    step = first_crossing(wide["val_loss_curve"], small["val_loss"])
    return None if step is None else 1 - step / steps * flops_ratio


def _gap(small: dict, wide: dict) -> float | None:
    """Where the wide run's validation curve never reaches the small run's final loss: how far short its lowest
    point stays (< 0); None where it does reach it."""
    if small.get("val_loss") is None or not wide.get("val_loss_curve"):
        return None
    lowest = min(loss for _, loss in wide["val_loss_curve"])
    return None if lowest <= small["val_loss"] else small["val_loss"] - lowest


def _ratios(scale: Scale) -> tuple[tuple[str, float], ...]:
    """(resource, D_k 64's use of it per unit of D_k 12's): tokens alike; training FLOPs counted on this scale's
    models (what the claim and its row both use)."""
    by_name = {run.name: run for run in runs(scale)}
    return ("tokens", 1.0), ("flops", by_name[WIDEST].train_flops() / by_name[GPT2_SMALL].train_flops())


def _savings(scale: Scale, results: dict[str, dict], ratio: float) -> dict[int, float]:
    """seed -> the fraction of its budget (x `ratio`) D_k 64 saves to reach D_k 12's final loss, at each paired seed
    where it reaches it."""
    steps = {run.name: run for run in runs(scale)}[WIDEST].budget.steps
    return paired_margins(results, (GPT2_SMALL, WIDEST), lambda small, wide: _saving(small, wide, steps, ratio))


def _flops_ratio(small: RMTConfig, wide: RMTConfig) -> float:
    return table7_forward_flops(wide, compatible=True) / table7_forward_flops(small, compatible=True)


def section_4_4_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """§4.4: tokens and FLOPs the D_k 64 model saves to reach the D_k 12 model's final validation loss."""
    paper, key = published("rmt"), ("sec4_4", "rmt_residual_dk64_vs_dk12")
    paper_ratio = _flops_ratio(get_config(GPT2_SMALL), get_config(WIDEST))
    implied = -percent_change(1, (1 - paper[(*key, "tokens_saving_percent")] / 100) * paper_ratio)
    expected = paper[(*key, "flops_saving_percent")]
    note = f"the paper's 25% fewer tokens x its formula's per-token FLOP ratio {paper_ratio:.4f} (D_k 64 / D_k 12)"
    rows = [
        Row(
            table=key[0],
            row=key[1],
            metric="flops_saving_implied_by_tokens_saving",
            paper=expected,
            ours=implied,
            unit="%",
            status=compare(expected, implied, 0.05),
            note=note,
        )
    ]
    missed = paired_margins(results, (GPT2_SMALL, WIDEST), _gap)
    for resource, ratio in _ratios(scale):
        metric, fractions = f"{resource}_saving_percent", _savings(scale, results, ratio)
        saving = 100 * sum(fractions.values()) / len(fractions) if fractions and not missed else None
        status = (
            "not_run"
            if not (fractions or missed)
            else "differs"
            if missed
            else "measured"
            if scale.note
            else ("match" if abs(saving - paper[(*key, metric)]) <= SAVINGS_TOLERANCE else "differs")
        )
        how = (
            f"D_k 64 never reaches D_k 12's final loss at seed(s) {', '.join(map(str, missed))}"
            if missed
            else f"where D_k 64's validation curve first reaches D_k 12's final loss, the mean of {len(fractions)} "
            "seed(s); FLOPs counted, as the claim"
        )
        rows.append(
            Row(
                table=key[0],
                row=key[1],
                metric=metric,
                paper=paper[(*key, metric)],
                ours=saving,
                unit="%",
                run=f"{WIDEST},{GPT2_SMALL}",
                status=status,
                seeds=len(fractions) or None,
                note="; ".join(filter(None, (scale.note, how))),
            )
        )
    return rows


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    """The final validation loss against the residual size, each point its seeds' mean and spread; a point whose
    seeds fell back below the family's rate or trained unstably is labelled."""
    finished = [
        (r.config.d_key * r.config.d_value, over_seeds(results.get(r.name)), results.get(r.name))
        for r in residual_runs(scale)
    ]
    points = [(x, *mean) for x, mean, _ in finished if mean]
    notes = tuple(("; ".join(why), x, mean[0]) for x, mean, done in finished if mean and (why := caveats(done)))
    line_figure(
        path,
        {"RMT (each point: its seeds' mean and spread)": points},
        notes=notes,
        xscale="log",
        xlabel="residual stream size D_k x D_v",
        ylabel="validation loss (nats/token)",
        title=f"RMT Fig. 6: residual scaling ({scale} scale)",
    )


EXPERIMENT = Experiment(
    name="rmt_fig6_residual_scaling", description=__doc__.splitlines()[0], runs=runs, report=report, figure=figure
)
