"""ViT-Tokenformer as timm models (the config, presets and formulas are `configs/vit_tokenformer_config.py`): timm's
`VisionTransformer` with Pattention blocks, its data configs, FX and feature-network support, and the names
registered with timm (`timm.create_model("vit_tokenformer_base_patch16_224")`) on import."""

from __future__ import annotations

import functools
import math

import torch.nn.functional as F
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import register_notrace_module
from timm.models import generate_default_cfgs, register_model
from timm.models._builder import pretrained_cfg_for_features, resolve_pretrained_cfg
from timm.models._features import FeatureGetterNet
from timm.models.vision_transformer import Block, VisionTransformer
from torch import Tensor, nn

from scaling_axes.modules.architectures.tokenformer import Pattention, QKVPattention
from scaling_axes.modules.configs.vit_tokenformer_config import TIMM_NAMES, ViTConfig
from scaling_axes.modules.registry import get_config


def _pattention(dim: int, slots: int, config: ViTConfig) -> Pattention:
    return Pattention(dim, dim, slots, config.normalization, kernel=config.kernel)


class PattentionSelfAttention(nn.Module):
    """Bidirectional multi-head attention whose Q/K/V and output projections are Pattentions (timm's attn_layer)."""

    def __init__(self, dim: int, num_heads: int, config: ViTConfig, **_: object) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = QKVPattention(lambda: _pattention(dim, config.qkv_tokens, config))
        self.proj = _pattention(dim, config.proj_tokens, config)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        batch, seq, dim = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # unpacked, not iterated: FX traces it (timm's Attention)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, dim))


class PattentionMLP(nn.Module):
    """The whole FFN as one Pattention d -> d with `ffn_tokens` slots (timm's mlp_layer)."""

    def __init__(self, in_features: int, config: ViTConfig, **_: object) -> None:
        super().__init__()
        self.fc = _pattention(in_features, config.ffn_tokens, config)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


def _layer_norm(parametric: bool):
    return functools.partial(nn.LayerNorm, eps=1e-6, elementwise_affine=parametric, bias=parametric)


def _tokenformer_block(config: ViTConfig, **kwargs) -> Block:
    """timm's Block (norms, drop path, residuals) with its attention and MLP swapped for the Pattention ones; timm
    only accepts attention classes, not configured instances."""
    block = Block(**{**kwargs, "norm_layer": _layer_norm(config.block_norm_parametric)})
    block.attn = PattentionSelfAttention(kwargs["dim"], kwargs["num_heads"], config)
    block.mlp = PattentionMLP(kwargs["dim"], config)
    return block


def build_vit(config: ViTConfig) -> VisionTransformer:
    """timm's VisionTransformer for `config`: Tokenformer blocks, or timm's own (with qkv biases) as the baseline."""
    common = dict(
        img_size=config.img_size,
        patch_size=config.patch_size,
        in_chans=config.in_chans,
        num_classes=config.num_classes,
        embed_dim=config.embed_dim,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_ratio,
        drop_path_rate=config.drop_path,
    )
    if not config.pattention:
        model = VisionTransformer(**common, qkv_bias=True)
    else:
        model = VisionTransformer(
            **common,
            norm_layer=_layer_norm(config.final_norm_parametric),
            block_fn=functools.partial(_tokenformer_block, config),
        )
        value_std = 2.0 / (config.depth * math.sqrt(config.embed_dim))
        for module in model.modules():
            if isinstance(module, Pattention):
                nn.init.normal_(module.key_param_tokens, 0.0, config.init_std)
                nn.init.normal_(module.value_param_tokens, 0.0, value_std)
    model.config = config
    return model


# timm's data config for each name (ImageNet at 224, MAE's eval crop): `timm.data.resolve_data_config(model=...)`
# reads it from the model's `pretrained_cfg`; there are no weights to download (Tokenformer issue #19). The position
# table fixes the input size, as in timm's own ViTs (`fixed_input_size`); a model built at another `img_size` says so
default_cfgs = generate_default_cfgs(
    {
        name: {
            "url": "",
            "num_classes": 1000,
            "input_size": (3, 224, 224),
            "fixed_input_size": True,
            "interpolation": "bicubic",
            "crop_pct": 0.875,
            "mean": IMAGENET_DEFAULT_MEAN,
            "std": IMAGENET_DEFAULT_STD,
            "first_conv": "patch_embed.proj",
            "classifier": "head",
        }
        for name in TIMM_NAMES
    }
)

# FX (timm's `create_feature_extractor`, torchvision's): a Pattention is one node of the graph, as timm keeps its
# fused ops out; inside, it dispatches on the input's device (Triton kernel or eager PyTorch), which FX cannot trace
register_notrace_module(Pattention)
register_notrace_module(QKVPattention)
# TorchScript: not scriptable, as timm declares a few of its families (its tests' EXCLUDE_JIT_FILTERS)
NOT_SCRIPTABLE = (
    "Pattention dispatches at run time between a Triton kernel (a torch.library custom op, imported "
    "when first used) and eager PyTorch; TorchScript compiles neither the import nor the dispatch. "
    "torch.compile and torch.export cover what TorchScript did"
)


FEATURE_OPTIONS = ("out_indices", "norm", "output_fmt")  # timm's feature-getter options (`features_only=True`)


def _register_with_timm(timm_name: str, preset: str) -> None:
    def create(
        pretrained: bool = False, features_only: bool = False, feature_cls: str = "getter", **overrides
    ) -> nn.Module:
        if pretrained:
            raise ValueError(f"{timm_name}: no pretrained weights are published (Tokenformer issue #19)")
        cfg = resolve_pretrained_cfg(
            timm_name, overrides.pop("pretrained_cfg", None), overrides.pop("pretrained_cfg_overlay", None)
        )
        overrides.pop("cache_dir", None)
        if "drop_path_rate" in overrides:
            overrides["drop_path"] = overrides.pop("drop_path_rate")
        features = {"out_indices": 3, **{k: overrides.pop(k) for k in FEATURE_OPTIONS if k in overrides}}
        model = build_vit(get_config(preset, **overrides))
        c = model.config
        model.pretrained_cfg = model.default_cfg = {
            **cfg.to_dict(),
            "num_classes": model.num_classes,
            "input_size": (c.in_chans, c.img_size, c.img_size),
        }
        return feature_network(model, feature_cls, features) if features_only else model

    create.__name__ = timm_name
    create.__module__ = __name__
    register_model(create)


def feature_network(model: VisionTransformer, feature_cls: str, options: dict) -> nn.Module:
    """`features_only=True`, as timm's ViTs: its blocks' outputs at `out_indices` through `forward_intermediates`
    (timm's `FeatureGetterNet`, the one feature class timm's ViTs take)."""
    if feature_cls != "getter":
        raise ValueError(
            f"feature_cls={feature_cls!r}: a ViT gives its features by forward_intermediates "
            "(feature_cls='getter'), as timm's own ViTs"
        )
    network = FeatureGetterNet(model, **options)
    network.pretrained_cfg = network.default_cfg = pretrained_cfg_for_features(model.pretrained_cfg)
    return network


for _timm_name, _preset in TIMM_NAMES.items():
    _register_with_timm(_timm_name, _preset)
