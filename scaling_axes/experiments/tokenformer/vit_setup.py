"""The ImageNet setup of Tokenformer's ViT experiments (Tables 2, 4, 5), shared by their scripts; the three share
one run group, so the default B/16 Tokenformer is trained once.

Paper scale: MAE's supervised from-scratch recipe (Tokenformer reference section 6): 300 epochs of ImageNet-1k for
the B/16 models and 200 for the L/16 ones, as MAE trains them (1,281,167 images; 313 steps per epoch: 93,900 or
62,600 steps) at batch 4096, AdamW lr 1.6e-3, 20 warmup epochs then cosine
to 1e-5, weight decay 0.3, drop path 0.1, Mixup 0.8 / CutMix 1.0 / label smoothing 0.1, EMA 0.9999; validation on
the 50,000 images.

Smoke scale: 2-block, 64-wide ViTs on 32 px crops of the embedded MNIST digits (an ImageFolder), 100 steps of 32; cpu:
2-block, 32- and 48-wide ViTs on 16 px digits, 2,000 steps of 64 (28 passes over the 4,500 training digits, three
seeds) without ImageNet's Mixup, CutMix and label smoothing and at weight decay 0.05; small: 6 x 384 at 224 px on
ImageNet when `data/imagenet/` exists, else the digits. Never a reproduction.
"""

from __future__ import annotations

import dataclasses
import math

from scaling_axes.datamodules.image_counts import IMAGENET_TRAIN_IMAGES
from scaling_axes.experiments.tokenformer.recipes import IMAGENET, PAPER_EMA, vit_at
from scaling_axes.harness.results import Row, compare, published
from scaling_axes.harness.runs import Budget, Experiment, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.significance import beyond_reach

EPOCHS = {"b16": 300, "l16": 200}  # MAE's from-scratch recipe (its appendix A.2): ViT-B 300 epochs, ViT-L 200
GROUP = "tokenformer_imagenet"
MAX_EPOCHS = 1.01 * max(EPOCHS.values())  # the recipe passes over ImageNet 300 times (whole last batches: 300.2)
TOLERANCE = 0.005  # top-1 within half a point (relative) counts as a match


def budget(scale: Scale, tokens_per_image: int, epochs: int = EPOCHS["b16"]) -> Budget:
    if not scale.paper_configs:
        return dataclasses.replace(vit_at(scale).budget, seq_len=tokens_per_image)
    steps_per_epoch = math.ceil(IMAGENET_TRAIN_IMAGES / 4096)
    return Budget(
        steps=epochs * steps_per_epoch,
        batch_size=4096,
        seq_len=tokens_per_image,
        lr=1.6e-3,
        warmup_steps=20 * steps_per_epoch,
        min_lr_ratio=1e-5 / 1.6e-3,
        val_every=5 * steps_per_epoch,
        micro_batch=128,
        checkpoint_every=steps_per_epoch,
    )


def shrunk(scale: Scale, model: str) -> dict:
    """The scale's shrunk ViT (`recipes.VIT`): digits or a 6 x 384 ViT; slots scale with width."""
    if scale.paper_configs:
        return {}
    s, large = vit_at(scale), "l16" in model
    width = s.widths[large]
    slots = round(width * (0.75 if "matched" in model else 0.95))  # B/16: 573 and 729 slots at width 768
    overrides = {
        "embed_dim": width,
        "depth": s.depth,
        "num_heads": s.heads[large],
        "img_size": s.img_size,
        "patch_size": s.patch_size,
    }
    if IMAGENET.at(scale) != IMAGENET.real:
        overrides["num_classes"] = 10
    if model.startswith("vit_tokenformer"):
        overrides |= {"qkv_tokens": slots, "proj_tokens": slots, "ffn_tokens": 4 * slots}
    return overrides


