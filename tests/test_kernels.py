"""Fused kernels against their PyTorch references under TRITON_INTERPRET=1 (set in conftest), on awkward sizes,
with poisoned output buffers so that an element the kernel never writes shows up as NaN."""

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import scaling_axes.kernels.common
import scaling_axes.kernels.pattention as fused
import scaling_axes.kernels.rmt as fused_rmt
import scaling_axes.kernels.rmt_store as fused_store
from scaling_axes.modules import build_model
from scaling_axes.modules.architectures.tokenformer import Pattention, normalize_scores
from tests.conftest import TINY_TOKENFORMER

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="Triton kernels need CUDA or TRITON_INTERPRET=1",
)


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    monkeypatch.setattr(
        scaling_axes.kernels.common,
        "alloc",
        lambda *shape, device, dtype=torch.float32: torch.full(shape, float("nan"), device=device, dtype=dtype),
    )


def reference(x, keys, values, tau, eps):
    return normalize_scores(x @ keys.T, "l2_norm_gelu", tau, eps) @ values


CASES = [
    ((37,), 19, 45, 23, None, 0.0),
    ((2, 3, 5), 33, 70, 17, 40, 1e-5),
    ((1,), 8, 1, 3, None, 0.0),
    ((65,), 64, 96, 64, None, 0.0),
]


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
    # relative to max(|exact|, 1): with one slot the normalised score is constant and dS = 0
    assert_close_to_float64((out, *grads), (expected, *expected_grads))


def assert_close_to_float64(ours, exact) -> None:
    for value, exact_value in zip(ours, exact, strict=True):
        assert torch.isfinite(value).all()
        scale = max(exact_value.abs().max().item(), 1.0)
        assert (value.double() - exact_value).abs().max() / scale < 1e-4


def test_grouped_launch_equals_the_separate_pattentions_side_by_side() -> None:
    x = torch.randn(3, 7, 21)
    keys, values = torch.randn(3, 38, 21), torch.randn(3, 38, 13)  # Q, K, V groups of 38 slots -> 13 each
    exact = [t.double().requires_grad_() for t in (x, keys, values)]
    expected = torch.cat([reference(exact[0], exact[1][g], exact[2][g], 38, 1e-6) for g in range(3)], dim=-1)
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, exact, grad_out)
    inputs = [t.clone().requires_grad_() for t in (x, keys, values)]
    out = fused.grouped_pattention(inputs[0], list(inputs[1]), list(inputs[2]), eps=1e-6)
    assert out.shape == (3, 7, 39)
    assert_close_to_float64((out, *torch.autograd.grad(out, inputs, grad_out.float())), (expected, *expected_grads))
    with pytest.raises(ValueError, match="the same for every group"):
        fused.grouped_pattention(x, list(keys), [values[0], values[1], values[2, :30]])


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.bfloat16, 3e-2), (torch.float16, 5e-3)])
def test_half_precision_pattention_matches_float64_forward_and_gradients(dtype, tolerance) -> None:
    """Half inputs, half products with fp32 accumulation: within the dtype's rounding of the float64 result."""
    x, keys, values = torch.randn(37, 16), torch.randn(150, 16), torch.randn(150, 8)
    exact = [t.to(dtype).double().requires_grad_() for t in (x, keys, values)]
    expected = reference(*exact, 150, 1e-6)
    grad_out = torch.randn_like(expected).to(dtype)
    expected_grads = torch.autograd.grad(expected, exact, grad_out.double())
    inputs = [t.to(dtype).requires_grad_() for t in (x, keys, values)]
    out = fused.pattention(*inputs, eps=1e-6)
    grads = torch.autograd.grad(out, inputs, grad_out)
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    for value, exact_value in zip((out, *grads), (expected, *expected_grads), strict=True):
        assert torch.isfinite(value).all()
        assert (value.double() - exact_value).abs().max() / exact_value.abs().max() < tolerance


