"""The modded-nanogpt GPT-2-medium backbone that the Mixture of Tokenizers runs used (Keller Jordan's speedrun).

The MoT reference's section 4.1 describes it.

Keller Jordan's speedrun record 021425_GPT2MediumOptCoeffs as the MoT code modified it: 16 x 1024, 8 heads of 128,
ReLU^2 MLP, QK RMS-norm, half-truncated RoPE, attention scale 0.12 over a plain causal mask, no attention in layer 7,
three token value embeddings mixed into V in the layers 0,1,2 ... 0,1,2 (`v = l0 v + l1 ve`), U-net skips with
learned weights, `x = l0 x + l1 x0` before every block, weightless RMS norms, zero-initialised output projections
and head, untied head over the vocabulary padded to a multiple of 128, logits soft-capped as 30 sigmoid(z / 7.5).
The optimiser it was trained with (Muon + Adam) is `scaling_axes.modules.tasks.optim.MuonWithAdam`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from scaling_axes.modules.architectures.layers import RotaryEmbedding, causal_attention, current_decoding
from scaling_axes.modules.configs.mot_config import ModdedGPTConfig
from scaling_axes.modules.registry import register_model


def rms_norm(x: Tensor) -> Tensor:
    """RMS norm without a weight, over the last dimension (every norm of this backbone)."""
    return F.rms_norm(x, (x.size(-1),))


def speedrun_linear(d_in: int, d_out: int, zero: bool = False) -> nn.Linear:
    """Bias-free Linear with the speedrun's init, uniform +-sqrt(3) * 0.5 / sqrt(d_in), or zeros."""
    linear = nn.Linear(d_in, d_out, bias=False)
    bound = math.sqrt(3) * 0.5 * d_in**-0.5
    nn.init.zeros_(linear.weight) if zero else nn.init.uniform_(linear.weight, -bound, bound)
    return linear


class QKV(nn.Module):
    """Three separate d_in -> d_attention matrices (Muon orthogonalises each), applied as one matmul."""

    def __init__(self, d_in: int, d_attention: int) -> None:
        super().__init__()
        bound = math.sqrt(3) * 0.5 * d_in**-0.5
        self.q, self.k, self.v = (nn.Parameter(torch.empty(d_attention, d_in).uniform_(-bound, bound)) for _ in "qkv")

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, torch.cat((self.q, self.k, self.v)))


class Attention(nn.Module):
    """QK-normed multi-head attention with rotary, V scaled by `lambdas[0]` plus `lambdas[1]` x a value embedding.

    `attend(q, k, v)` runs the attention proper; the default is causal, over the decoding cache where there is one.
    The MoT byte layers pass a windowed mask (over a window of bytes they recompute: they cache nothing).
    """

    def __init__(self, d_in: int, n_head: int, head_dim: int, scale: float, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.n_head, self.head_dim, self.scale, self.rotary = n_head, head_dim, scale, rotary
        self.qkv = QKV(d_in, n_head * head_dim)
        self.lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))
        self.out = speedrun_linear(n_head * head_dim, d_in, zero=True)

    def forward(self, x: Tensor, value_embedding: Tensor | None = None, attend=None) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = (
            t.view(batch, seq, self.n_head, self.head_dim).transpose(1, 2)
            for t in self.qkv(x).split(self.n_head * self.head_dim, dim=-1)
        )
        step = current_decoding() if attend is None else None
        start = 0 if step is None else step.start
        q, k = self.rotary(rms_norm(q), start), self.rotary(rms_norm(k), start)
        v = self.lambdas[0] * v
        if value_embedding is not None:
            v = v + self.lambdas[1] * value_embedding.view(batch, seq, self.n_head, self.head_dim).transpose(1, 2)
        if step is not None:
            k, v = step.extend(k, v)
        y = attend(q, k, v) if attend is not None else causal_attention(q, k, v, self.scale)
        return self.out(y.transpose(1, 2).reshape(batch, seq, self.n_head * self.head_dim))


