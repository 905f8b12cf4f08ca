"""Parameter and FLOP counts per component: closed-form formulas, and counts from an instantiated model.

FLOPs are matmul FLOPs (2 per multiply-add) per token of a forward pass at sequence length `seq_len`;
training is 3x forward (backward = 2x). Token-token attention is counted as a dense kernel computes it,
QK^T and AV over the whole square (4 L T d per token); norms, GELU and softmax are left out, as in Kaplan et al.
`counted_*` measure the same things on the model itself (meta device, `torch.utils.flop_counter`), so tests can hold
the formulas to them.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from modules.layers import DecoderConfig
from modules.modded_gpt import ModdedGPTConfig
from modules.mot import MoTConfig
from modules.registry import build_from_config
from modules.rmt import MatrixNorm, RMTConfig
from modules.tokenformer import TokenformerConfig
from modules.transformer import TransformerConfig
from modules.variants import VariantConfig
from modules.vit_tokenformer import ViTConfig

COMPONENTS = ("embedding", "qkv", "attention", "out", "ffn", "norms", "head", "other")
# module paths inside a block, per component; "other" is what a residual-path variant adds (modules/variants.py)
_BLOCK_PARTS = {"qkv": ("attn.qkv",), "out": ("attn.out", "attn.proj"), "ffn": ("ffn", "candidate", "mlp"),
                "other": ("gates", "attn_sdu", "ffn_sdu")}  # fmt: skip


def formula_params(config: DecoderConfig | RMTConfig) -> dict[str, int]:
    """Parameters per component from the config alone."""
    if isinstance(config, RMTConfig):
        return _rmt_params(config)
    if isinstance(config, ModdedGPTConfig):
        return _modded_params(config)
    if isinstance(config, ViTConfig):
        return _vit(config, flops=False)
    if isinstance(config, VariantConfig):
        return _variant(config, formula_params(_base(config)), flops=False)
    d, layers, vocab = config.d_model, config.n_layer, config.vocab_size
    params = dict.fromkeys(COMPONENTS, 0)
    params["embedding"] = vocab * d + (config.max_seq_len * d if config.position == "learned" else 0)
    params["head"] = 0 if config.tie_embeddings else vocab * d
    affine = d * (1 + config.norm_bias)  # per parametric norm: gain and bias
    params["norms"] = 2 * layers * affine * config.block_norm_parametric + affine * config.final_norm_parametric
    if isinstance(config, TokenformerConfig):
        params["qkv"] = layers * 3 * config.qkv_tokens * 2 * d
        params["out"] = layers * config.proj_tokens * 2 * d
        params["ffn"] = layers * config.ffn_tokens * 2 * d
    elif isinstance(config, TransformerConfig):
        bias, width = int(config.bias), config.n_head * config.d_head
        params["qkv"] = layers * (3 * d * width + 3 * width * bias)
        params["out"] = layers * (width * d + d * bias)
        params["ffn"] = layers * (2 * d * config.ffn_dim + (config.ffn_dim + d) * bias)
    else:
        raise TypeError(f"no parameter formula for {type(config).__name__}")
    return params


def formula_flops(config: DecoderConfig | RMTConfig, seq_len: int) -> dict[str, int]:
    """Forward matmul FLOPs per token and component at context `seq_len`."""
    if isinstance(config, RMTConfig):
        return _rmt_flops(config, seq_len)
    if isinstance(config, ModdedGPTConfig):
        return _modded_flops(config, seq_len)
    if isinstance(config, ViTConfig):
        return _vit(config, flops=True)
    if isinstance(config, VariantConfig):
        return _variant(config, formula_flops(_base(config), seq_len), flops=True)
    d, layers, width = config.d_model, config.n_layer, config.n_head * config.d_head
    flops = dict.fromkeys(COMPONENTS, 0)
    flops["attention"] = layers * 4 * seq_len * width
    flops["head"] = 2 * d * config.vocab_size
    if isinstance(config, TokenformerConfig):
        flops["qkv"] = layers * 3 * 2 * config.qkv_tokens * 2 * d
        flops["out"] = layers * 2 * config.proj_tokens * 2 * d
        flops["ffn"] = layers * 2 * config.ffn_tokens * 2 * d
    elif isinstance(config, TransformerConfig):
        flops["qkv"] = layers * 2 * d * 3 * width
        flops["out"] = layers * 2 * width * d
        flops["ffn"] = layers * 2 * 2 * d * config.ffn_dim
    else:
        raise TypeError(f"no FLOP formula for {type(config).__name__}")
    return flops


def _base(config: VariantConfig) -> TransformerConfig:
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(TransformerConfig)}
    return TransformerConfig(**fields)


def _variant(c: VariantConfig, base: dict[str, int], flops: bool) -> dict[str, int]:
    """The Transformer's counts changed by a Table 10 variant; FLOPs are 2 per weight (per token)."""
    per_weight, d, layers = (2 if flops else 1), c.d_model, c.n_layer
    out = dict(base)
    if c.variant == "highway":
        out["other"] = per_weight * layers * 4 * d * d
    elif c.variant == "depth_lstm":  # gates 2d -> 3d; the FFN's first matrix reads 2d; one norm per block
        out["other"] = per_weight * layers * 6 * d * d
        out["ffn"] = per_weight * layers * 3 * d * c.ffn_dim
        out["norms"] = 0 if flops else (layers + 1) * d * (1 + c.norm_bias)
    else:  # aggregation nodes: 2d -> d and a LayerNorm each
        out["other"] = (c.aggregation_stages - 1) * (per_weight * 2 * d * d + (0 if flops else d * (1 + c.norm_bias)))
    return out


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
        per_image = {"embedding": 2 * patch * patches, "qkv": 2 * qkv * tokens * layers,
                     "attention": 4 * tokens * d * tokens * layers, "out": 2 * out * tokens * layers,
                     "ffn": 2 * ffn * tokens * layers, "norms": 0, "head": 2 * d * c.num_classes,
                     "other": 0}  # fmt: skip
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


