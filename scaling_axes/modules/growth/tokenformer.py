"""Tokenformer growth (paper Eq. 9-10, section 3.3): new key/value parameter tokens appended to every Pattention.

Whether the grown model resumes the old one exactly depends on tau (see
`scaling_axes.modules.architectures.tokenformer`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from scaling_axes.modules.architectures.tokenformer import Tokenformer
from scaling_axes.modules.configs.tokenformer_config import TAU_FIELDS, TOKEN_FIELDS, TokenformerConfig
from scaling_axes.modules.registry import get_config, replace_config


def grow(
    model: Tokenformer,
    target: str | TokenformerConfig,
    new_keys: Literal["zero", "random"] = "zero",
    pin_tau: bool = False,
) -> Tokenformer:
    """A Tokenformer with `target`'s token counts whose first rows are `model`'s tokens (paper Eq. 9-10).

    New keys are zero (the paper) or random N(0, init_std) (the released code); new values are random. tau follows
    the new n, as the official code and the paper's runs, unless `pin_tau` keeps each Pattention's old tau. The
    grown model computes exactly the old function if and only if the new keys are zero, tau is pinned, and the
    normalisation maps a zero score to zero and leaves the row norm alone (`l2_norm_gelu`, `gelu_l2_norm`,
    `gelu_l1_norm`);
    `softmax` gives the new tokens weight exp(0) and is never exact. Everything other than the token counts must
    equal between the two configs.
    """
    old = model.config
    new = get_config(target) if isinstance(target, str) else target
    if new_keys not in ("zero", "random"):
        raise ValueError(f"new_keys={new_keys!r}; allowed: 'zero', 'random'")
    fixed = [f.name for f in dataclasses.fields(old) if f.name not in (*TOKEN_FIELDS, *TAU_FIELDS)]
    differing = {f: (getattr(old, f), getattr(new, f)) for f in fixed if getattr(old, f) != getattr(new, f)}
    if differing:
        raise ValueError(f"grow only adds parameter tokens; these fields differ (old, target): {differing}")
    shrinking = {f: (getattr(old, f), getattr(new, f)) for f in TOKEN_FIELDS if getattr(new, f) < getattr(old, f)}
    if shrinking:
        raise ValueError(f"target has fewer parameter tokens than the model (old, target): {shrinking}")
    if pin_tau:
        pins = {
            tau: getattr(old, tau) or getattr(old, count) for tau, count in zip(TAU_FIELDS, TOKEN_FIELDS, strict=True)
        }
        new = replace_config(new, **pins)
    ref = next(model.parameters())
    grown = Tokenformer(new).to(device=ref.device, dtype=ref.dtype)
    grown_state = grown.state_dict()
    with torch.no_grad():
        for name, old_tensor in model.state_dict().items():
            if not name.endswith("param_tokens"):
                grown_state[name].copy_(old_tensor)
                continue
            n_old = old_tensor.shape[0]
            grown_state[name][:n_old].copy_(old_tensor)
            if new_keys == "zero" and name.endswith("key_param_tokens"):
                grown_state[name][n_old:].zero_()
    return grown
