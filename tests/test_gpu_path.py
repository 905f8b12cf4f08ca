"""The CUDA training configuration, exercised on the CPU as far as it goes: bf16-mixed with the fused AdamW and
clipping, torch.compile of every architecture (the Triton kernels as ops under TRITON_INTERPRET=1), the kernel ops'
own checks, the progress log and the precision MFU is measured against."""

import dataclasses
import json
import math
import os

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from scaling_axes.harness.runs import Budget, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.harness.training.progress import ProgressLog
from scaling_axes.modules.registry import build_model
from tests.conftest import TINY_TRANSFORMER

TINY_RUN = {k: v for k, v in TINY_TRANSFORMER.items() if k != "vocab_size"}  # runs use the GPT-2 tokenizer
TINY_RMT = {"n_layer": 2, "d_key": 6, "d_value": 5, "rank": 3, "d_ff": 16, "vocab_size": 97, "max_seq_len": 12}
TINY_MOT = {
    "n_layer": 6,
    "d_model": 32,
    "n_head": 2,
    "head_dim": 16,
    "attention_free_layers": (2,),
    "max_seq_len": 32,
    "byte_head_dim": 16,
    "d_token": 16,
    "d_byte": 4,
}


class GradientNorms(L.Callback):
    """The gradient norm as backward left it and as the optimizer then saw it, and the optimizer, per step."""

    def __init__(self) -> None:
        self.raw, self.clipped, self.optimizers = [], [], []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.raw.append(_norm(pl_module))
        self.optimizers.append(optimizer)

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        self.clipped.append(_norm(pl_module))


def _norm(module) -> float:
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters() if p.grad is not None]))


def test_bf16_mixed_trains_with_the_fused_adamw_and_clips_at_the_configured_norm(tmp_path) -> None:
    """The Trainer and optimizer a CUDA run builds (fused AdamW, bf16-mixed, clipping on): two steps, each clipped."""
    clip = 0.05  # far below the raw norm of a fresh model
    budget = Budget(steps=2, batch_size=4, seq_len=32, lr=1e-3, val_windows=4, checkpoint_every=10)
    run = Run("r", "transformer_124m", budget, dict(TINY_RUN), trainer={"gradient_clip_val": clip})
    norms = GradientNorms()
    train_run(run, tmp_path / "r", extra_callbacks=[norms], accelerator="cpu", precision="bf16-mixed")
    assert all(o.defaults["fused"] for o in norms.optimizers)
    assert len(norms.raw) == 2 and min(norms.raw) > 10 * clip
    for clipped in norms.clipped:
        assert clip * 0.999 <= clipped <= clip * 1.001
    logged = [row for row in (tmp_path / "r" / "metrics.csv").read_text().splitlines()[1:] if row]
    assert logged  # train/grad_norm is logged (the raw norm, before clipping)
    assert "train/grad_norm" in (tmp_path / "r" / "metrics.csv").read_text().splitlines()[0]


@pytest.mark.slow  # 41 s of a fresh clone's make test (a cold compile); CI runs it in make test-slow
def test_a_compiled_bf16_mixed_run_trains_and_validates_to_the_eager_runs_losses(tmp_path) -> None:
    """What a GPU run does by default, through Lightning: the model and its loss compiled (`compile_training`, from
    `configure_model`), training and then validation under inference mode with other shapes. Its loss curves equal
    the eager run's to bf16-mixed's rounding."""
    budget = Budget(steps=4, batch_size=4, seq_len=32, lr=1e-3, val_windows=6, checkpoint_every=2)
    done = {}
    for compile in (False, True):
        run = Run("r", "transformer_124m", budget, dict(TINY_RUN))
        done[compile] = train_run(
            run, tmp_path / str(compile), accelerator="cpu", precision="bf16-mixed", compile=compile
        )
    for curve in ("train_loss_curve", "val_loss_curve"):
        assert len(done[True][curve]) == len(done[False][curve]) >= 1
        for (step, loss), (eager_step, eager_loss) in zip(done[True][curve], done[False][curve], strict=True):
            assert step == eager_step and loss == pytest.approx(eager_loss, rel=1e-4)