def _rmt_params(c: RMTConfig) -> dict[str, int]:
    """RMT: tables and keys of the embedding, 3R + R keys per attention, FF with its 2R keys, readout + W_U."""
    keys, width = c.rank * c.d_key, c.rank * c.d_value
    learned = c.position == "learned"
    return {
        "embedding": (c.vocab_size + (c.max_seq_len if learned else 0)) * width + keys * (2 if learned else 1),
        "qkv": c.n_layer * 3 * keys,
        "attention": 0,
        "out": c.n_layer * keys,
        "ffn": c.n_layer * (2 * keys + 2 * width * c.d_ff),
        "norms": (2 * c.n_layer + 1) * c.residual_size * (2 if c.norm == "layernorm" and c.norm_bias else 1),
        "head": keys + width * c.vocab_size,
        "other": 0,
    }


def _rmt_flops(c: RMTConfig, seq_len: int) -> dict[str, int]:
    """RMT: every retrieval/storage costs 2 D_k D_v per key; attention is R heads of size D_v."""
    key, width = 2 * c.d_key * c.d_value, c.rank * c.d_value
    return {
        "embedding": key * c.rank * (2 if c.position == "learned" else 1),
        "qkv": c.n_layer * key * 3 * c.rank,
        "attention": c.n_layer * 4 * seq_len * width,
        "out": c.n_layer * key * c.rank,
        "ffn": c.n_layer * (2 * key * c.rank + 2 * 2 * width * c.d_ff),
        "norms": 0,
        "head": key * c.rank + 2 * width * c.vocab_size,
        "other": 0,
    }


def _mot(c: ModdedGPTConfig) -> MoTConfig:
    """The backbone as a MoT with no-op mixin and mixout, so one formula covers both."""
    return c if isinstance(c, MoTConfig) else MoTConfig(**dataclasses.asdict(c), d_token=c.d_model)


