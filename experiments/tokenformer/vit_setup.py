"""The ImageNet setup of Tokenformer's ViT experiments (Tables 2, 4, 5), shared by their scripts; the three share
one run group, so the default B/16 Tokenformer is trained once.

Paper scale: MAE's supervised from-scratch recipe (Tokenformer reference section 6): 300 epochs of ImageNet-1k for
the B/16 models and 200 for the L/16 ones, as MAE trains them (1,281,167 images; 313 steps per epoch: 93,900 or
62,600 steps) at batch 4096, AdamW lr 1.6e-3, 20 warmup epochs then cosine
to 1e-5, weight decay 0.3, drop path 0.1, Mixup 0.8 / CutMix 1.0 / label smoothing 0.1, EMA 0.9999; validation on
the 50,000 images.

Smoke scale: 2-block, 64-wide ViTs on 32 px crops of the embedded MNIST digits (an ImageFolder), 100 steps of 32; small:
6 x 384 at 224 px on ImageNet when `data/imagenet/` exists, else the digits. Never a reproduction.
"""

from __future__ import annotations

import math

from scaling_axes.datamodules.corpora import default_data_root
from scaling_axes.harness.results import Row, compare, published, scale_note
from scaling_axes.harness.runs import Budget, Experiment, Run

IMAGENET_TRAIN = 1_281_167
EPOCHS = {"b16": 300, "l16": 200}  # MAE's from-scratch recipe (its appendix A.2): ViT-B 300 epochs, ViT-L 200
GROUP = "tokenformer_imagenet"
TOLERANCE = 0.005  # top-1 within half a point (relative) counts as a match


def budget(scale: str, tokens_per_image: int, epochs: int = EPOCHS["b16"]) -> Budget:
    if scale == "paper":
        steps_per_epoch = math.ceil(IMAGENET_TRAIN / 4096)
        return Budget(steps=epochs * steps_per_epoch, batch_size=4096, seq_len=tokens_per_image, lr=1.6e-3,
                      warmup_steps=20 * steps_per_epoch, min_lr_ratio=1e-5 / 1.6e-3, val_every=5 * steps_per_epoch,
                      micro_batch=128, checkpoint_every=steps_per_epoch)  # fmt: skip
    if scale == "small":
        # 4x the MAE rule's 1e-4 x 256/256: short runs tolerate (and need) a higher lr
        return Budget(steps=2000, batch_size=256, seq_len=tokens_per_image, lr=4e-4, warmup_steps=200,
                      min_lr_ratio=0.01, val_every=200, val_windows=5000, checkpoint_every=500)  # fmt: skip
    return Budget(steps=100, batch_size=32, seq_len=tokens_per_image, lr=1e-3, warmup_steps=10, min_lr_ratio=0.01,
                  val_every=20, val_windows=200, checkpoint_every=50)  # fmt: skip


def shrunk(scale: str, model: str) -> dict:
    """Smoke and small overrides: same family and options, 32 px digits or a 6 x 384 ViT; slots scale with width."""
    if scale == "paper":
        return {}
    large, matched = "l16" in model, "matched" in model
    if scale == "smoke":
        width, depth, heads, size, patch = (96 if large else 64), 2, 2, 32, 8
    else:
        width, depth, heads, size, patch = (512 if large else 384), 6, 6 if not large else 8, 224, 16
    slots = round(width * (0.75 if matched else 0.95))  # B/16: 573 and 729 slots at width 768
    overrides = {"embed_dim": width, "depth": depth, "num_heads": heads, "img_size": size, "patch_size": patch}
    if scale == "smoke" or not (default_data_root() / "imagenet").exists():
        overrides["num_classes"] = 10
    if model.startswith("vit_tokenformer"):
        overrides |= {"qkv_tokens": slots, "proj_tokens": slots, "ffn_tokens": 4 * slots}
    return overrides


def vit_run(scale: str, name: str, model: str, **overrides) -> Run:
    config_overrides = {**shrunk(scale, model), **overrides}
    from scaling_axes.modules import get_config

    tokens = get_config(model, **config_overrides).tokens_per_image
    imagenet = scale == "paper" or (scale == "small" and (default_data_root() / "imagenet").exists())
    ema = 0.9999 if scale == "paper" else 0.99
    epochs = EPOCHS["l16" if "l16" in model else "b16"]
    return Run(name, model, budget(scale, tokens, epochs), config_overrides, lm={"ema_decay": ema},
               data={"source": "folder" if imagenet else "embedded"})  # fmt: skip


def plan_note(scale: str) -> str:
    return __doc__.split("\n\n")[1 if scale == "paper" else 2].replace("\n", " ")


def accuracy_rows(table: str, scale: str, run: Run, done: dict | None) -> list[Row]:
    """Top-1 (model and EMA) beside the paper's, and the parameter count beside the paper's."""
    from scaling_axes.modules.flops import formula_params

    paper, note = published("tokenformer"), scale_note(scale)
    params = sum(formula_params(run.config).values())
    expected = paper.get((table, run.name, "params"))
    rows = [Row(table, run.name, "params", expected if scale == "paper" else None, params, "parameters", run.name,
                compare(expected, params, 0.01) if scale == "paper" else "analytic",
                "" if scale == "paper" else f"of the {scale} model")]  # fmt: skip
    size = paper.get((table, run.name, "image_size"))
    if size is not None and scale == "paper":
        rows.append(Row(table, run.name, "image_size", size, run.config.img_size, "px", run.name,
                        "match" if run.config.img_size == size else "differs"))  # fmt: skip
    for metric in ("top1", "ema_top1", "top5"):
        ours = done and done.get(f"val_{metric}")
        ours = None if ours is None else 100 * ours
        expected = paper.get((table, run.name, "top1")) if metric in ("top1", "ema_top1") else None
        status = compare(expected, ours, TOLERANCE) if scale == "paper" else ("measured" if ours is not None
                                                                             else "not_run")  # fmt: skip
        rows.append(Row(table, run.name, metric, expected, ours, "%", run.name, status, note))
    return rows


def ablation(name: str, doc: str, table: str, field: str, variants: dict[str, object]) -> Experiment:
    """An ablation of ViT-Tokenformer-B/16: one run per value of config `field` (run name -> value)."""

    def runs(scale: str) -> list[Run]:
        return [vit_run(scale, run, "vit_tokenformer_b16", **{field: value}) for run, value in variants.items()]

    def report(scale: str, results: dict[str, dict]) -> list[Row]:
        return [row for run in runs(scale) for row in accuracy_rows(table, scale, run, results.get(run.name))]

    return Experiment(name=name, description=doc.splitlines()[0], runs=runs, report=report, plan_note=plan_note,
                      run_group=GROUP)  # fmt: skip