def test_fp16_mixed_with_a_fused_optimizer_is_still_refused_by_lightning() -> None:
    """fp16 keeps a scaler: clipping scaled gradients inside a fused step would be wrong, and Lightning says so (its
    16-mixed is CUDA-only, so the module's Trainer is a stand-in holding the real fp16 plugin)."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import MixedPrecision

    from scaling_axes.modules.tasks.acceleration import clip_gradients
    from scaling_axes.modules.tasks.lm import LanguageModel

    module = LanguageModel("transformer_124m", model_overrides=TINY_TRANSFORMER, schedule_steps=2)
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    module._trainer = SimpleNamespace(precision_plugin=plugin, gradient_clip_val=None, gradient_clip_algorithm=None)
    optimizer = module.configure_optimizers()["optimizer"]
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        clip_gradients(module, optimizer, 1.0, "norm")


def test_precision_defaults_to_bf16_mixed_on_cuda_and_32_true_on_the_cpu(monkeypatch) -> None:
    from scaling_axes.modules.tasks.acceleration import default_precision, wants_compile

    assert default_precision("cpu") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_precision() == "bf16-mixed" and default_precision("cpu") == "32-true"
    assert wants_compile(None, torch.device("cuda")) and not wants_compile(None, torch.device("cpu"))
    assert wants_compile(True, torch.device("cpu")) and not wants_compile(False, torch.device("cuda"))


def _loss_and_grads(model, idx: torch.Tensor, compiled: bool):
    model.zero_grad()
    forward = torch.compile(model) if compiled else model
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = forward(idx).float()
    targets = idx.roll(-1, 1)
    targets = model.loss_targets(targets) if hasattr(model, "loss_targets") else targets  # the MoT's bytes
    loss = F.cross_entropy(logits.flatten(0, -2), targets.flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _compiled_cases() -> dict[str, tuple[str, dict]]:
    """Every registered language model's first example (its kernels eager), and each example of one with fused
    kernels (a `kernel` field) with its Triton kernels: read off the registry, so a new architecture is compiled too."""
    from scaling_axes.modules import get_config
    from scaling_axes.modules.registry import architectures

    cases = {}
    for architecture in (a for a in architectures() if a.language_model and a.examples):
        name, first = next(iter(architecture.examples.items()))
        cases[name] = (first.preset, first.overrides)
        for name, example in architecture.examples.items():
            if "kernel" in {f.name for f in dataclasses.fields(get_config(example.preset))}:
                cases[f"{name}_triton"] = (example.preset, {**example.overrides, "kernel": "triton"})
    return cases


COMPILED = _compiled_cases()
FAST_COMPILED = ("transformer_nope", "rmt_triton")  # compile around a Triton kernel; the others (33 s for the MoT's
# cold compile on a fresh clone) under `slow`, which CI runs too


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in FAST_COMPILED else pytest.mark.slow) for n in COMPILED]
)  # every other registered model under `slow` (make test-slow), as tests.test_export.by_model
def test_the_compiled_model_gives_the_eager_loss_and_gradients_under_bf16_autocast(name) -> None:
    """Inductor (C++ on the CPU; the Triton kernels run as opaque ops under TRITON_INTERPRET=1). bf16 autocast: the
    loss agrees to 1e-2 relative and each gradient to 5% in norm, 10% where it has a few elements (bf16 rounding,
    fused or not, differs by a few %; a wrong gradient is off by O(1)). Every registered language model's first
    example, and its Triton kernels where it has them (`_compiled_cases`)."""
    if "triton" in name and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 on the CPU")
    preset, overrides = COMPILED[name]
    model = build_model(preset, **overrides)
    with torch.no_grad():  # zero-initialised projections and heads (MoT) and unit norm gains would hide paths
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    idx = torch.randint(0, 97, (2, 11))  # every example's vocabulary holds 97 ids
    torch._dynamo.reset()
    eager_loss, eager_grads = _loss_and_grads(model, idx, compiled=False)
    loss, grads = _loss_and_grads(model, idx, compiled=True)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-2, atol=1e-3)
    assert grads.keys() == eager_grads.keys()
    for key, grad in eager_grads.items():  # a few-element gradient's norm is a few bf16 roundings: 10% there
        assert _relative_error(grads[key], grad) <= (0.05 if grad.numel() > 16 else 0.1), key


def _relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return (value - reference).norm() / reference.norm().clamp_min(1e-6)


def test_compile_training_compiles_the_loss_beside_the_model_and_it_equals_float64() -> None:
    """The loss on the logits is compiled too (eager, its fp32 cast, log-softmax and log-partition were separate
    passes over [tokens, vocab] in fp32, forward and backward; nanoGPT compiles its loss with its model): compiled,
    from bf16 logits, the cross-entropy and the z term equal float64 ones to 1e-5 and the logits' gradient to bf16's
    rounding (a loss computed in bf16 is off by ~1e-3)."""
    from scaling_axes.modules.tasks.lm import LanguageModel
    from scaling_axes.modules.tasks.loss import loss_terms

    module = LanguageModel("transformer_124m", model_overrides=TINY_TRANSFORMER | {"vocab_size": 97}, z_loss=1e-4)
    module.compile_training()
    compiled = module.loss_terms
    module.compile_training()  # validate() after fit() configures the model again: nothing is wrapped twice
    assert getattr(compiled, "_torchdynamo_orig_callable", None) is loss_terms and module.loss_terms is compiled
    assert module.model._compiled_call_impl is not None
    torch._dynamo.reset()
    logits = (torch.randn(2, 5, 97) * 3).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 97, (2, 5))
    ce, z = compiled(logits, targets, True)
    (ce + 0.1 * z).backward()
    exact = logits.detach().double().requires_grad_()
    ce64, z64 = F.cross_entropy(exact.view(-1, 97), targets.view(-1)), exact.logsumexp(-1).pow(2).mean()
    (ce64 + 0.1 * z64).backward()
    assert ce.dtype == z.dtype == torch.float32
    assert ce.item() == pytest.approx(ce64.item(), rel=1e-5) and z.item() == pytest.approx(z64.item(), rel=1e-5)
    assert _relative_error(logits.grad.double(), exact.grad) <= 1e-2
    assert compiled(logits, targets, False)[1].item() == 0.0


@pytest.mark.slow  # 16 s cold; CI runs it in make test-slow
def test_a_compiled_vit_tokenformer_gives_the_eager_logits_and_gradients() -> None:
    model = build_model(
        "vit_tokenformer_b16",
        img_size=16,
        patch_size=8,
        embed_dim=32,
        depth=2,
        num_heads=2,
        num_classes=5,
        qkv_tokens=8,
        proj_tokens=8,
        ffn_tokens=16,
        drop_path=0.0,
    )
    images = torch.randn(2, 3, 16, 16)
    results = []
    for compiled in (False, True):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = (torch.compile(model) if compiled else model)(images).float()
        logits.logsumexp(-1).sum().backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=2e-2, atol=2e-2)
    for key, grad in results[0][1].items():
        assert _relative_error(results[1][1][key], grad) <= 0.05, key


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="kernel ops run on the CPU under the interpreter")
def test_the_kernel_ops_pass_torch_library_opcheck() -> None:
    import scaling_axes.kernels.pattention as pattention
    import scaling_axes.kernels.rmt as rmt
    import scaling_axes.kernels.rmt_store as rmt_store

    x, keys, values = torch.randn(7, 8), torch.randn(2 * 5, 8), torch.randn(2 * 5, 3)
    torch.library.opcheck(pattention.pattention_op, (x, keys, values, 2, math.sqrt(5), 1e-6))
    _, scores, norms = pattention.pattention_op(x, keys, values, 2, math.sqrt(5), 1e-6)
    args = (x, keys, values, scores, norms, torch.randn(7, 6), 2, math.sqrt(5), 1e-6)
    torch.library.opcheck(pattention.pattention_backward_op, args)
    matrix = torch.randn(2, 3, 5, 6, requires_grad=True)
    weight, bias, retrieval = torch.randn(5, 6), torch.randn(5, 6), torch.randn(6, 4)
    for heads_first in (False, True):
        for b in (bias, None):
            torch.library.opcheck(
                rmt.norm_retrieve_op, (matrix, retrieval, weight, b, 1e-5, b is not None, heads_first)
            )
    _, mean, rstd = rmt.norm_retrieve_op(matrix, retrieval, weight, bias, 1e-5, True, False)
    backward = (matrix.detach(), retrieval, weight, bias, mean, rstd, torch.randn(2, 3, 5, 4), True)
    torch.library.opcheck(rmt.norm_retrieve_backward_op, backward)
    data = torch.randn(2, 3, 4, 5).permute(0, 2, 3, 1)  # [B, T, D_v, R] read through the heads' strides
    torch.library.opcheck(rmt_store.store_op, (torch.randn(2, 4, 5, 6), data, torch.randn(3, 6)))


def test_a_run_whose_stdout_is_not_a_terminal_logs_its_progress(tmp_path, capsys) -> None:
    budget = Budget(steps=4, batch_size=2, seq_len=16, val_windows=2, log_every=2)
    done = train_run(Run("r", "transformer_124m", budget, dict(TINY_RUN)), tmp_path / "r", accelerator="cpu")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines if "loss" in line.split()[2:3]] == ["2/4", "4/4"]
    assert all(" tokens/s " in line and " ETA " in line and " lr " in line for line in lines if "/4" in line)
    assert any("val/loss" in line for line in lines)
    assert done["precision"] == "32-true"
    assert isinstance(ProgressLog(3), L.Callback)


def test_done_json_names_the_precision_and_the_peak_mfu_divides_by(tmp_path) -> None:
    budget = Budget(steps=2, batch_size=2, seq_len=16, val_windows=2)
    out = tmp_path / "r"
    train_run(Run("r", "transformer_124m", budget, dict(TINY_RUN)), out, accelerator="cpu", precision="bf16-mixed")
    done = json.loads((out / "done.json").read_text())
    assert done["precision"] == "bf16-mixed"
    assert done["mfu_peak"] == "none known for cpu" and done["mfu"] is None


@pytest.mark.parametrize(
    "precision, matmul, peak, tflops",
    [
        ("bf16-mixed", "highest", "bf16", 989.4),
        ("32-true", "highest", "float32", 66.9),
        ("32-true", "high", "tf32", 494.7),
    ],
)
def test_mfu_divides_by_the_peak_of_the_precision_the_run_computes_in(monkeypatch, precision, matmul, peak, tflops):
    """An H100 SXM as Lightning knows it: a 32-true MFU is against the FP32 (or TF32) peak, never bf16's."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import MixedPrecision, Precision

    from scaling_axes.harness.training.trainer import mfu_peak

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr("lightning.fabric.accelerators.cuda._is_ampere_or_later", lambda: True)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: matmul)
    plugin = MixedPrecision("bf16-mixed", "cuda") if precision == "bf16-mixed" else Precision()
    trainer = SimpleNamespace(precision_plugin=plugin, strategy=SimpleNamespace(root_device=torch.device("cuda", 0)))
    found = mfu_peak(trainer)
    assert found["mfu_peak"] == f"{peak} dense peak of NVIDIA H100 80GB HBM3"
    assert found["mfu_peak_tflops"] == pytest.approx(tflops, rel=1e-3)


