"""Optimisers and learning-rate schedules beyond AdamW + cosine: the modded-nanogpt pair (Muon + Adam) the MoT runs
used (MoT reference section 4.2), as one `torch.optim.Optimizer` because Lightning's automatic optimisation steps
exactly one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ADAM_GROUPS = ("embed", "head", "scalar")


class MuonWithAdam(torch.optim.Optimizer):
    """`torch.optim.Muon` (Nesterov, 5 Newton-Schulz steps, update x sqrt(max(1, rows/cols)), decoupled decay
    lr x wd) for the matrices, Adam for the embeddings, head and scalars, each group at its own lr. Muon's momentum
    warms up linearly from `momentum_start` to `momentum` over `momentum_warmup` steps.

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
    ) -> None:
        missing = {"muon", *ADAM_GROUPS} - set(lrs)
        if missing:
            raise ValueError(f"MuonWithAdam needs a learning rate for {sorted(missing)}; got {sorted(lrs)}")
        self.momentum, self.momentum_start, self.momentum_warmup = momentum, momentum_start, momentum_warmup
        self.muon = torch.optim.Muon(
            [{"params": groups["muon"], "lr": lrs["muon"], "group": "muon"}],
            lr=lrs["muon"],
            weight_decay=muon_weight_decay,
            momentum=momentum_start,
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
