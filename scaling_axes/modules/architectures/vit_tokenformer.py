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
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
import torch.nn.functional as F
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import register_notrace_module
from timm.models import generate_default_cfgs, register_model
from timm.models._builder import pretrained_cfg_for_features, resolve_pretrained_cfg
from timm.models._features import FeatureGetterNet
from timm.models.vision_transformer import Block, VisionTransformer
from torch import Tensor, nn

from scaling_axes.kernels import Kernel
from scaling_axes.modules.architectures.tokenformer import NORMALIZATIONS, Normalization, Pattention, QKVPattention
from scaling_axes.modules.registry import Architecture, get_config, register


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


register(
    Architecture(
        build=build_vit,
        params=lambda c: _vit(c, flops=False),
        flops=lambda c, seq_len: _vit(c, flops=True),
        lookup_params=lambda c: (c.tokens_per_image + 1) * c.embed_dim,  # positions and the class token
        width=lambda c: c.embed_dim,
        depth=lambda c: c.depth,
        outputs=lambda c: c.num_classes,
        example_input=lambda c, seq_len: (torch.zeros(1, c.in_chans, c.img_size, c.img_size), c.tokens_per_image),
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