def test_the_lightning_cli_and_the_image_classifier_train_under_bf16_mixed_with_fused_adamw_and_clipping(
    tmp_path, monkeypatch
):
    """The other training paths of the issue: the CLI (its defaults clip at 1.0) and a ViT run through the runner."""
    import dataclasses

    from scaling_axes.experiments.tokenformer import table2_imagenet as table2
    from scaling_axes.harness.training.lightning_cli import cli_main

    monkeypatch.setattr("sys.argv", ["scaling-axes"])
    norms = GradientNorms()
    cli = cli_main(
        [
            "fit",
            "--model.model",
            "transformer_124m",
            "--model.model_overrides",
            json.dumps(TINY_RUN),
            "--data.seq_len",
            "16",
            "--data.batch_size",
            "2",
            "--trainer.max_steps",
            "2",
            "--trainer.limit_val_batches",
            "1",
            "--trainer.accelerator",
            "cpu",
            "--trainer.precision",
            "bf16-mixed",
            "--trainer.default_root_dir",
            str(tmp_path / "cli"),
        ]
    )
    assert cli.trainer.gradient_clip_val == 1.0 and cli.trainer.optimizers[0].defaults["fused"]
    assert cli.trainer.global_step == 2 and "train/grad_norm" in cli.trainer.logged_metrics

    run = next(r for r in table2.runs(SMOKE) if r.name == "vit_tokenformer_b16")
    budget = Budget(steps=2, batch_size=8, seq_len=17, lr=1e-3, val_windows=8)
    data = {**run.data, "root": str(tmp_path / "digits")}
    run = dataclasses.replace(run, budget=budget, data=data, trainer={"gradient_clip_val": 0.01})
    train_run(run, tmp_path / "vit", extra_callbacks=[norms], accelerator="cpu", precision="bf16-mixed")
    assert all(o.defaults["fused"] for o in norms.optimizers) and min(norms.raw) > 0.01
    assert all(0.01 * 0.999 <= n <= 0.01 * 1.001 for n in norms.clipped)


