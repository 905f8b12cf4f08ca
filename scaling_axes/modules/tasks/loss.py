"""The language model's training loss: cross-entropy and the z term (PaLM's squared log-partition) on fp32 logits.

Two forms with one value. `loss_terms` is the plain one that `LanguageModel.compile_training` compiles (inductor fuses
its passes over the [tokens, vocab] logits). Eager, autograd runs `F.cross_entropy` and `logsumexp` apart: a
log-softmax and a log-partition forward, and their two backward passes summed, each pass over the whole logits, which
at a 50k vocabulary is most of a small model's step on the CPU. `eager_loss_terms` computes both terms from one
softmax, kept for the backward, whose gradient is that softmax scaled per row (`CrossEntropyWithZ`): 256 ms against
75 ms forward and backward at 512 tokens x 50,257 on 2 CPU cores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def loss_terms(logits: Tensor, targets: Tensor, with_z: bool) -> tuple[Tensor, Tensor]:
    """(mean cross-entropy, z term: the squared log-partition's mean) of `logits` [..., vocab] against `targets`, in
    fp32; the z term is 0 unless `with_z`."""
    logits = logits.float()
    ce = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
    z = torch.logsumexp(logits, dim=-1).pow(2).mean() if with_z else logits.new_zeros(())
    return ce, z


class CrossEntropyWithZ(torch.autograd.Function):
    """Mean cross-entropy and mean squared log-partition of logits [N, V] from one softmax p. With lse the
    log-partition, ce = mean(lse - x_target) and z = mean(lse^2); d/dx of g_ce ce + g_z z is
    p (g_ce + 2 g_z lse) / N, less g_ce / N at each target."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        probs = torch.softmax(logits, dim=-1)
        # lse = x_j - log p_j for any j; at the row's largest logit p_j >= 1 / V, so its log never underflows
        lse = logits.amax(dim=-1) - probs.amax(dim=-1).log()
        picked = logits.gather(-1, targets[:, None]).squeeze(-1)
        ctx.save_for_backward(probs, targets, lse)
        ctx.mark_non_differentiable(targets)
        return (lse - picked).mean(), lse.pow(2).mean()

    @staticmethod
    def backward(ctx, grad_ce: Tensor, grad_z: Tensor) -> tuple[Tensor, None]:
        probs, targets, lse = ctx.saved_tensors
        rows = probs.size(0)
        scale = (grad_ce + 2 * grad_z * lse) / rows
        grad = probs.mul_(scale[:, None])  # in place: a second backward (retain_graph) is refused by autograd
        grad.scatter_add_(-1, targets[:, None], (-grad_ce / rows).expand(rows, 1))
        return grad, None


def eager_loss_terms(logits: Tensor, targets: Tensor, with_z: bool) -> tuple[Tensor, Tensor]:
    """`loss_terms` from one softmax (`CrossEntropyWithZ`), for eager training."""
    logits = logits.float()
    ce, z = CrossEntropyWithZ.apply(logits.view(-1, logits.size(-1)), targets.reshape(-1))
    return ce, (z if with_z else logits.new_zeros(()))
