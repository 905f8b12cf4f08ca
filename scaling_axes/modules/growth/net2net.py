"""Net2Net width growth (Chen et al. 2015, "Net2WiderNet") for the pre-LN Transformer baseline.

Hidden units that feed an elementwise function are duplicated and their outgoing weights split among the copies:
the MLP's hidden units, the value dimensions of each head and, when the head count grows, whole heads. Two parts of
a pre-LN Transformer need more than duplication to keep the function exactly:

* The residual stream. LayerNorm averages over d, so duplicated residual units change its mean and variance
  unless every unit is copied equally often (an integer ratio; 1024 -> 1536 is not). Instead each new residual
  coordinate carries the mean of the old ones: the embedding's new columns and every residual write's new rows
  are the means of the old ones. LayerNorm then maps the new coordinates to exactly zero, keeps the mean and scales
  the variance by d/d', which the widened norms undo with gain * sqrt(d/d') and eps * d/d' (so the widened
  config's `norm_eps` differs from the preset's). Weights that read the normed stream keep their fresh random
  columns for the new coordinates (they see zeros, so the function is unchanged, but gradients flow).
* Attention logits. A wider head changes the 1/sqrt(d_head) scale and adds q.k terms: the new query dimensions are
  zero and the old query weights are scaled by sqrt(d_head'/d_head).

The tied embedding is widened as above and serves as the head, whose new columns meet the final norm's zero
outputs; a tied model may widen into an untied one. Rotary embeddings cannot survive a change of head size (the
frequencies depend on it), so RoPE models may only add heads of the same size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from scaling_axes.modules.architectures.transformer import Transformer
from scaling_axes.modules.configs.transformer_config import TransformerConfig
from scaling_axes.modules.registry import get_config, replace_config


def widen(
    model: Transformer,
    target: str | TransformerConfig,
    noise: float = 0.0,
    generator: torch.Generator | None = None,
) -> Transformer:
    """A Transformer of `target`'s width computing `model`'s function; `noise` > 0 adds N(0, (noise * std)^2) to
    every weight matrix to break the symmetry between copies (and then preserves the function only approximately).
    """
    old = model.config
    new = get_config(target) if isinstance(target, str) else target
    _check_compatible(old, new)
    new = replace_config(new, norm_eps=old.norm_eps * old.d_model / new.d_model)
    ref = next(model.parameters())
    wide = Transformer(new).to(device=ref.device, dtype=ref.dtype)
    plan = _WidthPlan(old, new, generator)
    state = plan.widen_state(model.state_dict(), wide.state_dict())
    wide.load_state_dict(state)
    if noise:
        with torch.no_grad():
            for p in wide.parameters():
                if p.dim() == 2:
                    p.add_(noise * p.std() * torch.randn(p.shape, generator=generator).to(p))
    return wide


def widen_with_new_parameters(model: Transformer, target: str | TransformerConfig) -> Transformer:
    """Net2Net as the Tokenformer paper's Eq. 14 describes it (its baseline): the old weights fill the leading block of
    each wider tensor, Q, K and V each in its own third, and every new block keeps the fresh init of a model built at
    the target width. Unlike `widen`, this does not preserve the function (the paper's point against Net2Net)."""
    old = model.config
    new = get_config(target) if isinstance(target, str) else target
    _check_compatible(old, new)
    ref = next(model.parameters())
    wide = Transformer(new).to(device=ref.device, dtype=ref.dtype)
    state = wide.state_dict()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            thirds = ".attn.qkv." in name  # [q; k; v] rows: each old third into the leading rows of its new third
            into = state[name].view(3, -1, *state[name].shape[1:]) if thirds else state[name][None]
            source = tensor.view(3, -1, *tensor.shape[1:]) if thirds else tensor[None]
            into[(slice(None), *(slice(0, n) for n in source.shape[1:]))] = source
    wide.load_state_dict(state)
    return wide


def grow_transformer(
    model: Transformer, target: str | TransformerConfig, noise: float = 0.0, seed: int = 0, net2net: str = "exact"
) -> Transformer:
    """The registry's growth of a Transformer: `widen` (`noise`, copies drawn from `seed`) or, with
    `net2net="new_parameters"`, the Tokenformer paper's Eq. 14 (the new blocks' init drawn from the registry's seed)."""
    if net2net not in ("exact", "new_parameters"):
        raise ValueError(f"net2net={net2net!r}; allowed: 'exact', 'new_parameters'")
    if net2net == "new_parameters":
        return widen_with_new_parameters(model, target)
    return widen(model, target, noise=noise, generator=torch.Generator().manual_seed(seed))


def _check_compatible(old: TransformerConfig, new: TransformerConfig) -> None:
    same = ("n_layer", "vocab_size", "position", "max_seq_len", "bias", "rotary_pct", "rope_base")
    differing = {f: (getattr(old, f), getattr(new, f)) for f in same if getattr(old, f) != getattr(new, f)}
    if differing:
        raise ValueError(f"Net2Net widening keeps these fields; they differ (old, target): {differing}")
    if new.d_model < old.d_model or new.ffn_dim < old.ffn_dim or new.n_head < old.n_head:
        raise ValueError(
            f"target must be at least as wide: d_model {old.d_model} -> {new.d_model}, "
            f"ffn {old.ffn_dim} -> {new.ffn_dim}, heads {old.n_head} -> {new.n_head}"
        )
    if any(c.n_head * c.d_head != c.d_model for c in (old, new)):
        raise ValueError("Net2Net widens models whose attention width n_head x d_head is d_model; set head_dim=0")
    if new.n_head != old.n_head and new.d_head != old.d_head:
        raise ValueError(
            f"grow either the head count or the head size, not both: {old.n_head}x{old.d_head} -> "
            f"{new.n_head}x{new.d_head}"
        )
    if old.position == "rope" and new.d_head != old.d_head:
        raise ValueError(
            f"rotary frequencies depend on the head size; d_head {old.d_head} -> {new.d_head} "
            "cannot preserve the function (add heads instead)"
        )
    if not (old.block_norm_parametric and old.final_norm_parametric and old.norm_bias):
        raise ValueError("Net2Net needs parametric LayerNorms with biases: the widened gains absorb the variance")
    if not old.tie_embeddings and new.tie_embeddings:
        raise ValueError("an untied model cannot be widened into a tied one")


def _unit_map(n_old: int, n_new: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """new unit -> old unit (the first n_old map to themselves, the rest to random old units), and copies per unit."""
    extra = torch.randint(0, n_old, (n_new - n_old,), generator=generator)
    mapping = torch.cat((torch.arange(n_old), extra))
    return mapping, torch.bincount(mapping, minlength=n_old)


class _WidthPlan:
    """The unit maps of one widening, and how each tensor of the state dict is widened with them."""

    def __init__(self, old: TransformerConfig, new: TransformerConfig, generator: torch.Generator | None) -> None:
        self.old, self.new = old, new
        self.heads, self.head_copies = _unit_map(old.n_head, new.n_head, generator)
        self.dims, self.dim_copies = _unit_map(old.d_head, new.d_head, generator)
        self.ffn = [_unit_map(old.ffn_dim, new.ffn_dim, generator) for _ in range(old.n_layer)]

    def widen_state(self, src: dict[str, Tensor], fresh: dict[str, Tensor]) -> dict[str, Tensor]:
        out = {"token_embedding.weight": self.residual_rows(src["token_embedding.weight"].T).T}
        if "position_embedding.weight" in src:
            out["position_embedding.weight"] = self.residual_rows(src["position_embedding.weight"].T).T
        out.update(self.norm(src, "final_norm"))
        for i in range(self.old.n_layer):
            out.update(self.block(src, fresh, f"blocks.{i}.", *self.ffn[i]))
        if "lm_head.weight" in fresh:
            head = src.get("lm_head.weight", src["token_embedding.weight"])
            out["lm_head.weight"] = self.residual_cols(head, fresh["lm_head.weight"])
        return out

    def residual_rows(self, w: Tensor) -> Tensor:
        """Rows write the residual stream: the new rows are the mean of the old ones."""
        extra = self.new.d_model - self.old.d_model
        return torch.cat((w, w.mean(0, keepdim=True).expand(extra, *w.shape[1:])))

    def residual_cols(self, w: Tensor, fresh: Tensor) -> Tensor:
        """Columns read the normed residual stream, zero in the new coordinates: keep the fresh init there."""
        return torch.cat((w, fresh[..., self.old.d_model :]), dim=-1)

    def norm(self, src: dict[str, Tensor], name: str) -> dict[str, Tensor]:
        gain = math.sqrt(self.old.d_model / self.new.d_model)
        weight, bias = src[f"{name}.weight"], src[f"{name}.bias"]
        extra = self.new.d_model - self.old.d_model
        return {
            f"{name}.weight": torch.cat((weight, weight.new_ones(extra))) * gain,
            f"{name}.bias": torch.cat((bias, bias.new_zeros(extra))),
        }

    def block(self, src, fresh, prefix: str, ffn_map: Tensor, ffn_copies: Tensor) -> dict[str, Tensor]:
        out = {**self.norm(src, f"{prefix}attn_norm"), **self.norm(src, f"{prefix}ffn_norm")}
        qkv = f"{prefix}attn.qkv."
        out[f"{qkv}weight"] = self.residual_cols(
            self.qkv_rows(src[f"{qkv}weight"], fresh[f"{qkv}weight"]), fresh[f"{qkv}weight"]
        )
        o = f"{prefix}attn.out."
        out[f"{o}weight"] = self.residual_rows(self.head_cols(src[f"{o}weight"]))
        fc, proj = f"{prefix}ffn.0.", f"{prefix}ffn.2."
        out[f"{fc}weight"] = self.residual_cols(src[f"{fc}weight"][ffn_map], fresh[f"{fc}weight"])
        out[f"{proj}weight"] = self.residual_rows(src[f"{proj}weight"][:, ffn_map] / ffn_copies[ffn_map])
        if self.old.bias:
            out[f"{qkv}bias"] = self.qkv_rows(src[f"{qkv}bias"], fresh[f"{qkv}bias"])
            out[f"{o}bias"] = self.residual_rows(src[f"{o}bias"])
            out[f"{fc}bias"] = src[f"{fc}bias"][ffn_map]
            out[f"{proj}bias"] = self.residual_rows(src[f"{proj}bias"])
        return out

    def qkv_rows(self, w: Tensor, fresh: Tensor) -> Tensor:
        """Q, K, V rows (head-major): copy heads; zero new query dims and rescale old ones; copy value dims."""
        old, new = self.old, self.new
        fresh = fresh[:, : w.shape[1]] if w.dim() == 2 else fresh  # columns are widened by residual_cols
        q, k, v = w.reshape(3, old.n_head, old.d_head, *w.shape[1:])[:, self.heads]
        new_key_dims = fresh.reshape(3, new.n_head, new.d_head, *w.shape[1:])[1, :, old.d_head :]
        q = torch.cat((q * math.sqrt(new.d_head / old.d_head), torch.zeros_like(new_key_dims)), dim=1)
        k = torch.cat((k, new_key_dims), dim=1)
        return torch.stack((q, k, v[:, self.dims])).reshape(3 * new.d_model, *w.shape[1:])

    def head_cols(self, w: Tensor) -> Tensor:
        """Output projection columns (head, dim): follow the copies and split among them."""
        old, new = self.old, self.new
        cols = w.reshape(w.shape[0], old.n_head, old.d_head)[:, self.heads][:, :, self.dims]
        copies = self.head_copies[self.heads][:, None] * self.dim_copies[self.dims][None, :]
        return (cols / copies).reshape(w.shape[0], new.d_model)
