"""ViT-Tokenformer as timm models, the ImageNet datamodule on folders it writes, and the classification module."""

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from PIL import Image

from scaling_axes.datamodules.imagenet import ImageNetDataModule, check_image_folder, load_image
from scaling_axes.harness.scales import PAPER, SMOKE
from scaling_axes.modules import (
    build_model,
    get_config,
    timm_vit,  # noqa: F401  (registers the ViT-Tokenformer names with timm)
)
from scaling_axes.modules.architectures.tokenformer import normalize_scores
from scaling_axes.modules.configs.vit_tokenformer_config import TIMM_NAMES
from scaling_axes.modules.flops import counted_flops, counted_params, formula_flops, formula_params
from scaling_axes.modules.tasks.classifier import ImageClassifier

TINY = {
    "img_size": 16,
    "patch_size": 8,
    "embed_dim": 32,
    "depth": 2,
    "num_heads": 2,
    "num_classes": 5,
    "qkv_tokens": 12,
    "proj_tokens": 10,
    "ffn_tokens": 40,
    "drop_path": 0.0,
}


@pytest.mark.parametrize("timm_name", sorted(TIMM_NAMES))
def test_timm_create_model_builds_every_registered_name(timm_name: str) -> None:
    with torch.device("meta"):
        model = timm.create_model(timm_name, drop_path_rate=0.2)
    assert model.config == get_config(TIMM_NAMES[timm_name], drop_path=0.2)
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm.create_model(timm_name, pretrained=True)


@pytest.mark.parametrize(
    "name,paper",
    [
        ("vit_tokenformer_b16", 109e6),
        ("vit_tokenformer_b16_matched", 86e6),
        ("vit_tokenformer_l16", 407e6),
        ("vit_tokenformer_l16_matched", 307e6),
        ("vit_b16", 86e6),
        ("vit_l16", 307e6),
    ],
)
def test_parameter_counts_within_one_percent_of_the_paper(name: str, paper: float) -> None:
    with torch.device("meta"):
        model = build_model(name)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - paper) / paper < 0.01
    assert formula_params(model.config) == counted_params(model)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"pattention": False, "block_norm_parametric": True},
        {"block_norm_parametric": True, "normalization": "softmax"},
    ],
)
def test_flop_formulas_equal_the_count(overrides: dict) -> None:
    config = get_config("vit_tokenformer_b16", **{**TINY, **overrides})
    assert formula_flops(config, config.tokens_per_image) == counted_flops(config, 0)


def test_a_tokenformer_block_is_pattention_attention_and_ffn_on_non_parametric_norms() -> None:
    """x + Pat_o(MHA(Pat_q, Pat_k, Pat_v of LN(x))), then + Pat_ffn(LN(.)), in float64 against timm's block."""
    model = build_model("vit_tokenformer_b16", **TINY).double()
    block, x = model.blocks[0], torch.randn(2, 5, 32, dtype=torch.float64)

    def pat(p, h, normalization="l2_norm_gelu"):
        return normalize_scores(h @ p.key_param_tokens.T, normalization, p.num_param_tokens) @ p.value_param_tokens

    h = F.layer_norm(x, (32,), eps=1e-6)
    q, k, v = (
        pat(p, h).view(2, 5, 2, 16).transpose(1, 2)
        for p in (block.attn.qkv.query, block.attn.qkv.key, block.attn.qkv.value)
    )
    attention = ((q @ k.transpose(-1, -2)) / 4).softmax(-1) @ v
    y = x + pat(block.attn.proj, attention.transpose(1, 2).reshape(2, 5, 32))
    expected = y + pat(block.mlp.fc, F.layer_norm(y, (32,), eps=1e-6))
    torch.testing.assert_close(block(x), expected)
    assert not any(p for p in block.norm1.parameters()) and model.norm.weight is not None


