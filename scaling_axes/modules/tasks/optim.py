"""Optimisers and learning-rate schedules beyond AdamW + cosine: the modded-nanogpt pair (Muon + Adam) the MoT runs
used (MoT reference section 4.2), as one `torch.optim.Optimizer` because Lightning's automatic optimisation steps
exactly one.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

ADAM_GROUPS = ("embed", "head", "scalar")
# The Newton-Schulz coefficients of each of the 5 iterations in the record the MoT code copies
# (modded-nanogpt 021425_GPT2MediumOptCoeffs); torch's Muon repeats one triple.
RECORD_COEFFICIENTS = (
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)
TORCH_COEFFICIENTS = ((3.4445, -4.7750, 2.0315),) * 5


def newton_schulz(grad: Tensor, coefficients: tuple[tuple[float, float, float], ...], eps: float = 1e-7) -> Tensor:
    """The record's `zeropower_via_newtonschulz5` in bf16: X / (||X|| + eps), then X <- aX + (bA + cA^2)X with
    A = XX^T, one (a, b, c) per iteration, on the wide orientation of the matrix."""
    x = grad.bfloat16()
    tall = grad.size(-2) > grad.size(-1)
    if tall:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + eps)
    for a, b, c in coefficients:
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if tall else x


class Muon(torch.optim.Optimizer):
    """The record's Muon on one device: Nesterov momentum (buffer lerp), Newton-Schulz with a coefficient triple per
    iteration, decay p (1 - lr wd), update x -lr sqrt(max(1, rows / cols)). Under data parallelism the gradients are
    already averaged; the record's all-gather only spreads the orthogonalisations over its 8 GPUs."""

    def __init__(
        self,
        params: Any,
        lr: float = 0.02,
        weight_decay: float = 0.01,
        momentum: float = 0.95,
        nesterov: bool = True,
        coefficients: tuple[tuple[float, float, float], ...] = RECORD_COEFFICIENTS,
    ) -> None:
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "nesterov": nesterov,
            "coefficients": coefficients,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None if closure is None else closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buffer = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p.grad))
                buffer.lerp_(p.grad, 1 - group["momentum"])
                update = p.grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer
                update = newton_schulz(update, group["coefficients"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.view_as(p), alpha=-group["lr"] * max(1, p.size(-2) / p.size(-1)) ** 0.5)
        return loss


class MuonWithAdam(torch.optim.Optimizer):
    """Muon (Nesterov, 5 Newton-Schulz steps, update x sqrt(max(1, rows/cols)), decoupled decay lr x wd) for the
    matrices, Adam for the embeddings, head and scalars, each group at its own lr. Muon's momentum warms up linearly
    from `momentum_start` to `momentum` over `momentum_warmup` steps. `newton_schulz`: "record" (`Muon` with the
    record's five coefficient triples, as the MoT runs) or "torch" (`torch.optim.Muon`'s one triple).

    `groups` maps "muon", "embed", "head", "scalar" to parameters (a model's `param_groups()`); `lrs` the same keys
    to learning rates. The param groups are the inner optimisers' own, so LR schedulers scale both.
    """

    def __init__(
        self,
        groups: dict[str, list[nn.Parameter]],
        lrs: dict[str, float],
        muon_weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.8, 0.95),
        eps: float = 1e-10,
        momentum: float = 0.95,
        momentum_start: float = 0.85,
        momentum_warmup: int = 300,
        newton_schulz: Literal["record", "torch"] = "record",
    ) -> None:
        missing = {"muon", *ADAM_GROUPS} - set(lrs)
        if missing:
            raise ValueError(f"MuonWithAdam needs a learning rate for {sorted(missing)}; got {sorted(lrs)}")
        self.momentum, self.momentum_start, self.momentum_warmup = momentum, momentum_start, momentum_warmup
        if newton_schulz not in ("record", "torch"):
            raise ValueError(f"newton_schulz={newton_schulz!r}; allowed: 'record', 'torch'")
        matrices = [{"params": groups["muon"], "lr": lrs["muon"], "group": "muon"}]
        if newton_schulz == "record":
            self.muon: torch.optim.Optimizer = Muon(matrices, lr=lrs["muon"], weight_decay=muon_weight_decay)
        else:
            self.muon = torch.optim.Muon(
                matrices,
                lr=lrs["muon"],
                weight_decay=muon_weight_decay,
                nesterov=True,
                ns_steps=5,
                adjust_lr_fn="original",
            )
        adam_groups = [{"params": groups[g], "lr": lrs[g], "group": g} for g in ADAM_GROUPS if groups[g]]
        fused = all(p.is_cuda for g in adam_groups for p in g["params"])
        self.adam = torch.optim.Adam(adam_groups, betas=betas, eps=eps, weight_decay=0.0, fused=fused or None)
        every = [{"params": list(g["params"])} for g in self.muon.param_groups + self.adam.param_groups]
        super().__init__(every, {})
        self.param_groups = self.muon.param_groups + self.adam.param_groups  # shared: a scheduler scales the inner lrs
        self.steps = 0

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        fraction = min(1.0, self.steps / self.momentum_warmup) if self.momentum_warmup else 1.0
        for group in self.muon.param_groups:
            group["momentum"] = (1 - fraction) * self.momentum_start + fraction * self.momentum
        self.muon.step()
        self.adam.step()
        self.steps += 1
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none)
        self.adam.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adam": self.adam.state_dict(), "steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adam.load_state_dict(state_dict["adam"])
        self.steps = state_dict["steps"]
        self.param_groups = self.muon.param_groups + self.adam.param_groups


def speedrun_lrs(d_model: int) -> dict[str, float]:
    """The MoT runs' learning rates: Muon 0.025, embeddings 0.3, head 0.1 / sqrt(d_model), scalars 0.015."""
    return {"muon": 0.025, "embed": 0.3, "head": 0.1 / d_model**0.5, "scalar": 0.015}


def constant_then_linear(step: int, total: int, cooldown_fraction: float) -> float:
    """LR multiplier of the speedrun: 1, then linearly to 0 over the last `cooldown_fraction` of `total` steps."""
    progress = step / total
    if progress < 1 - cooldown_fraction:
        return 1.0
    return max(0.0, (1 - progress) / cooldown_fraction)
