"""Tokenformer Table 4: the Pattention normalisation on ImageNet, ViT-Tokenformer-B/16: the paper's L2-norm + GELU
against the plain (n x) softmax and the code's GELU + L2-norm.

The paper's ablation numbers are not in this suite's references, so `paper` stays empty until they are added to
`results/published/tokenformer.csv` with their source; the ranking is what to compare.
"""

from __future__ import annotations

from experiments import vit_setup
from experiments.runner import main

VARIANTS = {"vit_tokenformer_b16": "l2_norm_gelu", "vit_tokenformer_b16_softmax": "softmax",
            "vit_tokenformer_b16_gelu_l2_norm": "gelu_l2_norm"}  # fmt: skip
EXPERIMENT = vit_setup.ablation("tokenformer_table4_softmax_ablation", __doc__, "table4", "normalization", VARIANTS)

if __name__ == "__main__":
    main(EXPERIMENT)