def vit_run(scale: Scale, name: str, model: str, **overrides) -> Run:
    config_overrides = {**shrunk(scale, model), **overrides}
    from scaling_axes.modules import get_config

    tokens = get_config(model, **config_overrides).tokens_per_image
    imagenet = IMAGENET.at(scale) == IMAGENET.real
    lm = (
        {"ema_decay": PAPER_EMA}
        if scale.paper_configs
        else {"ema_decay": vit_at(scale).ema_decay, **vit_at(scale).regularisation}
    )
    epochs = EPOCHS["l16" if "l16" in model else "b16"]
    return Run(
        name,
        model,
        budget(scale, tokens, epochs),
        config_overrides,
        lm=lm,
        data={
            "source": "folder" if imagenet else "embedded",
            **({} if scale.paper_configs else vit_at(scale).augmentation),
        },
    )


def reach(scale: Scale, paper_margin: float) -> str | None:
    """Why a claim whose margin in the paper is `paper_margin` points of top-1 cannot be decided at `scale` (its
    recipe's measured noise, the scale's seeds); None where it can (or no noise is recorded: paper scale)."""
    noise = None if scale.paper_configs else vit_at(scale).top1_noise
    return None if noise is None else beyond_reach(paper_margin, noise, scale.seeds)


def plan_note(scale: Scale) -> str:
    return __doc__.split("\n\n")[1 if scale.paper_configs else 2].replace("\n", " ")


def accuracy_rows(table: str, scale: Scale, run: Run, done: dict | None) -> list[Row]:
    """Top-1 (model and EMA) beside the paper's, and the parameter count beside the paper's."""
    from scaling_axes.modules.flops import formula_params

    paper, note = published("tokenformer"), scale.note
    params = sum(formula_params(run.config).values())
    expected, at_paper = paper.get((table, run.name, "params")), scale.paper_configs
    rows = [
        Row(
            table=table,
            row=run.name,
            metric="params",
            paper=expected if at_paper else None,
            ours=params,
            unit="parameters",
            run=run.name,
            status=compare(expected, params, 0.01) if at_paper else "analytic",
            note="" if scale.paper_configs else f"of the {scale} model",
        )
    ]
    size = paper.get((table, run.name, "image_size"))
    if size is not None and scale.paper_configs:
        rows.append(
            Row(
                table=table,
                row=run.name,
                metric="image_size",
                paper=size,
                ours=run.config.img_size,
                unit="px",
                run=run.name,
                status="match" if run.config.img_size == size else "differs",
            )
        )
    for metric in ("top1", "ema_top1", "top5"):
        ours = done and done.get(f"val_{metric}")
        ours = None if ours is None else 100 * ours
        expected = paper.get((table, run.name, "top1")) if metric in ("top1", "ema_top1") else None
        status = (
            compare(expected, ours, TOLERANCE)
            if scale.paper_configs
            else ("measured" if ours is not None else "not_run")
        )
        rows.append(
            Row(
                table=table,
                row=run.name,
                metric=metric,
                paper=expected,
                ours=ours,
                unit="%",
                run=run.name,
                status=status,
                note=note,
            )
        )
    return rows


def ablation(
    name: str, doc: str, table: str, field: str, variants: dict[str, object], paper_margin: float
) -> Experiment:
    """An ablation of ViT-Tokenformer-B/16: one run per value of config `field` (run name -> value), trained where
    its claim (of `paper_margin` points in the paper) is in reach."""

    def runs(scale: Scale) -> list[Run]:
        if reach(scale, paper_margin):
            return []
        return [vit_run(scale, run, "vit_tokenformer_b16", **{field: value}) for run, value in variants.items()]

    def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
        return [row for run in runs(scale) for row in accuracy_rows(table, scale, run, results.get(run.name))]

    return Experiment(
        name=name,
        description=doc.splitlines()[0],
        runs=runs,
        report=report,
        plan_note=plan_note,
        run_group=GROUP,
        max_epochs=MAX_EPOCHS,
    )