def _byte_layer(c: MoTConfig, d: int, n_bytes: int, flops: bool) -> int:
    """A wired byte self-attention layer of width `d`: parameters, or FLOPs per byte over `n_bytes` bytes."""
    if not c.byte_attention_wired:
        return 0
    d_attention = max(1, d // c.byte_head_dim) * c.byte_head_dim
    if flops:
        return 2 * 4 * d * d_attention + 4 * n_bytes * d_attention
    return 4 * d * d_attention + 2


def _modded_params(config: ModdedGPTConfig) -> dict[str, int]:
    """Embeddings (tokens, value embeddings, mixin), Q/K/V and output of the attention layers, ReLU^2 MLPs, the
    head (with a byte mixout's layers) and the scalars (block and V lambdas, U-net skip weights) as "other"."""
    c = _mot(config)
    d, layers = c.d_model, c.n_layer
    attention_layers = layers - len(set(c.attention_free_layers))
    embedding, head_matrix = _modded_tables(c)
    if c.mixin == "concat":
        embedding += (c.d_token + c.bytes_per_token * c.d_byte) * d
        embedding += _byte_layer(c, c.d_byte, 0, flops=False) if c.byte_attention_in else 0
    elif c.mixin == "cross_attn":
        embedding += 4 * d * d + 1 + (_byte_layer(c, d, 0, flops=False) if c.byte_attention_in else 0)
    return {
        "embedding": embedding,
        "qkv": attention_layers * 3 * c.d_attention * d,
        "attention": 0,
        "out": attention_layers * c.d_attention * d,
        "ffn": layers * 2 * c.mlp_ratio * d * d,
        "norms": 0,
        "head": head_matrix + c.byte_layers_out * _byte_layer(c, c.d_byte_out, 0, flops=False),
        "other": 2 * layers + 2 * attention_layers + layers // 2,
    }


def _modded_tables(c: MoTConfig) -> tuple[int, int]:
    """(Lookup-table parameters: tokens, value embeddings, bytes; parameters of the head's output matrix)."""
    tables = c.vocab_size * c.d_token + c.value_embeddings * c.vocab_size * c.d_model
    if c.mixin != "noop":
        tables += c.byte_vocab.size * c.d_byte
    head_size = c.head_size if c.mixout == "noop" else c.byte_vocab.head_size
    return tables, c.d_byte_out * head_size


def _modded_flops(config: ModdedGPTConfig, seq_len: int) -> dict[str, int]:
    """Per token; byte-level work counts once per byte slot, byte attention over the 16 x seq_len byte stream."""
    c = _mot(config)
    d, slots = c.d_model, c.bytes_per_token
    attention_layers = c.n_layer - len(set(c.attention_free_layers))
    embedding = 0
    if c.mixin == "concat":
        embedding = 2 * (c.d_token + slots * c.d_byte) * d
        embedding += slots * _byte_layer(c, c.d_byte, slots * seq_len, flops=True) if c.byte_attention_in else 0
    elif c.mixin == "cross_attn":  # q and out d x d, k and v per byte, scores and weighted sum over the 16 bytes
        embedding = 2 * 2 * d * d + slots * 2 * 2 * d * d + 2 * 2 * slots * d
        embedding += slots * _byte_layer(c, d, slots * seq_len, flops=True) if c.byte_attention_in else 0
    if c.mixout == "noop":
        head = 2 * d * c.head_size
    else:
        byte_head = 2 * c.d_byte_out * c.byte_vocab.head_size
        head = slots * (byte_head + c.byte_layers_out * _byte_layer(c, c.d_byte_out, slots * seq_len, flops=True))
    return {
        "embedding": embedding,
        "qkv": attention_layers * 2 * d * 3 * c.d_attention,
        "attention": attention_layers * 4 * seq_len * c.d_attention,
        "out": attention_layers * 2 * c.d_attention * d,
        "ffn": c.n_layer * 2 * 2 * c.mlp_ratio * d * d,
        "norms": 0,
        "head": head,
        "other": 0,
    }


def _component(name: str) -> str:
    """The component a parameter of a DecoderLM or an RMT belongs to, from its name."""
    if name.startswith(("token_embedding", "position_embedding", "embed.", "value_embeds.", "patch_embed.",
                        "cls_token", "pos_embed")):  # fmt: skip
        return "embedding"
    if name.startswith(("lm_head", "readout", "mixout.", "head.")):
        return "head"
    if name.endswith(("lambdas", "skip_weights")):
        return "other"
    if "norm" in name:
        return "norms"
    if name.startswith("aggregators."):
        return "other"
    return next((part for part, paths in _BLOCK_PARTS.items() for path in paths if f".{path}." in name), "attention")


def embedding_params(config: DecoderConfig | RMTConfig) -> int:
    """Parameters of the lookup tables (tokens, positions, value and byte embeddings) and of the unembedding matrix:
    what a non-embedding count leaves out. Keys and projections are matrices that every token multiplies, so they stay
    in, as in the RMT code's `non_embedding_size` (reference rmt.md section 5); so do norms."""
    if isinstance(config, RMTConfig):
        width = config.rank * config.d_value
        return (2 * config.vocab_size + (config.max_seq_len if config.position == "learned" else 0)) * width
    if isinstance(config, ModdedGPTConfig):
        return sum(_modded_tables(_mot(config)))
    if isinstance(config, DecoderConfig):
        params = formula_params(config)
        return params["embedding"] + params["head"]
    raise TypeError(f"no embedding count for {type(config).__name__}")


def non_embedding_params(config: DecoderConfig | RMTConfig) -> int:
    """Every parameter but the lookup tables and the unembedding (see `embedding_params`)."""
    return sum(formula_params(config).values()) - embedding_params(config)


def lookup_tables(model: nn.Module) -> list[nn.Parameter]:
    """The model's embedding tables and its untied unembedding (`lm_head`), each once."""
    tables = {id(m.weight): m.weight for m in model.modules() if isinstance(m, nn.Embedding)}
    head = getattr(model, "lm_head", None)
    if head is not None:
        tables.setdefault(id(head.weight), head.weight)
    return list(tables.values())


NORM_LAYERS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, MatrixNorm)


