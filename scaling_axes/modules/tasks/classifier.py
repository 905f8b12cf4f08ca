"""Image classification for any timm model (or registered ViT preset): the MAE supervised from-scratch recipe that
Tokenformer's ViT used (Tokenformer reference section 6).

AdamW (betas 0.9/0.95, weight decay 0.3, none on norms, biases, class token and position embedding), linear warmup
then cosine to `min_lr`, Mixup 0.8 / CutMix 1.0 with label smoothing 0.1 in the training step (timm's `Mixup`,
soft-target cross-entropy), drop path in the model, an EMA of the weights (timm's `ModelEmaV3`), top-1 and top-5
accuracy with torchmetrics for both the model and its EMA. The paper's lr is 1.6e-3 at batch 4096 (1e-4 x 4096/256):
scale it with the batch (`scaled_lr`).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.aggregation import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from scaling_axes.modules.flops import train_flops_per_token
from scaling_axes.modules.registry import build_model, list_models
from scaling_axes.modules.tasks.acceleration import clip_gradients, compile_model, wants_compile
from scaling_axes.modules.tasks.lm import check_finite_loss, warmup_cosine


def scaled_lr(batch_size: int, base_lr: float = 1e-4) -> float:
    """The MAE rule: lr = base_lr x batch / 256 (1.6e-3 at 4096)."""
    return base_lr * batch_size / 256


def build_classifier(model: str, num_classes: int, overrides: dict[str, Any]) -> nn.Module:
    """A registered ViT preset, else any timm model name."""
    overrides = {**overrides, "num_classes": num_classes}  # the data's class count wins over the config's
    if model in list_models():
        return build_model(model, **overrides)
    import timm

    import scaling_axes.modules.timm_vit  # noqa: F401  (its names, as timm's: vit_tokenformer_base_patch16_224, ...)

    return timm.create_model(model, **overrides)


class ImageClassifier(L.LightningModule):
    """Train `model` on images with the recipe above; `num_classes` defaults to the datamodule's."""

    def __init__(
        self,
        model: str = "vit_tokenformer_b16",
        model_overrides: dict[str, Any] | None = None,
        num_classes: int | None = None,
        lr: float = 1.6e-3,
        min_lr: float = 1e-5,
        warmup_steps: int = 0,
        schedule_steps: int | None = None,
        weight_decay: float = 0.3,
        betas: tuple[float, float] = (0.9, 0.95),
        mixup: float = 0.8,
        cutmix: float = 1.0,
        label_smoothing: float = 0.1,
        ema_decay: float | None = 0.9999,
        compile: bool | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model: nn.Module | None = None
        self.ema: nn.Module | None = None
        self.metrics = nn.ModuleDict()
        self.val_loss = MeanMetric()
        self.flops_per_batch: int | None = None  # read by Lightning's ThroughputMonitor for MFU
        if num_classes is not None:
            self._build(num_classes)

    def _build(self, num_classes: int) -> None:
        from timm.data import Mixup
        from timm.utils import ModelEmaV3

        hp = self.hparams
        self.model = build_classifier(hp.model, num_classes, dict(hp.model_overrides or {}))
        self.ema = ModelEmaV3(self.model, decay=hp.ema_decay) if hp.ema_decay else None
        self.mixup = (
            Mixup(
                mixup_alpha=hp.mixup,
                cutmix_alpha=hp.cutmix,
                label_smoothing=hp.label_smoothing,
                num_classes=num_classes,
            )
            if hp.mixup or hp.cutmix
            else None
        )
        for prefix in ("", "ema_") if self.ema is not None else ("",):
            for k in (1, 5):
                self.metrics[f"{prefix}top{k}"] = MulticlassAccuracy(
                    num_classes, top_k=min(k, num_classes), average="micro"
                )

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if self.model is None:
            classes = getattr(datamodule, "num_classes", None)
            if not classes:
                raise ValueError("ImageClassifier needs num_classes, or a datamodule that knows it")
            self.hparams.num_classes = classes
            self._build(classes)
        config = getattr(self.model, "config", None)
        if config is not None and datamodule is not None:  # a preset: its true FLOPs give the ThroughputMonitor's MFU
            tokens = config.tokens_per_image
            self.flops_per_batch = train_flops_per_token(config, tokens) * tokens * datamodule.hparams.batch_size

    def configure_model(self) -> None:
        """`compile`: torch.compile the model (None: on a CUDA GPU); clipping and AdamW as in `LanguageModel`."""
        if self.model is not None and wants_compile(self.hparams.compile, self.trainer.strategy.root_device):
            compile_model(self.model)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)

    def forward(self, images: Tensor) -> Tensor:
        return self.model(images)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        if self.mixup is not None:
            if images.shape[0] % 2:
                raise ValueError(f"Mixup/CutMix need an even batch; got {images.shape[0]} images per device")
            images, targets = self.mixup(images, labels)
        else:
            targets = F.one_hot(labels, self.hparams.num_classes).float()
        loss = torch.sum(-targets * F.log_softmax(self(images).float(), dim=-1), dim=-1).mean()
        check_finite_loss(self, loss)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)  # the whole batch's, as LanguageModel's
        return loss

    def on_train_batch_end(self, *args: Any) -> None:
        if self.ema is not None:
            self.ema.update(self.model, step=self.global_step)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self(images).float()
        self.val_loss.update(F.cross_entropy(logits, labels), weight=labels.numel())
        ema_logits = self.ema(images).float() if self.ema is not None else None
        for name, metric in self.metrics.items():
            metric.update(ema_logits if name.startswith("ema_") else logits, labels)

    def on_validation_epoch_end(self) -> None:
        metrics = {"val/loss": self.val_loss.compute()}
        self.val_loss.reset()
        for name, metric in self.metrics.items():
            metrics[f"val/{name}"] = metric.compute()
            metric.reset()
        self.log_dict(metrics, prog_bar=True, sync_dist=True)  # already global, as in LanguageModel._log_eval

    def configure_optimizers(self):
        hp = self.hparams
        skip = {f"{name}" for name in getattr(self.model, "no_weight_decay", lambda: set())()}
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if p.dim() < 2 or name in skip else decay).append(p)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=hp.lr,
            betas=tuple(hp.betas),
            fused=True,
        )
        total = hp.schedule_steps or self.trainer.max_steps
        if total is None or total <= 0:
            raise ValueError("set schedule_steps or the Trainer's max_steps: the cosine schedule needs a length")
        floor = hp.min_lr / hp.lr
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, total, floor)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