class _Recorded(TorchDispatchMode):
    """Every op with the tensors it took and gave, the kernels' custom ops opened up (their own ops recorded too)."""

    def __init__(self) -> None:
        super().__init__()
        self.tensors: list[tuple[str, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "scaling_axes":
            with self:
                out = {"pattention": fused.pattention_op, "pattention_backward": fused.pattention_backward_op}[
                    func._opname
                ]._init_fn(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        self.tensors += [(str(func), t) for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        return out


def test_bf16_pattention_never_holds_a_float32_tokens_by_slots_tensor() -> None:
    """The contract behind its speed: no product takes fp32 operands of [tokens, n] size and no fp32 [tokens, n]
    tensor exists, forward or backward (the scores, GELU scores and their gradients stay bf16)."""
    tokens, slots = 40, 56
    x, keys, values = (
        torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
        for shape in ((tokens, 24), (slots, 24), (slots, 16))
    )
    with _Recorded() as recorded:
        out = fused.pattention(x, keys, values)
        out.backward(torch.randn_like(out))
    big = [(op, t) for op, t in recorded.tensors if t.numel() >= tokens * slots and t.dtype.is_floating_point]
    half_products = {op for op, t in big if t.dtype == torch.bfloat16} & {
        "aten.mm.default",
        "aten.matmul.default",
        "aten.bmm.default",
    }
    assert "aten.bmm.default" in half_products and len(half_products) >= 2  # the check sees the products
    assert sorted({op for op, t in big if t.dtype == torch.float32}) == []


def test_module_dispatch_and_a_tokenformer_give_the_same_loss_and_gradients_with_either_kernel(monkeypatch) -> None:
    launches, op = [], fused.pattention_op

    def counting_op(*args):
        launches.append(args[3])  # the number of groups
        return op(*args)

    monkeypatch.setattr(fused, "pattention_op", counting_op)
    models = {
        k: build_model("tokenformer_124m", **TINY_TOKENFORMER, kernel=k, numerics="gpu") for k in ("torch", "triton")
    }
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
    layers = TINY_TOKENFORMER["n_layer"]
    assert sorted(launches) == [1] * 2 * layers + [3] * layers  # per layer: grouped Q/K/V, then output and FFN
    assert Pattention(4, 4, 3).kernel == "auto"  # eager on the CPU; fused on a GPU where it was measured faster
    with pytest.raises(ValueError, match="kernel='cuda'"):
        Pattention(4, 4, 3, kernel="cuda")


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"keys \(5, 7\).*do not fit"):
        fused.pattention(torch.randn(3, 8), torch.randn(5, 7), torch.randn(5, 2))


def test_benchmark_says_it_needs_a_gpu(monkeypatch) -> None:
    import sys

    from scaling_axes.benchmarks import kernels as bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["scaling_axes.benchmarks.kernels"])
    with pytest.raises(SystemExit, match="on a CUDA GPU; none is visible"):
        bench.main()


RMT_CASES = [(2, 3, 5, 6, 7), (3, 13, 4, 17, 40), (1, 1, 16, 16, 16), (2, 9, 32, 12, 3)]  # B, T, D_v, D_k, n


@pytest.mark.parametrize("layernorm", [True, False], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("heads_first", [False, True], ids=["n_last", "heads_first"])
@pytest.mark.parametrize("batch,seq,d_value,d_key,n", RMT_CASES)
def test_fused_norm_retrieval_matches_float64(batch, seq, d_value, d_key, n, layernorm, heads_first) -> None:
    x = torch.randn(batch, seq, d_value, d_key) * 3 + 1
    keys, weight, bias = torch.randn(d_key, n), torch.randn(d_value, d_key), torch.randn(d_value, d_key)
    exact = [t.double().requires_grad_() for t in (x, keys, weight, bias)][: 4 if layernorm else 3]
    if layernorm:
        normed = F.layer_norm(exact[0], (d_value, d_key), exact[2], exact[3], 1e-5)
    else:
        normed = F.rms_norm(exact[0], (d_value, d_key), exact[2], 1e-5)
    expected = normed @ exact[1]
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, exact, grad_out)
    inputs = [t.detach().float().requires_grad_() for t in exact]
    out = fused_rmt.norm_retrieve(
        inputs[0], inputs[1], inputs[2], inputs[3] if layernorm else None, 1e-5, layernorm, heads_first
    )
    assert out.shape == (batch, seq, d_value, n)
    assert (out.stride()[-1] == 1) != heads_first  # heads_first: n-major memory
    grads = torch.autograd.grad(out, inputs, grad_out.float())
    assert_close_to_float64((out, *grads), (expected, *expected_grads))


@pytest.mark.parametrize("heads_layout", [False, True], ids=["contiguous_data", "attention_heads"])
@pytest.mark.parametrize("batch,seq,d_value,d_key,rank", RMT_CASES)
def test_fused_storage_matches_float64(batch, seq, d_value, d_key, rank, heads_layout) -> None:
    x, keys = torch.randn(batch, seq, d_value, d_key), torch.randn(rank, d_key)
    data = torch.randn(batch, rank, seq, d_value).permute(0, 2, 3, 1) if heads_layout else None
    data = torch.randn(batch, seq, d_value, rank) if data is None else data
    exact = [t.double().requires_grad_() for t in (x, data, keys)]
    expected = exact[0] + exact[1] @ exact[2]
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, exact, grad_out)
    inputs = [t.detach().float().requires_grad_() for t in exact]
    out = fused_store.store(*inputs)
    assert_close_to_float64((out, *torch.autograd.grad(out, inputs, grad_out.float())), (expected, *expected_grads))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_rmt_operations_in_half_precision(dtype) -> None:
    x, keys, weight, bias = torch.randn(2, 5, 8, 6), torch.randn(6, 9), torch.randn(8, 6), torch.randn(8, 6)
    out = fused_rmt.norm_retrieve(x.to(dtype), keys.to(dtype), weight, bias, 1e-6)
    expected = F.layer_norm(x.double(), (8, 6), weight.double(), bias.double(), 1e-6) @ keys.to(dtype).double()
    assert out.dtype == dtype
    assert (out.double() - expected).abs().max() / expected.abs().max() < 2e-2
    data, storage_keys = torch.randn(2, 5, 8, 3), torch.randn(3, 6)
    stored = fused_store.store(x.to(dtype), data.to(dtype), storage_keys.to(dtype))
    expected = x.to(dtype).double() + data.to(dtype).double() @ storage_keys.to(dtype).double()
    assert stored.dtype == dtype and (stored.double() - expected).abs().max() / expected.abs().max() < 2e-2


@pytest.mark.parametrize(
    "overrides", [{}, {"norm": "rmsnorm", "position": "alibi", "document_mask": True}], ids=["paper", "official_code"]
)
def test_an_rmt_gives_the_same_loss_and_gradients_with_either_kernel(overrides, monkeypatch) -> None:
    tiny = {"n_layer": 2, "d_key": 6, "d_value": 5, "rank": 3, "d_ff": 16, "vocab_size": 41, "max_seq_len": 12}
    models = {k: build_model("rmt_46m", **tiny, **overrides, kernel=k) for k in ("torch", "triton")}
    models["triton"].load_state_dict(models["torch"].state_dict())
    with torch.no_grad():  # non-trivial norm gains and biases
        for name, param in models["torch"].named_parameters():
            if "norm" in name:
                param.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
    models["triton"].load_state_dict(models["torch"].state_dict())
    launches = []
    for module, name in ((fused_rmt, "norm_retrieve"), (fused_store, "store")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, f=original, n=name, **k: launches.append(n) or f(*a, **k))
    idx = torch.randint(0, 41, (2, 11))
    idx[:, 5] = 40 if overrides else idx[:, 5]
    results = {}
    for kernel, model in models.items():
        loss = F.cross_entropy(model(idx).view(-1, 41), idx.roll(-1, 1).view(-1))
        loss.backward()
        results[kernel] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(results["triton"][0], results["torch"][0], rtol=1e-5, atol=1e-6)
    for name, grad in results["torch"][1].items():
        torch.testing.assert_close(results["triton"][1][name], grad, rtol=1e-4, atol=1e-6, msg=name)
    # per layer: two norm + retrievals and two storages; then the final norm + readout
    assert sorted(launches) == ["norm_retrieve"] * (2 * 2 + 1) + ["store"] * (2 * 2)


def test_fused_rmt_operations_refuse_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match=r"norm_retrieve: x \(2, 3, 4, 5\), weight \(4, 6\)"):
        fused_rmt.norm_retrieve(torch.randn(2, 3, 4, 5), torch.randn(5, 7), torch.ones(4, 6), None, 1e-6)
    with pytest.raises(ValueError, match=r"store: .* keys \(3, 4\) do not fit"):
        fused_store.store(torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 3), torch.randn(3, 4))
    with pytest.raises(ValueError, match="use kernel='torch' for this shape"):
        fused_rmt.norm_retrieve(torch.randn(1, 1, 256, 128), torch.randn(128, 4), torch.ones(256, 128), None, 1e-6)


