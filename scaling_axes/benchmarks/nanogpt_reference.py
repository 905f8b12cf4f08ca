"""A plain nanoGPT-style GPT-2 124M, the yardstick `bench-training` holds `transformer_124m` to (its step within 5%
of this one's, both compiled): pre-LN blocks with one QKV Linear, SDPA causal attention, a 4x GELU MLP, learned
positions, the unembedding tied to the token embedding, fp32 cross-entropy and fused AdamW with weight decay on the
matrices. Written apart from the suite's models on purpose: it measures what they cost beyond the plainest GPT-2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2, self.heads = nn.LayerNorm(width), nn.LayerNorm(width), heads
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(batch, seq, 3, self.heads, width // self.heads).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, seq, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int = 50304, seq: int = 1024, width: int = 768, layers: int = 12, heads: int = 12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: Tensor, targets: Tensor) -> Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def optimizer(model: nn.Module, lr: float = 6e-4) -> torch.optim.AdamW:
    """nanoGPT's: weight decay 0.1 on the matrices, none on vectors; fused on a GPU."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=next(model.parameters()).is_cuda)