def norm_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The gains and biases of every normalisation layer, of any rank (the RMT's are [D_v, D_k] matrices)."""
    return [p for m in model.modules() if isinstance(m, NORM_LAYERS) for p in m.parameters(recurse=False)]


def counted_non_embedding_params(model: nn.Module) -> int:
    """`non_embedding_params`, counted on the model."""
    return sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in lookup_tables(model))


def train_flops_per_token(config: DecoderConfig | RMTConfig, seq_len: int) -> int:
    """Training matmul FLOPs per token at context `seq_len`: 3 x forward, since backward costs twice the forward
    (the gradients of both operands of every product)."""
    return 3 * sum(formula_flops(config, seq_len).values())


def counted_params(model: nn.Module) -> dict[str, int]:
    """Parameters per component, counted on `model`."""
    counts = dict.fromkeys(COMPONENTS, 0)
    for name, p in model.named_parameters():
        counts[_component(name)] += p.numel()
    return counts


def counted_flops(config: DecoderConfig, seq_len: int, backward: bool = False) -> dict[str, int]:
    """Matmul FLOPs per token and component of one forward (and backward) pass, counted on a meta-device model.

    A block's `attn.qkv`, `attn.out` and `ffn` modules are their components, the rest of the block is attention;
    a top-level `embed` module is the embedding and what remains is the head."""
    with torch.device("meta"):
        model = build_from_config(config)
        if isinstance(config, ViTConfig):
            idx = torch.zeros(1, config.in_chans, config.img_size, config.img_size)
            seq_len = config.tokens_per_image
        else:
            idx = torch.zeros(1, seq_len, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            logits = model(idx)
            if backward:
                logits.sum().backward()
    per_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    root = type(model).__name__
    counts = dict.fromkeys(COMPONENTS, 0)
    layers = config.depth if isinstance(config, ViTConfig) else config.n_layer
    for i in range(layers):
        block = f"{root}.blocks.{i}"
        parts = {
            part: sum(per_module.get(f"{block}.{path}", 0) for path in paths) for part, paths in _BLOCK_PARTS.items()
        }
        for part, flops in parts.items():
            counts[part] += flops
        counts["attention"] += per_module.get(f"{block}.attn", 0) - parts["qkv"] - parts["out"]
    counts["embedding"] = per_module.get(f"{root}.embed", 0) + per_module.get(f"{root}.patch_embed", 0)
    aggregators = sum(v for k, v in per_module.items() if k.startswith(f"{root}.aggregators.") and k.count(".") == 2)
    counts["other"] += aggregators
    blocks = sum(per_module.get(f"{root}.blocks.{i}", 0) for i in range(layers))
    counts["head"] = per_module[root] - blocks - counts["embedding"] - aggregators
    return {c: flops // seq_len for c, flops in counts.items()}
