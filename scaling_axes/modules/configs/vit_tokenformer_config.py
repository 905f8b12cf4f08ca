"""ViT-Tokenformer (Tokenformer paper section 4.2, Table 2) as timm models, and the plain ViT baselines from timm.

timm's `VisionTransformer` with Pattention (`modules.architectures.tokenformer.Pattention`) in place of every Linear
in the blocks: separate Q/K/V Pattentions, an output Pattention and a single Pattention as the whole FFN; non-parametric
block LayerNorms and a parametric final norm ("noparamln_finalparam" in the released config names). The vision code
is not public (Tokenformer reference section 6), so two choices are ours and recorded here:

* Slot counts in the language models' proportion, n_qkv = n_out = n and n_ffn = 4n, with n chosen so that the
  counts fall within 0.1% of the paper's: B/16 n = 729 (109.0M), B/16 dagger n = 573 (86.0M), L/16 n = 1030
  (407.0M), L/16 dagger n = 776 (307.2M).
* Initialisation as the language model's official code: keys N(0, 0.02), values N(0, (2 / (L sqrt(d)))^2).

`timm.create_model("vit_tokenformer_base_patch16_224")` and the suite's `build_model("vit_tokenformer_b16")` build
the same model. `pattention=False` gives timm's own ViT (presets `vit_b16`, `vit_l16`: the baselines).

This file is the config, presets and formulas, with no torch; the timm model is `modules/timm_vit.py`, imported when
a ViT is built (`architectures/vit_tokenformer.py`; importing it registers the names with timm): timm imports
torchvision, which the commands that train nothing (`list`, `plan`, `--dry-run`) must not wait for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scaling_axes.kernels import Kernel
from scaling_axes.modules.configs.tokenformer_config import NORMALIZATIONS, Normalization
from scaling_axes.modules.registry import Architecture, register


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    img_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    drop_path: float = 0.1
    pattention: bool = True
    qkv_tokens: int = 768
    proj_tokens: int = 768
    ffn_tokens: int = 3072
    normalization: Normalization = "l2_norm_gelu"
    kernel: Kernel = "auto"  # Pattention: fused Triton where measured faster, else eager PyTorch (scaling_axes.kernels)
    block_norm_parametric: bool = False
    final_norm_parametric: bool = True
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.img_size % self.patch_size:
            raise ValueError(f"img_size={self.img_size} is not a multiple of patch_size={self.patch_size}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim={self.embed_dim} is not divisible by num_heads={self.num_heads}")
        if not self.pattention and not (self.block_norm_parametric and self.final_norm_parametric):
            raise ValueError("the timm ViT baseline (pattention=False) has parametric LayerNorms only")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization={self.normalization!r}; allowed: {', '.join(NORMALIZATIONS)}")

    @property
    def tokens_per_image(self) -> int:
        """Patches plus the class token: the sequence length of every block."""
        return (self.img_size // self.patch_size) ** 2 + 1


def _tokenformer(depth: int, dim: int, heads: int, slots: int) -> ViTConfig:
    return ViTConfig(
        embed_dim=dim, depth=depth, num_heads=heads, qkv_tokens=slots, proj_tokens=slots, ffn_tokens=4 * slots
    )


PRESETS = {
    "vit_b16": ViTConfig(pattention=False, block_norm_parametric=True),
    "vit_l16": ViTConfig(embed_dim=1024, depth=24, num_heads=16, pattention=False, block_norm_parametric=True),
    "vit_tokenformer_b16": _tokenformer(12, 768, 12, 729),
    "vit_tokenformer_b16_matched": _tokenformer(12, 768, 12, 573),
    "vit_tokenformer_l16": _tokenformer(24, 1024, 16, 1030),
    "vit_tokenformer_l16_matched": _tokenformer(24, 1024, 16, 776),
}


def _vit(c: ViTConfig, flops: bool) -> dict[str, int]:
    """ViT (timm baseline or Tokenformer), per image then divided by its tokens (patches + class token) for FLOPs:
    the patch embedding runs once per patch and the head once per image. `seq_len` is always the image's tokens."""
    d, layers, tokens, patches = c.embed_dim, c.depth, c.tokens_per_image, c.tokens_per_image - 1
    patch = c.patch_size**2 * c.in_chans * d
    if c.pattention:
        qkv, out, ffn = 3 * c.qkv_tokens * 2 * d, c.proj_tokens * 2 * d, c.ffn_tokens * 2 * d
        biases = {"qkv": 0, "out": 0, "ffn": 0}
    else:
        hidden = int(d * c.mlp_ratio)
        qkv, out, ffn = 3 * d * d, d * d, 2 * d * hidden
        biases = {"qkv": 3 * d, "out": d, "ffn": hidden + d}
    if flops:  # 2 per weight per token; attention over all tokens, both ways
        per_image = {
            "embedding": 2 * patch * patches,
            "qkv": 2 * qkv * tokens * layers,
            "attention": 4 * tokens * d * tokens * layers,
            "out": 2 * out * tokens * layers,
            "ffn": 2 * ffn * tokens * layers,
            "norms": 0,
            "head": 2 * d * c.num_classes,
            "other": 0,
        }
        return {k: v // tokens for k, v in per_image.items()}
    return {
        "embedding": patch + d + d + tokens * d,  # patch projection and its bias, class token, positions
        "qkv": layers * (qkv + biases["qkv"]),
        "attention": 0,
        "out": layers * (out + biases["out"]),
        "ffn": layers * (ffn + biases["ffn"]),
        "norms": layers * 4 * d * c.block_norm_parametric + 2 * d * c.final_norm_parametric,
        "head": d * c.num_classes + c.num_classes,
        "other": 0,
    }


def _image(c: ViTConfig, seq_len: int) -> tuple[Any, int]:
    """A ViT's example input for counting FLOPs: one image, and its tokens (patches and the class token)."""
    import torch

    return torch.zeros(1, c.in_chans, c.img_size, c.img_size), c.tokens_per_image


register(
    Architecture(
        params=lambda c: _vit(c, flops=False),
        flops=lambda c, seq_len: _vit(c, flops=True),
        lookup_params=lambda c: (c.tokens_per_image + 1) * c.embed_dim,  # positions and the class token
        width=lambda c: c.embed_dim,
        depth=lambda c: c.depth,
        outputs=lambda c: c.num_classes,
        example_input=_image,
        components=((r"^(patch_embed\.|cls_token|pos_embed)", "embedding"), (r"^head\.", "head")),
    ),
    PRESETS,
)

TIMM_NAMES = {
    "vit_tokenformer_base_patch16_224": "vit_tokenformer_b16",
    "vit_tokenformer_base_patch16_224_matched": "vit_tokenformer_b16_matched",
    "vit_tokenformer_large_patch16_224": "vit_tokenformer_l16",
    "vit_tokenformer_large_patch16_224_matched": "vit_tokenformer_l16_matched",
}
