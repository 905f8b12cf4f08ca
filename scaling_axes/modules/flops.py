"""Parameter and FLOP counts per component: closed-form formulas, and counts from an instantiated model.

FLOPs are matmul FLOPs (2 per multiply-add) per token of a forward pass at sequence length `seq_len`;
training is 3x forward (backward = 2x). Token-token attention is counted as a dense kernel computes it,
QK^T and AV over the whole square (4 L T d per token); norms, GELU and softmax are left out, as in Kaplan et al.
`counted_*` measure the same things on the model itself (meta device, `torch.utils.flop_counter`), so tests can hold
the formulas to them. The formulas import no torch (what plans runs reads them); what counts on a model does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from scaling_axes.modules.registry import COMPONENTS, architecture_of, build_from_config, norm_layers

if TYPE_CHECKING:
    from torch import nn

# module paths inside a block, per component, as every architecture here names them; "other" is what a
# residual-path variant adds (modules/architectures/variants.py)
_BLOCK_PARTS = {
    "qkv": ("attn.qkv",),
    "out": ("attn.out", "attn.proj"),
    "ffn": ("ffn", "candidate", "mlp"),
    "other": ("gates", "attn_sdu", "ffn_sdu"),
}
_SHARED_COMPONENTS = ((r"^(token|position)_embedding\.", "embedding"), (r"^lm_head\.", "head"))


def formula_params(config: Any) -> dict[str, int]:
    """Parameters per component from the config alone (its architecture's registered formula)."""
    return architecture_of(config).params(config)


def formula_flops(config: Any, seq_len: int) -> dict[str, int]:
    """Forward matmul FLOPs per token and component at context `seq_len`."""
    return architecture_of(config).flops(config, seq_len)


def embedding_params(config: Any) -> int:
    """Parameters of the lookup tables (tokens, positions, value and byte embeddings) and of the unembedding matrix:
    what a non-embedding count leaves out. Keys and projections are matrices that every token multiplies, so they stay
    in, as in the RMT code's `non_embedding_size` (reference rmt.md section 5); so do norms."""
    return architecture_of(config).lookup_params(config)


def _component(name: str, patterns: tuple[tuple[str, str], ...]) -> str:
    """The component of parameter `name`: its architecture's names first, then the names every model here shares."""
    for pattern, component in (*patterns, *_SHARED_COMPONENTS):
        if re.search(pattern, name):
            return component
    if "norm" in name:
        return "norms"
    return next((part for part, paths in _BLOCK_PARTS.items() for path in paths if f".{path}." in name), "attention")


def norm_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The gains and biases of every normalisation layer, of any rank (the RMT's are [D_v, D_k] matrices)."""
    from torch import nn

    layers = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, *norm_layers())
    return [p for m in model.modules() if isinstance(m, layers) for p in m.parameters(recurse=False)]


def meta_model(config: Any) -> nn.Module:
    """`config`'s model on the meta device: its shapes and no memory, for counting."""
    import torch

    with torch.device("meta"):
        return build_from_config(config)


def counted_params(model: nn.Module) -> dict[str, int]:
    """Parameters per component, counted on `model`."""
    patterns = architecture_of(model.config).components
    counts = dict.fromkeys(COMPONENTS, 0)
    for name, p in model.named_parameters():
        counts[_component(name, patterns)] += p.numel()
    return counts


def counted_flops(config: Any, seq_len: int, backward: bool = False) -> dict[str, int]:
    """Matmul FLOPs per token and component of one forward (and backward) pass, counted on a meta-device model.

    A block's `attn.qkv`, `attn.out` and `ffn` modules are their components, the rest of the block is attention;
    a top-level `embed` module is the embedding and what remains is the head."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    architecture = architecture_of(config)
    model = meta_model(config)
    with torch.device("meta"):
        idx, seq_len = architecture.example_input(config, seq_len)
        with FlopCounterMode(display=False) as counter:
            logits = model(idx)
            if backward:
                logits.sum().backward()
    per_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    return {
        c: flops // seq_len
        for c, flops in _per_component(per_module, type(model).__name__, architecture.depth(config)).items()
    }


def _per_component(per_module: dict[str, int], root: str, layers: int) -> dict[str, int]:
    counts = dict.fromkeys(COMPONENTS, 0)
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
    return counts


def non_embedding_params(config: Any) -> int:
    """Every parameter but the lookup tables and the unembedding (see `embedding_params`)."""
    return sum(formula_params(config).values()) - embedding_params(config)


def lookup_tables(model: nn.Module) -> list[nn.Parameter]:
    """The model's embedding tables and its untied unembedding (`lm_head`), each once."""
    from torch import nn

    tables = {id(m.weight): m.weight for m in model.modules() if isinstance(m, nn.Embedding)}
    head = getattr(model, "lm_head", None)
    if head is not None:
        tables.setdefault(id(head.weight), head.weight)
    return list(tables.values())


def counted_non_embedding_params(model: nn.Module) -> int:
    """`non_embedding_params`, counted on the model."""
    return sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in lookup_tables(model))


def train_flops_per_token(config: Any, seq_len: int) -> int:
    """Training matmul FLOPs per token at context `seq_len`: 3 x forward, since backward costs twice the forward
    (the gradients of both operands of every product)."""
    return 3 * sum(formula_flops(config, seq_len).values())