def test_benchmark_runs_end_to_end_at_toy_sizes(monkeypatch, tmp_path) -> None:
    """No GPU here: the real benchmark path on the CPU at toy sizes, timings stubbed, to show every row runs; each
    row is on disk before the next is measured (a time box's SIGKILL runs no `finally`)."""
    import sys

    from scaling_axes.benchmarks import kernels as bench

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "DTYPE", torch.float32)
    monkeypatch.setattr(bench, "PATTENTION_WIDTHS", {"toy": 16})
    monkeypatch.setattr(bench, "PATTENTION_TOKENS", 5)
    monkeypatch.setattr(bench, "RMT_BATCH", 1)
    monkeypatch.setattr(bench, "RMT_SEQ", 2)

    def time_ms(step, repeats):
        on_disk.append(len(out.read_text().splitlines()) - 1 if out.exists() else 0)
        step()
        forward = step.__defaults__[0]
        if failing in (forward, getattr(forward, "func", None)):
            raise RuntimeError("InductorError: SubprocException")
        return 2.0

    failing, on_disk, out = None, [], tmp_path / "bench.csv"

    def compile_and_fail_once(fn):
        nonlocal failing
        if failing is not None:
            return fn

        def failing(*args):  # the first compiled case fails at its first call, as on the H100
            return fn(*args)

        return failing

    monkeypatch.setattr(bench, "time_ms", time_ms)
    monkeypatch.setattr(torch, "compile", compile_and_fail_once)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (toy run)")
    monkeypatch.setattr(sys, "argv", ["scaling_axes.benchmarks.kernels", "--out", str(tmp_path / "bench.csv")])
    bench.main()
    rows = (tmp_path / "bench.csv").read_text().splitlines()
    assert rows[0] == ",".join(bench.COLUMNS)
    errors = [row for row in rows[1:] if row.split(",")[-1]]
    assert len(errors) == 1 and ",compiled,,,,RuntimeError: InductorError" in errors[0]
    layers = {row.split(",")[3] for row in rows[1:]}
    assert layers == {
        "pattention_qkv",
        "pattention_ffn",
        "pattention_q_k_v",
        "attention_read",
        "attention_write",
        "ffn_read",
        "attention_sublayer",
        "ffn_sublayer",
    }
    assert len(rows) == 1 + 2 * 4 + 2 + 5 * 3
    assert on_disk == list(range(len(rows) - 1))


