"""Pattention against an independent float64 reference (paper Eq. 3-4 and the official code's variants)."""

import math

import numpy as np
import pytest
import torch
from torch.func import functional_call

from scaling_axes.modules.architectures.tokenformer import Pattention
from scaling_axes.modules.configs.tokenformer_config import NORMALIZATIONS


def reference(x: np.ndarray, keys: np.ndarray, values: np.ndarray, normalization: str, tau: int, eps: float):
    """Row by row, with math.erf GELU: no shared code with the module."""
    gelu = np.vectorize(lambda a: 0.5 * a * (1 + math.erf(a / math.sqrt(2))))
    out = np.zeros((x.shape[0], values.shape[1]))
    for i, row in enumerate(x):
        scores = keys @ row
        if normalization == "l2_norm_gelu":
            weights = gelu(scores * math.sqrt(tau) / (math.sqrt((scores**2).sum()) + eps))
        elif normalization == "gelu_l2_norm":
            g = gelu(scores)
            weights = g * math.sqrt(tau) / (math.sqrt((g**2).sum()) + eps)
        elif normalization == "gelu_l1_norm":
            g = gelu(scores)
            weights = g * tau / (np.abs(g).sum() + eps)
        else:
            e = np.exp(scores - scores.max())
            weights = tau * e / e.sum()
        out[i] = weights @ values
    return out


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize("tau_tokens,eps", [(None, 0.0), (5, 1e-5)])
def test_matches_float64_reference(normalization, tau_tokens, eps):
    layer = Pattention(6, 5, 9, normalization, eps=eps, tau_tokens=tau_tokens).double()
    torch.nn.init.normal_(layer.key_param_tokens)
    torch.nn.init.normal_(layer.value_param_tokens)
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    expected = reference(
        x.reshape(-1, 6).numpy(),
        layer.key_param_tokens.detach().numpy(),
        layer.value_param_tokens.detach().numpy(),
        normalization,
        tau_tokens or 9,
        eps,
    )
    np.testing.assert_allclose(layer(x).detach().reshape(-1, 5).numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_gradcheck(normalization):
    layer = Pattention(4, 3, 7, normalization, eps=1e-6).double()
    torch.nn.init.normal_(layer.key_param_tokens)
    torch.nn.init.normal_(layer.value_param_tokens)
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)

    def f(x, keys, values):
        return functional_call(layer, {"key_param_tokens": keys, "value_param_tokens": values}, (x,))

    inputs = (
        x,
        layer.key_param_tokens.detach().clone().requires_grad_(),
        layer.value_param_tokens.detach().clone().requires_grad_(),
    )
    assert torch.autograd.gradcheck(f, inputs)


def test_softmax_is_stable_where_the_official_exp_overflows():
    layer = Pattention(2, 2, 3, "softmax")
    with torch.no_grad():
        layer.key_param_tokens.copy_(torch.tensor([[100.0, 0], [0, 100.0], [0, 0]]))
        layer.value_param_tokens.copy_(torch.eye(3, 2))
    x = torch.tensor([[10.0, 0.0]])  # scores 1000, 0, 0: exp(1000) is inf in float32
    naive = torch.exp(x @ layer.key_param_tokens.T)
    assert not torch.isfinite(naive / naive.sum()).all()
    torch.testing.assert_close(layer(x), torch.tensor([[3.0, 0.0]]))


def test_l2_norm_gelu_is_invariant_to_input_scale():
    """The row norm divides out any positive rescaling of x (reference section 1.2)."""
    layer = Pattention(8, 8, 16)
    torch.nn.init.normal_(layer.key_param_tokens)
    torch.nn.init.normal_(layer.value_param_tokens)
    x = torch.randn(4, 8)
    torch.testing.assert_close(layer(x), layer(7.5 * x))


@pytest.mark.parametrize("normalization", ["l2_norm_gelu", "gelu_l2_norm"])
def test_zero_scores_without_eps_give_zero_not_nan(normalization):
    """The official GPU code (eps 0) returns NaN for an all-zero score row (0 / 0, e.g. all-zero keys after a zero
    growth, or a zero input); guarded, the row normalises to zero, and its gradients stay finite."""
    layer = Pattention(4, 4, 5, normalization=normalization)
    torch.nn.init.zeros_(layer.key_param_tokens)
    torch.nn.init.normal_(layer.value_param_tokens)
    x = torch.randn(3, 4, requires_grad=True)
    out = layer(x)
    out.sum().backward()
    assert torch.equal(out, torch.zeros(3, 4)) and torch.isfinite(x.grad).all()
    assert torch.isfinite(layer.key_param_tokens.grad).all()


def test_fused_kernel_guards_zero_rows_as_the_eager_path():

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=generator)
    x[0, 1] = 0  # this row's scores are all zero
    keys, values = torch.randn(12, 16, generator=generator), torch.randn(12, 8, generator=generator)
    results = []
    for fused in (False, True):
        inputs = [t.clone().requires_grad_() for t in (x, keys, values)]
        layer = Pattention(16, 8, 12, kernel="triton" if fused else "torch")
        out = functional_call(layer, {"key_param_tokens": inputs[1], "value_param_tokens": inputs[2]}, (inputs[0],))
        out.sum().backward()
        results.append([out, *(t.grad for t in inputs)])
    for eager, fused in zip(*results, strict=True):
        assert torch.isfinite(fused).all()
        torch.testing.assert_close(fused, eager, rtol=1e-4, atol=1e-5)
    assert torch.equal(results[1][0][0, 1], torch.zeros(8))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"normalization": "relu"}, "normalization='relu'"),
        ({"num_param_tokens": 0}, "num_param_tokens=0"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    args = {"d_in": 4, "d_out": 4, "num_param_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        Pattention(**args)
