"""ViT-Tokenformer's model (Tokenformer paper section 4.2): timm's VisionTransformer with Pattention, built by
`modules/timm_vit.py`, which is imported when a ViT is first built, since timm imports torchvision. Its config,
presets and counts are `configs/vit_tokenformer_config.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaling_axes.modules.configs.vit_tokenformer_config import ViTConfig
from scaling_axes.modules.registry import register_model, resolve

if TYPE_CHECKING:
    from torch import nn

TIMM_VIT = "scaling_axes.modules.timm_vit"


def build_vit(config: ViTConfig) -> nn.Module:
    """timm's VisionTransformer for `config` (`timm_vit.build_vit`)."""
    return resolve(f"{TIMM_VIT}:build_vit")(config)


register_model(ViTConfig, build_vit)
