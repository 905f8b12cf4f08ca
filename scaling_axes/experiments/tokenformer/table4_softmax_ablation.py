"""Tokenformer Table 4: the Pattention normalisation on ImageNet, ViT-Tokenformer-B/16: softmax, GeLU + L1 norm and
GeLU + L2 norm (the paper's Eq. 4), and the paper's two steps between them as rows.

The table's body is missing from the review version; its text gives the steps: replacing softmax's exp by GeLU adds
2.1 points of top-1, then the L2 norm in place of the L1 adds 0.8. "GeLU + L1 norm" is read as softmax with GELU for
exp, n GELU(A) / ||GELU(A)||_1 (`gelu_l1_norm`; no released code has it). Each step is measured as the difference of
two runs' top-1 beside the paper's.
"""

from __future__ import annotations

import dataclasses

from scaling_axes.experiments.tokenformer import vit_setup
from scaling_axes.harness.claims.outcomes import out_of_reach
from scaling_axes.harness.claims.verdicts import contrast_claim
from scaling_axes.harness.results import Row, published
from scaling_axes.harness.scales import Scale

VARIANTS = {
    "vit_tokenformer_b16_softmax": "softmax",
    "vit_tokenformer_b16_gelu_l1_norm": "gelu_l1_norm",
    "vit_tokenformer_b16": "l2_norm_gelu",
}
STEPS = {
    "gelu_instead_of_exp": ("vit_tokenformer_b16_softmax", "vit_tokenformer_b16_gelu_l1_norm"),
    "l2_instead_of_l1": ("vit_tokenformer_b16_gelu_l1_norm", "vit_tokenformer_b16"),
}
STEP_TOLERANCE = 0.3  # percentage points


def step_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Each of the paper's two steps: the second run's top-1 minus the first's, in points."""
    paper, rows = published("tokenformer"), []
    for step, (before, after) in STEPS.items():
        expected = paper[("table4", step, "top1_delta")]
        if not all(results.get(name, {}).get("val_top1") is not None for name in (before, after)):
            rows.append(
                Row(
                    table="table4",
                    row=step,
                    metric="top1_delta",
                    paper=expected,
                    ours=None,
                    unit="points",
                    status="not_run",
                )
            )
            continue
        delta = 100 * (results[after]["val_top1"] - results[before]["val_top1"])
        status = (
            "measured"
            if not scale.paper_configs
            else ("match" if abs(delta - expected) <= STEP_TOLERANCE else "differs")
        )
        rows.append(
            Row(
                table="table4",
                row=step,
                metric="top1_delta",
                paper=expected,
                ours=delta,
                unit="points",
                status=status,
                note=f"{after} - {before}; {scale.note}".strip("; "),
            )
        )
    return rows


def paper_margin() -> float:
    """The paper's two steps from softmax to GeLU + L2 norm, in points of top-1."""
    paper = published("tokenformer")
    return sum(paper[("table4", step, "top1_delta")] for step in STEPS)


def claim_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Table 4's claim: GeLU + L2 norm beats softmax in top-1."""
    ours, softmax = "vit_tokenformer_b16", "vit_tokenformer_b16_softmax"
    statement = "GeLU + L2 normalisation beats softmax in ImageNet top-1"
    if why := vit_setup.reach(scale, paper_margin()):
        return [out_of_reach("table4", f"{ours}_vs_softmax", statement, "points", why, (ours, softmax))]
    return [
        contrast_claim(
            "table4",
            f"{ours}_vs_softmax",
            statement,
            scale,
            results,
            {ours: 100.0, softmax: -100.0},
            "val_top1",
            lambda _, done: done.get("val_top1"),
            "points",
        )
    ]


_ABLATION = vit_setup.ablation(
    "tokenformer_table4_softmax_ablation", __doc__, "table4", "normalization", VARIANTS, paper_margin()
)
EXPERIMENT = dataclasses.replace(
    _ABLATION,
    report=lambda scale, results: [
        *_ABLATION.report(scale, results),
        *step_rows(scale, results),
        *claim_rows(scale, results),
    ],
)