def test_forward_backward_on_two_images_reaches_every_parameter() -> None:
    model = build_model("vit_tokenformer_b16", **TINY)
    logits = model(torch.randn(2, 3, 16, 16))
    F.cross_entropy(logits, torch.tensor([1, 3])).backward()
    assert logits.shape == (2, 5)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_mixup_targets_sum_to_one_and_mix_two_labels() -> None:
    module = ImageClassifier("vit_tokenformer_b16", TINY, num_classes=5)
    images, labels = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
    _, targets = module.mixup(images, labels)
    torch.testing.assert_close(targets.sum(-1), torch.ones(4))
    assert ((targets > 0.01).sum(-1) >= 2).all()  # label smoothing 0.1 spreads 0.02 per class; mixing adds the other


def test_no_weight_decay_on_norms_biases_class_token_and_positions() -> None:
    module = ImageClassifier(
        "vit_b16",
        {**{k: v for k, v in TINY.items() if "tokens" not in k}, "pattention": False, "block_norm_parametric": True},
        num_classes=5,
        schedule_steps=10,
    )
    optimizer = module.configure_optimizers()["optimizer"]
    decay, no_decay = ({id(p) for p in g["params"]} for g in optimizer.param_groups)
    names = {id(p): n for n, p in module.model.named_parameters()}
    assert {names[i] for i in no_decay} >= {"cls_token", "pos_embed", "norm.weight", "blocks.0.attn.qkv.bias"}
    assert "blocks.0.attn.qkv.weight" in {names[i] for i in decay}


def write_folder(root, classes=("cat", "dog", "fish"), per_class=4, size=20):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{i}.JPEG", format="JPEG")
    return root


def test_image_folder_datamodule_reads_a_folder_it_wrote(tmp_path) -> None:
    root = write_folder(tmp_path / "imagenet")
    data = ImageNetDataModule("folder", str(root), img_size=16, batch_size=4, max_val_images=6)
    data.setup()
    assert data.num_classes == 3 and data.classes == ["cat", "dog", "fish"]
    images, labels = next(iter(data.train_dataloader()))
    assert images.shape == (4, 3, 16, 16) and set(labels.tolist()) <= {0, 1, 2}
    val_labels = torch.cat([y for _, y in data.val_dataloader()])
    assert sorted(val_labels.tolist()) == [0, 0, 1, 1, 2, 2]  # evenly spaced over the classes


def test_embedded_digits_are_an_image_folder_of_all_ten_classes(tmp_path) -> None:
    data = ImageNetDataModule("embedded", str(tmp_path / "digits"), img_size=32, batch_size=8)
    data.setup()
    assert data.classes == [str(d) for d in range(10)]
    assert (len(data.train_set), len(data.val_set)) == (4500, 500)


