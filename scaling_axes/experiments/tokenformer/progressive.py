"""Progressive scaling shared by Tokenformer Fig. 3 (growth vs from scratch) and Fig. 7 (growth vs Net2Net).

A growth chain trains its first size from scratch, then grows it stage by stage (`Run.grow_from`), each stage on
a per-stage budget; one chain per stage budget. Runs are named `<model>_<budget label>`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

from scaling_axes.experiments.tokenformer.progressive_figure import figure
from scaling_axes.experiments.tokenformer.recipes import OPENWEBTEXT, progressive_at
from scaling_axes.harness.claims.margins import metric_margin, paired_margins
from scaling_axes.harness.claims.verdicts import contrast_claim
from scaling_axes.harness.experiment.arms import parameter_match
from scaling_axes.harness.experiment.comparisons import Comparison
from scaling_axes.harness.results import Row, compare, published
from scaling_axes.harness.runs import Budget, Experiment, Run, growth_chain, within_epochs
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep
from scaling_axes.modules import get_config
from scaling_axes.modules.flops import formula_params

SIZES = ("124m", "354m", "757m", "1_4b")
TOKENFORMER_GROWTH = {"new_keys": "zero", "pin_tau": False}  # as the paper ran it: zero keys, tau follows n
PINNED_TAU_GROWTH = {"new_keys": "zero", "pin_tau": True}  # the ablation: exact growth (`growth.tokenformer.grow`)
RELEASED_CODE_GROWTH = {"new_keys": "random", "pin_tau": False}  # the released code (GPU and TPU): random new keys
NET2NET_GROWTH = {"noise": 1e-3}  # copies must differ, or they receive equal gradients and stay copies
PAPER_NET2NET_GROWTH = {"net2net": "new_parameters"}  # Eq. 14's Net2Net: the new blocks freshly initialised


def paper_steps() -> dict[str, int]:
    """Section 4.1 counts steps: 6e5 from scratch ("300B" tokens: 314.6B) and 6e4 per growth stage ("30B": 31.5B),
    the 15B and 60B stages in proportion; the rounded token counts over the batch would give 4.6% fewer steps."""
    paper = published("tokenformer")
    scratch, stage = int(paper[("fig3", "from_scratch", "steps")]), int(paper[("fig3", "growth_stage_30b", "steps")])
    return {"300b": scratch, "15b": stage // 2, "30b": stage, "60b": 2 * stage}


PPL_TOLERANCE = 0.03  # relative; the paper's values are read off plots to about +-0.2 perplexity


@dataclasses.dataclass(frozen=True)
class Setting:
    """The OpenWebText setting at one scale: per-size overrides of each family (SIZES order), the from-scratch
    budget, the growth-stage budgets by label, and the corpus."""

    tokenformer: tuple[dict[str, Any], ...]
    transformer: tuple[dict[str, Any], ...]
    full: Budget
    stage: dict[str, Budget]
    corpus: str
    tokenizer: str = "neox"
    lm: dict[str, Any] = dataclasses.field(default_factory=dict)  # further LanguageModel arguments (AdamW's betas)


def scale_spec(scale: Scale) -> Setting:
    """The paper's setting, or the scale's recipe (`recipes.PROGRESSIVE`, whose numbers are no reproduction)."""
    if scale.paper_configs:
        steps = paper_steps()
        full = paper_budget(steps.pop("300b"))
        stages = {label: paper_budget(count) for label, count in steps.items()}
        return Setting(({},) * len(SIZES), ({},) * len(SIZES), full, stages, corpus="openwebtext")
    s, corpus = progressive_at(scale), OPENWEBTEXT.at(scale)
    full, stage = s.full, s.stage
    if scale.fits_budgets:  # a whole growth chain (the first run and a stage per size) within the scale's passes
        chain = full.tokens + (len(SIZES) - 1) * stage.tokens
        limit = scale.min_epoch_limit
        full, stage = (within_epochs(b, corpus, "neox", limit * b.tokens / chain) for b in (full, stage))
    vocabulary = scale.vocabulary()
    return Setting(
        tokenformer=tuple(
            {**s.shape, **vocabulary, "qkv_tokens": n, "proj_tokens": n, "ffn_tokens": 4 * n} for n in s.tokens
        ),
        transformer=tuple({**s.shape, **vocabulary, "d_model": d, "n_head": d // s.head_size} for d in s.widths),
        full=full,
        stage={"short": stage},
        corpus=corpus,
        tokenizer=scale.tokenizer_for("neox"),
        lm={"betas": s.betas},
    )


def paper_budget(steps: int, **changes: Any) -> Budget:
    """The paper's schedule: batch 512 x 1024, lr 6e-4, 2000 warmup steps, cosine to zero, for `steps` steps."""
    budget = Budget(
        steps=steps,
        batch_size=512,
        seq_len=1024,
        warmup_steps=2000,
        min_lr_ratio=0.0,
        val_every=5000,
        val_windows=2048,
        micro_batch=16,
    )
    return dataclasses.replace(budget, **changes)


