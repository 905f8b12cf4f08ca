"""Tokenformer Table 5: non-parametric block LayerNorms (the paper's choice) against parametric ones, in
ViT-Tokenformer-B/16 on ImageNet (the final norm is parametric in both).

The paper's ablation numbers are not in this suite's references, so `paper` stays empty until they are added to
`results/published/tokenformer.csv` with their source.
"""

from __future__ import annotations

from scaling_axes.experiments.tokenformer import vit_setup

VARIANTS = {"vit_tokenformer_b16": False, "vit_tokenformer_b16_parametric_ln": True}
EXPERIMENT = vit_setup.ablation(
    "tokenformer_table5_layernorm_ablation", __doc__, "table5", "block_norm_parametric", VARIANTS
)
