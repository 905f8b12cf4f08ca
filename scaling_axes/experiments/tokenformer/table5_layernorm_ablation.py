"""Tokenformer Table 5: non-parametric block LayerNorms (the paper's choice) against parametric ones, in
ViT-Tokenformer-B/16 on ImageNet (the final norm is parametric in both).

The paper's ablation numbers are not in this suite's references, so `paper` stays empty until they are added to
`results/published/tokenformer.csv` with their source.
"""

from __future__ import annotations

import dataclasses

from scaling_axes.experiments.tokenformer import vit_setup
from scaling_axes.harness.claims.outcomes import out_of_reach
from scaling_axes.harness.claims.verdicts import as_good_as
from scaling_axes.harness.results import Row
from scaling_axes.harness.scales import Scale

VARIANTS = {"vit_tokenformer_b16": False, "vit_tokenformer_b16_parametric_ln": True}
AS_GOOD_AS = 0.5  # points of top-1: "as good as" read as no worse than this


def claim_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Table 5's claim: non-parametric block LayerNorms are as good as parametric ones (top-1 no more than
    AS_GOOD_AS points below; the paper gives no difference, so its margin is taken as the tolerance)."""
    statement = "non-parametric LayerNorm is as good as parametric in top-1"
    if why := vit_setup.reach(scale, AS_GOOD_AS):
        return [
            out_of_reach(
                "table5",
                "_vs_".join(VARIANTS),
                f"{statement} (within {AS_GOOD_AS:g} points)",
                "points",
                why,
                tuple(VARIANTS),
            )
        ]
    return [as_good_as("table5", statement, scale, *VARIANTS, results)]


_ABLATION = vit_setup.ablation(
    "tokenformer_table5_layernorm_ablation", __doc__, "table5", "block_norm_parametric", VARIANTS, AS_GOOD_AS
)
EXPERIMENT = dataclasses.replace(
    _ABLATION, report=lambda scale, results: [*_ABLATION.report(scale, results), *claim_rows(scale, results)]
)