def test_the_kernel_benchmark_judges_each_target_from_its_rows() -> None:
    from scaling_axes.benchmarks import kernels as bench

    model = next(iter(bench.PATTENTION_WIDTHS))
    timed = {"eager": 3.0, "compiled": 2.0, "triton": 1.9, "linear_mlp": 1.6}  # 1.58x eager; 1.19x the Linear MLP
    rows = [{"model": model, "layer": "pattention_ffn", "variant": v, "median_ms": ms} for v, ms in timed.items()]
    rows += [
        {"model": bench.RMT_PRESET, "layer": "attention_sublayer", "variant": v, "median_ms": ms}
        for v, ms in (("eager", 2.5), ("triton", 2.0))
    ]
    lines = bench.targets(rows)
    assert lines == [
        f"{model} FFN Pattention vs eager: 1.58x (target >= 1.5x): met",
        f"{model} FFN Pattention vs the equal-FLOP Linear MLP: 0.84x (target >= 0.87x): NOT met",
        "RMT attention_sublayer vs eager: 1.25x (target >= 1.3x): NOT met",
    ]


def test_on_a_gpu_the_memory_bound_kernels_time_several_block_choices(monkeypatch) -> None:
    """Under the interpreter each kernel has one configuration (it cannot time); on a GPU the autotuner times each."""
    assert len(fused._blocks()) == 1 and len(fused_rmt.tokens_per_program()) == 1
    monkeypatch.delenv("TRITON_INTERPRET")
    blocks, tokens = fused._blocks(), fused_rmt.tokens_per_program()
    assert len({(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in blocks}) >= 6
    assert sorted({c.kwargs["TOKENS"] for c in tokens}) == [1, 2, 4, 8]


def test_the_device_name_is_marked_constant_as_torch_compiler_marks_it() -> None:
    """`kernels._device_name` carries the mark `torch.compiler.assume_constant_result` would give it (set by hand so
    that reading a model does not import TorchDynamo): if torch changes its mark, this fails."""
    import torch

    from scaling_axes import kernels

    marked = torch.compiler.assume_constant_result(lambda index: "")
    mark = {name for name in vars(marked) if name.startswith("_dynamo")}
    assert mark == {"_dynamo_marked_constant"}
    assert all(getattr(kernels._device_name, name) == getattr(marked, name) for name in mark)