def test_bad_image_folders_name_the_file_or_folder(tmp_path) -> None:
    root = write_folder(tmp_path / "imagenet")
    (root / "train" / "dog" / "1.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match=r"corrupt or unreadable image .*dog/1\.JPEG"):
        load_image(str(root / "train" / "dog" / "1.JPEG"))
    (root / "val" / "bird").mkdir()
    with pytest.raises(ValueError, match=r"class folder .*val/bird holds no images"):
        check_image_folder(root / "val")
    with pytest.raises(FileNotFoundError, match=r"image folder .*missing/train not found"):
        ImageNetDataModule("folder", str(tmp_path / "missing"), img_size=16).setup()
    with pytest.raises(ValueError, match="source='imagenet'"):
        ImageNetDataModule("imagenet")


def test_ema_follows_the_weights() -> None:
    module = ImageClassifier("vit_tokenformer_b16", TINY, num_classes=5, ema_decay=0.5)
    with torch.no_grad():
        for p in module.model.parameters():
            p.add_(1.0)
    module.ema.update(module.model, step=10)
    first = next(module.model.parameters())
    torch.testing.assert_close(next(module.ema.module.parameters()), first - 0.5)


def test_an_image_run_trains_through_the_runner(tmp_path) -> None:
    import dataclasses

    from scaling_axes.experiments.tokenformer import table2_imagenet as table2
    from scaling_axes.harness.runs import Budget
    from scaling_axes.harness.training.lifecycle import train_run

    run = next(r for r in table2.runs(SMOKE) if r.name == "vit_tokenformer_b16")
    run = dataclasses.replace(
        run,
        budget=Budget(steps=4, batch_size=8, seq_len=17, lr=1e-3, val_windows=20),
        data={**run.data, "root": str(tmp_path / "digits")},
    )
    done = train_run(run, tmp_path / "run", accelerator="cpu")
    assert done["steps"] == 4 and done["tokens"] == 4 * 8 * 17 and 0 <= done["val_top1"] <= 1
    assert done["params"] == sum(formula_params(run.config).values())
    assert (tmp_path / "run" / "final.safetensors").exists()


def test_table4_has_the_papers_three_rows_and_its_two_steps() -> None:
    from scaling_axes.experiments.tokenformer import table4_softmax_ablation as table4

    runs = {r.name: r.config.normalization for r in table4.EXPERIMENT.runs(SMOKE)}
    assert runs == {
        "vit_tokenformer_b16_softmax": "softmax",
        "vit_tokenformer_b16_gelu_l1_norm": "gelu_l1_norm",
        "vit_tokenformer_b16": "l2_norm_gelu",
    }
    top1 = {"vit_tokenformer_b16_softmax": 0.50, "vit_tokenformer_b16_gelu_l1_norm": 0.52, "vit_tokenformer_b16": 0.531}
    results = {name: {"val_top1": value} for name, value in top1.items()}
    steps = {r.row: r for r in table4.EXPERIMENT.report(SMOKE, results) if r.metric == "top1_delta"}
    assert steps["gelu_instead_of_exp"].paper == 2.1 and steps["gelu_instead_of_exp"].ours == pytest.approx(2.0)
    assert steps["l2_instead_of_l1"].paper == 0.8 and steps["l2_instead_of_l1"].ours == pytest.approx(1.1)
    assert {r.status for r in steps.values()} == {"measured"}  # smoke scale: never compared with the paper
    assert {r.status for r in table4.step_rows(SMOKE, {})} == {"not_run"}


def test_paper_budgets_follow_maes_recipe_per_size() -> None:
    """MAE's from-scratch recipe trains ViT-B 300 epochs and ViT-L 200 (313 steps of 4096 images each)."""
    from scaling_axes.experiments.tokenformer import table2_imagenet as table2

    steps = {r.name: r.budget.steps for r in table2.EXPERIMENT.runs(PAPER)}
    assert {steps[n] for n in steps if "b16" in n} == {300 * 313} and {steps[n] for n in steps if "l16" in n} == {
        200 * 313
    }


@pytest.mark.slow  # 75-115 s of make test's CPU; run by `make test-all` and `make test-portable-kernels` (-m
# trained_outcome), and the image pipeline it trains through by `test_an_image_run_trains_through_the_runner`
@pytest.mark.trained_outcome
def test_the_cpu_recipe_teaches_the_baseline_vit_the_digits(tmp_path, record_property) -> None:
    """The cpu ViT recipe (regularisation and augmentation sized to 2,000 steps on 10 classes, not to 300 ImageNet
    epochs) takes the baseline 2 x 32 ViT far above chance (10%) on the held-out digits, where the ImageNet recipe
    left it at 17-30%: its claims then stand on models that learned. Measured at seeds 1-5 on 2 cores (issue 55):
    84.6-88.2% on AVX-512 kernels, 83.8-88.2% on AVX2, 84.6-87.8% on PyTorch's portable ones (15 runs: mean 86.7,
    standard deviation 1.6 points); 86.2-91.4% on the packages of issue 37. The bound sits 8.8 points below the
    lowest of them, seven deviations below the mean: a seed, a CPU or a release moves the outcome by a few points."""
    import dataclasses

    from scaling_axes.experiments.tokenformer import vit_setup
    from scaling_axes.harness.scales import CPU
    from scaling_axes.harness.training.lifecycle import train_run

    run = vit_setup.vit_run(CPU, "vit_b16", "vit_b16")  # (its claims are out of reach at cpu scale: not trained)
    run = dataclasses.replace(run, data={**run.data, "root": str(tmp_path / "digits")})
    done = train_run(run, tmp_path / "run", accelerator="cpu")
    record_property("val_top1", done["val_top1"])
    assert done["val_top1"] >= 0.75, done["val_top1"]


SMOKE_VIT = {
    "img_size": 32,
    "patch_size": 8,
    "embed_dim": 32,
    "depth": 2,
    "num_heads": 4,
    "num_classes": 10,
    "qkv_tokens": 16,
    "proj_tokens": 16,
    "ffn_tokens": 64,
}


@pytest.mark.parametrize("timm_name", TIMM_NAMES)
def test_timms_conventions_hold_for_every_vit_tokenformer(timm_name: str) -> None:
    """As timm's own ViTs: a cfg that tells the input size the model enforces, forward and backward at the size a
    tool derives from it, FX tracing (feature extraction) and forward_intermediates, and TorchScript declared."""
    from timm.data import resolve_data_config
    from timm.models import create_feature_extractor

    from scaling_axes.modules.timm_vit import NOT_SCRIPTABLE

    model = timm.create_model(timm_name, **SMOKE_VIT, drop_path_rate=0.0)
    assert model.pretrained_cfg["fixed_input_size"]
    size = resolve_data_config(model=model)["input_size"]
    assert size == (3, 32, 32)
    images = torch.randn(2, *size, generator=torch.Generator().manual_seed(0))
    model(images).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())

    model.eval()
    extractor = create_feature_extractor(model, return_nodes={"blocks.1": "last_block", "head": "logits"})
    features = extractor(images)
    torch.testing.assert_close(features["logits"], model(images), atol=0, rtol=0)
    model.zero_grad()
    features["last_block"].sum().backward()  # backward through the traced graph reaches the Pattentions
    assert model.blocks[1].mlp.fc.key_param_tokens.grad.abs().sum() > 0
    final, intermediates = model.forward_intermediates(images, indices=2)
    assert [tuple(t.shape) for t in intermediates] == [(2, 32, 4, 4)] * 2
    torch.testing.assert_close(final, model.forward_features(images))

    assert NOT_SCRIPTABLE
    with pytest.raises(Exception):  # noqa: B017 (TorchScript's errors have no common type)
        torch.jit.script(model)
    shape = {k: SMOKE_VIT[k] for k in ("img_size", "patch_size", "embed_dim", "num_heads", "num_classes")}
    baseline = timm.create_model("vit_base_patch16_224", **shape, depth=1)
    torch.jit.script(baseline)  # timm's own ViT scripts: the refusal above is Pattention's
    exported = torch.export.export(model, (images,))  # what replaces TorchScript: the whole graph, Pattentions too
    torch.testing.assert_close(exported.module()(images), model(images))