def growth_chains(
    models: list[str],
    overrides: list[dict[str, Any]],
    first: tuple[str, Budget],
    stages: dict[str, Budget],
    grow_options: dict[str, Any] | None = None,
    **common: Any,
) -> list[Run]:
    """`models[0]` trained from scratch on `first` (label, budget), then grown through `models[1:]` once per stage
    budget in `stages` (label -> budget)."""
    first_label, first_budget = first
    head = Run(f"{models[0]}_{first_label}", models[0], first_budget, overrides[0], **common)
    runs = [head]
    for label, budget in stages.items():
        previous = head.name
        for model, extra in zip(models[1:], overrides[1:], strict=True):
            runs.append(
                Run(
                    f"{model}_{label}",
                    model,
                    budget,
                    extra,
                    grow_from=previous,
                    grow_options=dict(grow_options or {}),
                    **common,
                )
            )
            previous = runs[-1].name
    return runs


CHAIN_RULE = "the paper keeps one lr at every stage"


def swept(scale: Scale, runs: list[Run], compared: set[str]) -> list[Run]:
    """`runs` with the runs in `compared` (trained from scratch; what claims compare) swept over their family's grid
    at the scale (`recipes.PROGRESSIVE`), and every run grown from one of them at the lr its chain's first run
    chose (times the scale's `stage_lr_scale` for its family). Unchanged where the scale has no grids (paper: the
    paper's lr; smoke: a pipeline check)."""
    recipe = None if scale.paper_configs else progressive_at(scale)
    if recipe is None or recipe.lr_grids is None:
        return runs
    region = recipe.sweep_region
    sweeps = {
        family: region.applied(Sweep(grid)) if region else Sweep(grid) for family, grid in recipe.lr_grids.items()
    }
    by_name = {run.name: run for run in runs}
    out = []
    for run in runs:
        root = growth_chain(run, by_name)[-1]
        family = root.model.partition("_")[0]  # the family the chain started in: tokenformer or transformer
        sweep = sweeps[family]
        if run.name in compared:
            run = dataclasses.replace(run, sweep=sweep)
        elif run.grow_from and root.name in compared:  # the grid its chain's head chose on
            factor = recipe.stage_lr_scale.get(family, 1.0)
            rule = CHAIN_RULE + (f", here x {factor:.3g} (`recipes.PROGRESSIVE`)" if factor != 1.0 else "")
            run = dataclasses.replace(run, sweep=dataclasses.replace(sweep, anchor=root.name, rule=rule, scale=factor))
        out.append(run)
    return out


