"""Fused kernels against their PyTorch references under TRITON_INTERPRET=1 (set in conftest), on awkward sizes,
with poisoned output buffers so that an element the kernel never writes shows up as NaN."""

import os

import pytest
import torch

import kernels.pattention as fused
from modules import build_model
from modules.tokenformer import Pattention, normalize_scores
from tests.conftest import TINY_TOKENFORMER

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="Triton kernels need CUDA or TRITON_INTERPRET=1",
)


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    monkeypatch.setattr(fused, "_alloc", lambda *shape, device: torch.full(shape, float("nan"), device=device))


def reference(x, keys, values, tau, eps):
    return normalize_scores(x @ keys.T, "l2_norm_gelu", tau, eps) @ values


CASES = [((37,), 19, 45, 23, None, 0.0), ((2, 3, 5), 33, 70, 17, 40, 1e-5), ((1,), 8, 1, 3, None, 0.0),
         ((65,), 64, 96, 64, None, 0.0)]  # fmt: skip


@pytest.mark.parametrize("shape,d_in,n,d_out,tau,eps", CASES)
def test_fused_pattention_matches_float64_forward_and_gradients(shape, d_in, n, d_out, tau, eps) -> None:
    x, keys, values = torch.randn(*shape, d_in), torch.randn(n, d_in), torch.randn(n, d_out)
    exact = [t.double().requires_grad_() for t in (x, keys, values)]
    expected = reference(*exact, tau or n, eps)
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, exact, grad_out)
    inputs = [t.clone().requires_grad_() for t in (x, keys, values)]
    out = fused.pattention(*inputs, tau_tokens=tau, eps=eps)
    grads = torch.autograd.grad(out, inputs, grad_out.float())
    assert out.shape == (*shape, d_out) and out.dtype == torch.float32
    for ours, exact_value in zip((out, *grads), (expected, *expected_grads), strict=True):
        assert torch.isfinite(ours).all()
        scale = max(exact_value.abs().max().item(), 1.0)  # one slot: the normalised score is constant, dS = 0
        assert (ours.double() - exact_value).abs().max() / scale < 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_accumulate_in_float32(dtype) -> None:
    x, keys, values = torch.randn(9, 16), torch.randn(20, 16), torch.randn(20, 8)
    out = fused.pattention(x.to(dtype), keys.to(dtype), values.to(dtype))
    expected = reference(*(t.to(dtype).double() for t in (x, keys, values)), 20, 0.0)
    assert out.dtype == dtype
    assert (out.double() - expected).abs().max() / expected.abs().max() < 2e-2


def test_module_dispatch_and_a_tokenformer_give_the_same_loss_and_gradients_with_either_kernel() -> None:
    models = {k: build_model("tokenformer_124m", **TINY_TOKENFORMER, kernel=k) for k in ("torch", "triton")}
    models["triton"].load_state_dict(models["torch"].state_dict())
    idx = torch.randint(0, 97, (2, 11))
    results = {}
    for kernel, model in models.items():
        loss = torch.nn.functional.cross_entropy(model(idx).view(-1, 97), idx.roll(-1, 1).view(-1))
        loss.backward()
        results[kernel] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(results["triton"][0], results["torch"][0], rtol=1e-5, atol=1e-6)
    for name, grad in results["torch"][1].items():
        torch.testing.assert_close(results["triton"][1][name], grad, rtol=1e-4, atol=1e-6)
    assert Pattention(4, 4, 3).kernel == "auto"  # eager on the CPU, fused on CUDA
    with pytest.raises(ValueError, match="kernel='cuda'"):
        Pattention(4, 4, 3, kernel="cuda")


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"keys \(5, 7\).*do not fit"):
        fused.pattention(torch.randn(3, 8), torch.randn(5, 7), torch.randn(5, 2))


def test_benchmark_says_it_needs_a_gpu(monkeypatch) -> None:
    import sys

    from kernels import bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["kernels.bench"])
    with pytest.raises(SystemExit, match="on a CUDA GPU; none is visible"):
        bench.main()