@pytest.mark.parametrize("timm_name", TIMM_NAMES)
def test_features_only_gives_timms_feature_network_and_torchvision_traces_through_timms_leaves(timm_name) -> None:
    from timm.layers import get_notrace_modules
    from timm.models._features import FeatureGetterNet
    from torchvision.models.feature_extraction import create_feature_extractor

    features = timm.create_model(timm_name, **SMOKE_VIT, features_only=True, out_indices=(0, 1))
    assert isinstance(features, FeatureGetterNet) and features.pretrained_cfg["input_size"] == (3, 32, 32)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model = timm.create_model(timm_name, **SMOKE_VIT).eval()
    features.model.load_state_dict(model.state_dict(), strict=False)  # the pruned model: its blocks the same
    first, second = features.eval()(images)
    _, intermediates = model.forward_intermediates(images, indices=(0, 1))
    torch.testing.assert_close(first, intermediates[0])
    torch.testing.assert_close(second, intermediates[1])
    traced = create_feature_extractor(
        model, {"blocks.1": "last"}, tracer_kwargs={"leaf_modules": list(get_notrace_modules())}
    )
    assert traced(images)["last"].shape == (2, 17, 32)
    with pytest.raises(ValueError, match="feature_cls='getter'"):
        timm.create_model(timm_name, **SMOKE_VIT, features_only=True, feature_cls="hook")