def growth_note(run: Run) -> str:
    options = run.grow_options
    if "pin_tau" not in options:
        exact = options.get("net2net", "exact") == "exact"
        return "Net2Net widening, " + ("function-preserving" if exact else "new blocks freshly initialised (Eq. 14)")
    tau = "tau pinned (exact growth)" if options["pin_tau"] else "tau follows the new n (as the paper)"
    return f"{options.get('new_keys', 'zero')} new keys, {tau}"


def ablation_chain(
    models: list[str],
    overrides: list[dict[str, Any]],
    first: tuple[str, Budget],
    stages: dict[str, Budget],
    grow_options: dict[str, Any],
    suffix: str,
    **common: Any,
) -> list[Run]:
    """A second growth chain from the same first run, at the first stage budget only, with other grow options; its
    runs are labelled `<stage label><suffix>`."""
    label, budget = next(iter(stages.items()))
    return growth_chains(models, overrides, first, {f"{label}{suffix}": budget}, grow_options, **common)[1:]


def scratch_runs(models: list[str], overrides: list[dict[str, Any]], budgets: dict[str, Budget], **common) -> list[Run]:
    """Every model trained from scratch on every budget (label -> budget)."""
    return [
        Run(f"{model}_{label}", model, budget, extra, **common)
        for model, extra in zip(models, overrides, strict=True)
        for label, budget in budgets.items()
    ]


def rows(table: str, runs: list[Run], results: dict[str, dict], scale: Scale, paper: dict) -> list[Row]:
    """Per run: validation perplexity beside the paper's, training FLOPs of the stage and cumulated along its chain,
    and for a grown run how much growth itself moved the validation loss (0 only for exact growth)."""
    by_name = {r.name: r for r in runs}
    note = scale.note
    out = []
    for run in runs:
        done = results.get(run.name, {})
        ppl = done.get("val_ppl")
        expected = paper.get((table, run.name, "val_ppl"))
        status = compare(expected, ppl, PPL_TOLERANCE)
        out.append(
            Row(
                table=table,
                row=run.name,
                metric="val_ppl",
                paper=expected,
                ours=ppl,
                unit="perplexity",
                run=run.name,
                status=status,
                note=note,
            )
        )
        out.append(
            Row(
                table=table,
                row=run.name,
                metric="train_flops_stage",
                paper=None,
                ours=run.train_flops(),
                unit="FLOPs",
                run=run.name,
            )
        )
        if "val_loss_after_growth" in done:
            change = done["val_loss_after_growth"] - done["val_loss_before_growth"]
            out.append(
                Row(
                    table=table,
                    row=run.name,
                    metric="val_loss_change_at_growth",
                    paper=None,
                    ours=change,
                    unit="nats/token",
                    run=run.name,
                    status="measured",
                    note=f"{growth_note(run)}; {note}".strip("; "),
                )
            )
        if run.grow_from:
            out.append(
                Row(
                    table=table,
                    row=run.name,
                    metric="stage_steps",
                    ours=run.budget.steps,
                    unit="steps",
                    run=run.name,
                    note=f"{run.budget.warmup_steps} of them a restart to the peak lr (warmup), "
                    "then cosine: the paper's schedule at every stage",
                )
            )
            cumulative = sum(r.train_flops() for r in growth_chain(run, by_name))
            out.append(
                Row(
                    table=table,
                    row=run.name,
                    metric="train_flops_cumulative",
                    paper=None,
                    ours=cumulative,
                    unit="FLOPs",
                    run=run.name,
                    note="this stage plus every stage it was grown from",
                )
            )
    return out


def stage_gain(done: dict) -> float | None:
    """What a grown run gained over its stage: the validation loss of the model it grew from (on this run's data,
    measured before growth) minus its own final one."""
    before, after = done.get("val_loss_before_growth"), done.get("val_loss")
    return None if None in (before, after) else before - after


