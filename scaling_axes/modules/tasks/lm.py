"""Next-token prediction for any registered decoder: the LightningModule, and its checkpoint helpers."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics.aggregation import MeanMetric

from scaling_axes.io import atomic_torch_save, load_state, load_torch, verify_checksum
from scaling_axes.modules.flops import lookup_tables, norm_parameters, train_flops_per_token
from scaling_axes.modules.registry import build_model
from scaling_axes.modules.tasks.acceleration import clip_gradients, compile_model, wants_compile
from scaling_axes.modules.tasks.loss import eager_loss_terms, loss_terms
from scaling_axes.modules.tasks.optim import MuonWithAdam, constant_then_linear, speedrun_lrs


def check_finite_loss(module: L.LightningModule, loss: Tensor) -> None:
    """Stop at the first non-finite training loss, before its gradients reach the weights or a checkpoint, saying
    the step, the last finite loss and the last good checkpoint (resuming from it is rerunning the command)."""
    if torch.isfinite(loss):
        module.last_finite_loss = loss.detach()
        return
    last = getattr(module, "last_finite_loss", None)
    callback = module.trainer.checkpoint_callback
    checkpoint = getattr(callback, "last_model_path", "")
    if not checkpoint and callback is not None and (Path(callback.dirpath) / "last.ckpt").exists():
        checkpoint = str(Path(callback.dirpath) / "last.ckpt")  # written by an earlier session of this run
    last_loss = "none" if last is None else f"{last.item():.6g}"
    raise FloatingPointError(
        f"non-finite training loss {loss.item()} at step {module.global_step}; last finite loss {last_loss}; last "
        f"good checkpoint: {checkpoint or 'none written yet'}. Lower the learning rate or check the data, then rerun "
        "the same command to resume from that checkpoint"
    )


def momentum_warmup_steps(momentum_warmup: float, total: int) -> int:
    """Muon's momentum warmup in steps: `momentum_warmup` steps, or that fraction of `total` where it is below 1,
    rounded down (a tenth of the run is never more than a tenth)."""
    return max(1, int(momentum_warmup * total)) if momentum_warmup < 1 else int(momentum_warmup)


class LanguageModel(L.LightningModule):
    """Train `model` (a registered preset name, with `model_overrides`) on next-token cross-entropy.

    Args:
        lr, min_lr_ratio, warmup_steps, schedule_steps: linear warmup from 0 to `lr`, then cosine to
            `lr * min_lr_ratio` at `schedule_steps` (default: the Trainer's max_steps).
        weight_decay, betas, eps: decoupled AdamW; no decay on norm parameters of any rank (App. C.1 of the RMT
            paper; the RMT's norm gains are matrices) nor on biases (1-d parameters), nor on embeddings and untied
            unembeddings unless `decay_embeddings` (the Tokenformer code decays them).
        decay_per_step: where given, the decay a step at the schedule's peak whatever `lr` (weight_decay is then
            decay_per_step / lr): the RMT code's 1e-4, which it does not multiply by the lr.
        z_loss: weight of the squared log-partition term (PaLM); 0 disables it.
        init_weights: a `.pt` state dict (e.g. a grown model's) loaded before training; ignored on resume.
        optimizer: "adamw", or "muon" for `modules.tasks.optim.MuonWithAdam` over the model's `param_groups()` at
            `group_lrs` (default `speedrun_lrs`; `lr` is then unused) times `group_lr_scale` (what a sweep below the
            paper's fixed rates varies), its Newton-Schulz `newton_schulz` ("record": the MoT runs' five coefficient
            triples; "torch": `torch.optim.Muon`), its momentum warmed up over `momentum_warmup` steps (the
            record's 300), or over that fraction of the schedule where it is below 1 (a short run's).
        schedule: "warmup_cosine", or "constant_then_linear" (no warmup, linear to 0 over the last
            `cooldown_fraction`).
        compile: `torch.compile` the model (the Triton kernels are ops it calls) and its loss (`compile_training`);
            None: on a CUDA GPU.
        lr_scaled_decay: a model's per-parameter lr multipliers (`lr_scales()`, e.g. muP's) scale its decay too, as
            torch's AdamW does (lr x wd); False keeps lr x wd the same for every parameter, as the RMT code's
            decay 1e-4 x schedule, which its muP lr scaling does not touch.

    AdamW is the fused one on every device; gradients are clipped at the Trainer's `gradient_clip_val` by
    `modules.tasks.acceleration.clip_gradients` (Lightning's own clipping refuses fused optimizers under bf16-mixed),
    and their norm before clipping is logged as `train/grad_norm`.

    A model may predict something other than the next token: its `loss_targets(next_tokens)` gives the targets its
    logits are scored against, and `predicts_bytes` turns off bits per token-byte. With several validation sets
    (the datamodule's `val_names`), each is logged as `val/<name>/loss` and `val/loss` is the first.
    """

    def __init__(
        self,
        model: str = "tokenformer_150m",
        model_overrides: dict[str, Any] | None = None,
        lr: float = 6e-4,
        min_lr_ratio: float = 0.1,
        warmup_steps: int = 2000,
        schedule_steps: int | None = None,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        decay_embeddings: bool = True,
        z_loss: float = 0.0,
        init_weights: str | None = None,
        optimizer: Literal["adamw", "muon"] = "adamw",
        group_lrs: dict[str, float] | None = None,
        group_lr_scale: float = 1.0,
        schedule: Literal["warmup_cosine", "constant_then_linear"] = "warmup_cosine",
        cooldown_fraction: float = 0.6,
        compile: bool | None = None,
        lr_scaled_decay: bool = True,
        newton_schulz: Literal["record", "torch"] = "record",
        momentum_warmup: float = 300,
        decay_per_step: float | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(model, **(model_overrides or {}))
        if init_weights:
            load_weights(self.model, load_state(init_weights, "pass a state dict the suite wrote"), init_weights)
        self.eval_losses = nn.ModuleList([MeanMetric()])
        self.val_names: list[str] = []
        self.tokens_seen = 0
        self.test_window_losses: list[float] = []  # the last test's, window by window (`test_step`)
        self.flops_per_batch: int | None = None  # read by Lightning's ThroughputMonitor for MFU
        self.loss_terms = eager_loss_terms  # `loss_terms` compiled, by `compile_training`

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(idx)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        vocab = getattr(datamodule, "vocab_size", None)
        if vocab is not None and vocab > self.model.config.vocab_size:
            raise ValueError(
                f"the data's tokenizer has {vocab} ids but model {self.hparams.model!r} has vocab_size="
                f"{self.model.config.vocab_size}; use a model whose vocab_size is at least {vocab}"
            )
        self.val_names = list(getattr(datamodule, "val_names", []))
        while len(self.eval_losses) < max(1, len(self.val_names)):
            self.eval_losses.append(MeanMetric())
        if datamodule is not None and hasattr(datamodule, "hparams"):
            seq_len, batch = datamodule.hparams.seq_len, datamodule.hparams.batch_size
            self.flops_per_batch = train_flops_per_token(self.model.config, seq_len) * seq_len * batch

    def loss(self, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        """(cross-entropy, z-loss term) of the model on `inputs` against next-token `targets`."""
        if hasattr(self.model, "loss_targets"):
            targets = self.model.loss_targets(targets)
        return self.loss_terms(self(inputs), targets, bool(self.hparams.z_loss))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, targets = batch
        ce, z = self.loss(inputs, targets)
        loss = ce + self.hparams.z_loss * z
        check_finite_loss(self, loss)
        self.tokens_seen += inputs.numel() * self.trainer.world_size
        # every process's mean: the curve, the spike test and the table read the whole batch's loss, not rank 0's part
        self.log_dict({"train/loss": ce, "train/z_loss": z}, sync_dist=True)
        self.log("train/tokens", float(self.tokens_seen))
        self.log("train/loss_step", ce, prog_bar=True, logger=False)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, dataloader_idx)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """The test split's mean, and each window's own loss in order (`test_window_losses`: what a bootstrap over
        window blocks resamples); on several devices, whose samplers split the windows, the mean alone."""
        if self.trainer.world_size > 1:
            return self._eval_step(batch)
        inputs, targets = batch
        logits = self(inputs)
        scored = self.model.loss_targets(targets) if hasattr(self.model, "loss_targets") else targets
        per_window = torch.stack(
            [self.loss_terms(logits[i : i + 1], scored[i : i + 1], False)[0] for i in range(len(logits))]
        )
        self.eval_losses[0].update(per_window.mean(), weight=targets.numel())
        self.test_window_losses += per_window.tolist()

    def on_test_epoch_start(self) -> None:
        self.test_window_losses = []

    def _eval_step(self, batch: tuple[Tensor, Tensor], dataloader_idx: int = 0) -> None:
        inputs, targets = batch
        ce, _ = self.loss(inputs, targets)
        self.eval_losses[dataloader_idx].update(ce, weight=targets.numel())

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val", None)
        for i, name in enumerate(self.val_names[1:], start=1):
            self._log_eval(f"val/{name}", None, i)

    def on_test_epoch_end(self) -> None:
        self._log_eval("test", "test")

    def _log_eval(self, prefix: str, split: str | None, index: int = 0) -> None:
        """Token-weighted mean loss, perplexity and, when the data knows its bytes, bits per byte."""
        loss = self.eval_losses[index].compute()
        self.eval_losses[index].reset()
        metrics = {f"{prefix}/loss": loss, f"{prefix}/ppl": loss.exp()}
        if len(self.val_names) > 1 and prefix == "val":
            metrics[f"val/{self.val_names[0]}/loss"] = loss
        datamodule = getattr(self.trainer, "datamodule", None)
        bytes_per_token = datamodule.bytes_per_token(split) if hasattr(datamodule, "bytes_per_token") else None
        if bytes_per_token and index == 0 and not getattr(self.model, "predicts_bytes", False):
            metrics[f"{prefix}/bpb"] = loss / math.log(2) / bytes_per_token
        # compute() has already reduced over ranks, so the values agree and averaging them again only tells Lightning so
        self.log_dict(metrics, prog_bar=prefix == "val", sync_dist=True)

    def configure_model(self) -> None:
        """Shard (under FSDP), then compile (see `compile`)."""
        if self.device_mesh is not None:
            self._shard()
        if wants_compile(self.hparams.compile, self.trainer.strategy.root_device):
            self.compile_training()

    def compile_training(self) -> None:
        """`torch.compile` the model in place (checkpoint keys unchanged) and, separately, the plain `loss_terms`,
        whose passes over the [tokens, vocab] logits inductor fuses (nanoGPT compiles its loss with its model)."""
        compile_model(self.model)
        if self.loss_terms is eager_loss_terms:  # validate() after fit() configures the model again
            self.loss_terms = torch.compile(loss_terms)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)

    def _shard(self) -> None:
        """Under FSDP (`--strategy fsdp`, Lightning's ModelParallelStrategy) each transformer block is one FSDP2 unit,
        then the rest of the model (embeddings, final norm, head) is the root unit. With `bf16-mixed` precision the
        units gather and use their weights in bf16 and reduce gradients in float32, while the sharded master weights
        and the optimizer stay float32: autocast alone would all-gather float32 weights, twice the traffic."""
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        if isinstance(self.model, FSDPModule):  # validate() after fit() calls this again
            return

        policy = MixedPrecisionPolicy()  # full precision
        if self.trainer.precision == "bf16-mixed":
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        shard = functools.partial(fully_shard, mesh=self.device_mesh["data_parallel"], mp_policy=policy)
        for block in self.model.blocks:
            shard(block)
        shard(self.model)

    def configure_optimizers(self):
        hp = self.hparams
        total = hp.schedule_steps or self.trainer.max_steps
        if total is None or total <= 0:
            raise ValueError("set schedule_steps or the Trainer's max_steps: the lr schedule needs a length")
        optimizer = self._muon(total) if hp.optimizer == "muon" else self._adamw()
        if hp.schedule == "constant_then_linear":
            factor = functools.partial(constant_then_linear, total=total, cooldown_fraction=hp.cooldown_fraction)
        else:
            factor = functools.partial(warmup_cosine, warmup=hp.warmup_steps, total=total, floor=hp.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _muon(self, total: int) -> MuonWithAdam:
        if not hasattr(self.model, "param_groups"):
            raise ValueError(f"optimizer='muon' needs a model with param_groups(); {self.hparams.model!r} has none")
        lrs = self.hparams.group_lrs or speedrun_lrs(self.model.config.d_model)
        lrs = {group: lr * self.hparams.group_lr_scale for group, lr in lrs.items()}
        return MuonWithAdam(
            self.model.param_groups(),
            lrs,
            momentum_warmup=momentum_warmup_steps(self.hparams.momentum_warmup, total),
            newton_schulz=self.hparams.newton_schulz,
        )

    def _adamw(self) -> torch.optim.AdamW:
        hp = self.hparams
        embeddings = {id(p) for p in lookup_tables(self.model)}  # an untied unembedding counts as an embedding
        norms = {id(p) for p in norm_parameters(self.model)}
        lr_scales = self.model.lr_scales() if hasattr(self.model, "lr_scales") else {}
        groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
        for name, p in self.model.named_parameters():
            skip = p.dim() < 2 or id(p) in norms or (id(p) in embeddings and not hp.decay_embeddings)
            groups.setdefault((not skip, lr_scales.get(name, 1.0)), []).append(p)
        return torch.optim.AdamW(
            [
                {"params": params, "lr": hp.lr * scale, "weight_decay": self._decay(decays, scale)}
                for (decays, scale), params in sorted(groups.items(), key=lambda g: (not g[0][0], -g[0][1]))
            ],
            lr=hp.lr,
            betas=tuple(hp.betas),
            eps=hp.eps,
            fused=True,
        )

    def _decay(self, decays: bool, lr_scale: float) -> float:
        if not decays:
            return 0.0
        hp = self.hparams
        decay = hp.weight_decay if hp.decay_per_step is None else hp.decay_per_step / hp.lr
        return decay if hp.lr_scaled_decay else decay / lr_scale

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["tokens_seen"] = self.tokens_seen

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.tokens_seen = checkpoint.get("tokens_seen", 0)


def warmup_cosine(step: int, warmup: int, total: int, floor: float) -> float:
    """LR multiplier: linear 0 -> 1 over `warmup` steps, then cosine 1 -> `floor` at `total`, then `floor`."""
    if step < warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def load_weights(model: nn.Module, state_dict: dict[str, Tensor], source: str = "state dict") -> None:
    """`load_state_dict(strict)` that names each missing, unexpected or mis-shaped tensor."""
    own = model.state_dict()
    problems = [f"missing {k}" for k in own if k not in state_dict]
    problems += [f"unexpected {k}" for k in state_dict if k not in own]
    problems += [
        f"{k}: {source} has {tuple(v.shape)}, model has {tuple(own[k].shape)}"
        for k, v in state_dict.items()
        if k in own and v.shape != own[k].shape
    ]
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise ValueError(f"{source} does not fit {type(model).__name__}: {shown}")
    model.load_state_dict(state_dict)


def load_lm_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The backbone and hyperparameters stored in a `LanguageModel` Lightning checkpoint."""
    fix = "pass a checkpoint that a LanguageModel run wrote (checkpoints/last.ckpt)"
    checkpoint = load_torch(path, fix)  # first: a crafted pickle is named as such
    verify_checksum(Path(path), fix)
    if "hyper_parameters" not in checkpoint or "model" not in checkpoint["hyper_parameters"]:
        raise ValueError(
            f"{path} is not a checkpoint of scaling_axes.modules.tasks.lm.LanguageModel (no hyper_parameters.model)"
        )
    hparams = dict(checkpoint["hyper_parameters"])
    model = build_model(hparams["model"], **(hparams.get("model_overrides") or {}))
    state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    load_weights(model, state, str(path))
    return model, hparams


def save_lm_checkpoint(
    path: str | Path, model_name: str, overrides: dict[str, Any], state_dict: dict[str, Tensor], hparams: dict
) -> None:
    """Write a weights-only `LanguageModel` checkpoint (fresh optimizer on load), atomically."""
    checkpoint = {
        "hyper_parameters": {
            **hparams,
            "model": model_name,
            "model_overrides": overrides,
            "init_weights": None,
        },
        "state_dict": {f"model.{k}": v for k, v in state_dict.items()},
    }
    atomic_torch_save(checkpoint, path, checksum=True)