def test_auto_runs_a_kernel_family_only_on_a_gpu_where_it_was_measured_faster(monkeypatch) -> None:
    from types import SimpleNamespace

    import scaling_axes.kernels as kernels

    monkeypatch.setattr(kernels, "_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    h100 = SimpleNamespace(is_cuda=True, device=SimpleNamespace(index=0))
    assert kernels.use_triton("auto", h100, "rmt") and not kernels.use_triton("auto", h100, "pattention")
    monkeypatch.setattr(kernels, "_device_name", lambda index: "NVIDIA A100-SXM4-80GB")  # measured nowhere: eager
    assert not kernels.use_triton("auto", h100, "rmt")
    assert not kernels.use_triton("auto", torch.zeros(1), "rmt") and kernels.use_triton("triton", torch.zeros(1), "rmt")


@pytest.mark.skipif(
    not os.path.exists("/lib/x86_64-linux-gnu/libc.so.6") and not os.path.exists("/lib64/libc.so.6"),
    reason="glibc only",
)
def test_freed_host_memory_is_kept_and_training_gives_the_same_numbers() -> None:
    """The allocator setting every run applies takes effect on glibc, and changes no number: a model's loss and
    gradients are bit-identical before and after it (it only decides where freed pages go)."""
    from scaling_axes.modules.tasks.acceleration import keep_freed_host_memory

    def loss_and_grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
        torch.manual_seed(0)
        model = build_model("transformer_124m", **TINY_TRANSFORMER)
        inputs = torch.randint(0, model.config.vocab_size, (2, 16))
        loss = F.cross_entropy(model(inputs).flatten(0, 1), inputs.flatten())
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    before = loss_and_grads()
    keep_freed_host_memory.cache_clear()
    assert keep_freed_host_memory()
    after = loss_and_grads()
    assert torch.equal(before[0], after[0]) and all(map(torch.equal, before[1], after[1]))


@pytest.mark.parametrize("precision, tflops", [("bf16-mixed", 989.0), ("32-true", None)])
def test_a_gpu_lightnings_table_lacks_takes_the_suites_dense_bf16_peak(monkeypatch, precision, tflops):
    """ "NVIDIA H200" (as torch names it) is not in Lightning's table (its H200 rows need "sxm1" or "nvl1", and then
    hold the sparse 2e15): bf16's MFU is against the suite's dense peak, in done.json and in the ThroughputMonitor
    alike; no other precision gets a peak it was not given."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import MixedPrecision, Precision
    from lightning.pytorch.trainer.states import RunningStage

    from scaling_axes.harness.training.callbacks import ResumableThroughputMonitor
    from scaling_axes.harness.training.trainer import mfu_peak

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr("lightning.fabric.accelerators.cuda._is_ampere_or_later", lambda: True)
    plugin = MixedPrecision("bf16-mixed", "cuda") if precision == "bf16-mixed" else Precision()
    trainer = SimpleNamespace(
        precision_plugin=plugin,
        strategy=SimpleNamespace(root_device=torch.device("cuda", 0)),
        world_size=1,
        enable_validation=False,
        state=SimpleNamespace(stage=RunningStage.TRAINING),
    )
    found = mfu_peak(trainer)
    assert found["mfu_peak_tflops"] == tflops
    monitor = ResumableThroughputMonitor(batch_size_fn=len)
    monitor.setup(trainer, None, "fit")
    peaks = {throughput.available_flops for throughput in monitor._throughputs.values()}
    assert peaks == {tflops * 1e12 if tflops else None}