def gain_claim(
    table: str, statement: str, scale: Scale, grown: Run, net2net: Run, results: dict[str, dict]
) -> list[Row]:
    """The claim that growing `grown` by tokens beats growing `net2net`, measured as growth: what each gained from the
    model it grew from (margin: the first's gain minus the second's, per seed; four measurements), with the final
    losses' difference and the gap between the starting points beside it (those differ by the base models, not by
    the growth). The two families are compared at equal total parameters (the paper's size labels), within 3%."""
    ours, theirs = grown.name, net2net.name
    unmatched = parameter_match(table, {ours: grown.config, theirs: net2net.config}, "total")[1]
    claim = contrast_claim(
        table,
        f"{ours}_vs_{theirs}",
        f"{statement} (what each gains over its stage from the model it grew from)",
        scale,
        results,
        {ours: 1.0, theirs: -1.0},
        "stage_gain",
        lambda _, done: stage_gain(done),
        runs=(ours, theirs),
        unmatched=unmatched,
    )

    return [
        claim,
        difference_row(
            table,
            "final_loss_margin",
            ours,
            theirs,
            "val_loss",
            results,
            f"{theirs}'s final loss minus {ours}'s, mean over seeds",
        ),
        difference_row(
            table,
            "start_gap",
            ours,
            theirs,
            "val_loss_before_growth",
            results,
            f"the models they grew from: {theirs}'s source's loss minus {ours}'s, on the same data",
        ),
    ]


def difference_row(
    table: str, metric: str, ours: str, theirs: str, key: str, results: dict[str, dict], note: str
) -> Row:
    """`theirs`' `key` minus `ours`', mean over the seeds both finished: shown beside a claim, not judged."""
    values = paired_margins(results, (ours, theirs), metric_margin(key, scale_by=-1.0))
    return Row(
        table=table,
        row=f"{ours}_vs_{theirs}",
        metric=metric,
        ours=statistics.mean(values.values()) if values else None,
        unit="nats/token",
        run=f"{ours},{theirs}",
        status="measured" if values else "not_run",
        note=note,
    )


def parameter_match_rows(table: str) -> list[Row]:
    """Each size's Transformer against the Tokenformer of the same label, at the paper's presets: the two families are
    compared at "equal" size, and the tied 24 x 2048 Transformer (App. D/E) is 6.3% below the Tokenformer-1.4B."""
    out = []
    for size in SIZES:
        tokenformer, transformer = (
            sum(formula_params(get_config(f"{f}_{size}")).values()) for f in ("tokenformer", "transformer")
        )
        note = f"{transformer:,} vs tokenformer_{size} {tokenformer:,} parameters (paper presets)"
        out.append(
            Row(
                table=table,
                row=f"transformer_{size}",
                metric="params_vs_tokenformer",
                paper=None,
                ours=transformer / tokenformer - 1,
                unit="fraction",
                run=f"transformer_{size}",
                status="measured",
                note=note,
            )
        )
    return out


def parameter_counts(table: str, runs: list[Run]) -> list[Row]:
    """Total and non-embedding parameters of every model this scale trains (the arms of its equal-size claims)."""
    return parameter_match(table, {run.name: run.config for run in runs}, "total")[0]


Claims = Callable[[str, dict[str, dict]], list[Row]]


def experiment(
    name: str,
    description: str,
    table: str,
    runs: Callable[[str], list[Run]],
    title: str,
    claims: Claims = lambda scale, results: [],
    comparisons: Callable[[Scale], list[Comparison]] | None = None,
) -> Experiment:
    """A progressive-scaling experiment: rows of `table` beside the Tokenformer paper's, the two families' parameter
    match, its `claims` and the `comparisons` they make, and the perplexity figure."""
    return Experiment(
        comparisons=comparisons,
        name=name,
        description=description,
        runs=runs,
        report=lambda scale, results: (
            rows(table, runs(scale), results, scale, published("tokenformer"))
            + parameter_match_rows(table)
            + parameter_counts(table, runs(scale))
            + claims(scale, results)
        ),
        figure=lambda scale, results, path: figure(f"{title} ({scale} scale)", runs(scale), results, path),
    )