class ReluSquaredMLP(nn.Module):
    def __init__(self, d: int, ratio: int) -> None:
        super().__init__()
        self.fc, self.proj = speedrun_linear(d, ratio * d), speedrun_linear(ratio * d, d, zero=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.relu(self.fc(x)).square())


class Block(nn.Module):
    """x = l0 x + l1 x0, then x + attn(norm(x)) (absent in attention-free layers), then x + ffn(norm(x))."""

    def __init__(self, config: ModdedGPTConfig, layer: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))
        self.attn = (
            None
            if layer in config.attention_free_layers
            else Attention(config.d_model, config.n_head, config.head_dim, config.attention_scale, rotary)
        )
        self.ffn = ReluSquaredMLP(config.d_model, config.mlp_ratio)

    def forward(self, x: Tensor, x0: Tensor, value_embedding: Tensor | None) -> Tensor:
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        if self.attn is not None:
            x = x + self.attn(rms_norm(x), value_embedding)
        return x + self.ffn(rms_norm(x))


class ModdedGPT(nn.Module):
    """The backbone: `embed_inputs` -> blocks with U-net skips -> `logits`. The MoT overrides the two ends."""

    def __init__(self, config: ModdedGPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.value_embeds = nn.ModuleList(
            nn.Embedding(config.vocab_size, config.d_model) for _ in range(config.value_embeddings)
        )
        rotary = RotaryEmbedding(config.head_dim, config.rope_min_period, ladder="half_truncated")
        self.blocks = nn.ModuleList(Block(config, i, rotary) for i in range(config.n_layer))
        self.skip_weights = nn.Parameter(torch.ones(config.n_layer // 2))
        self.lm_head = speedrun_linear(config.d_model, config.head_size, zero=True)
        self.tables_as_run()

    def tables_as_run(self) -> None:
        """With `precision_as_run`, store every embedding table in bf16 as the original does (`m.bfloat16()` on each
        nn.Embedding), so Adam's state for them is bf16 too; lookups come back as float32 (exactly the bf16 values)
        so that the rest of the model runs in whatever precision the trainer uses."""
        if not self.config.precision_as_run:
            return
        for m in self.modules():
            if isinstance(m, nn.Embedding) and m.weight.dtype != torch.bfloat16:
                m.to(torch.bfloat16)
                m.register_forward_hook(lambda _module, _inputs, out: out.float())

    def forward(self, idx: Tensor) -> Tensor:
        """idx: [batch, seq] token ids -> soft-capped logits [batch, seq, head_size]."""
        if idx.dim() != 2:
            raise ValueError(f"expected token ids of shape [batch, seq], got {tuple(idx.shape)}")
        return self.logits(self.run_blocks(self.embed_inputs(idx), idx))

    def embed_inputs(self, idx: Tensor) -> Tensor:
        return rms_norm(self.embed(idx))

    def run_blocks(self, x0: Tensor, idx: Tensor) -> Tensor:
        values = [embedding(idx) for embedding in self.value_embeds]
        x, skips, half = x0, [], len(self.skip_weights)
        for i, block in enumerate(self.blocks):
            if i >= half:
                x = x + self.skip_weights[i - half] * skips.pop()
            which = self.config.value_embedding_of(i)
            x = block(x, x0, None if which is None else values[which])
            if i < half:
                skips.append(x)
        return x

    def logits(self, x: Tensor) -> Tensor:
        return self.soft_cap(self.lm_head(rms_norm(x)))

    def soft_cap(self, z: Tensor) -> Tensor:
        return self.config.logit_cap * torch.sigmoid(
            z.to(torch.promote_types(z.dtype, torch.float32)) / self.config.logit_cap_divisor
        )

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """The speedrun's optimiser groups: Adam for embeddings, the head and scalars, Muon for every matrix."""
        embeddings = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        groups: dict[str, list[nn.Parameter]] = {"muon": [], "embed": [], "head": [], "scalar": []}
        for p in self.parameters():
            group = (
                "embed"
                if id(p) in embeddings
                else "head"
                if p is self.lm_head.weight
                else "scalar"
                if p.dim() < 2
                else "muon"
            )
            groups[group].append(p)
        return groups


register_model(ModdedGPTConfig, ModdedGPT)
