"""The RMT paper's muP Transformer baseline (App. C.2.1, the official code's rules in reference rmt.md section 2): init,
forward multipliers and per-layer learning rates follow the width, and the optimiser groups carry them."""

import math

import pytest
import torch

from scaling_axes.harness.scales import PAPER
from scaling_axes.modules.registry import build_model, get_config
from scaling_axes.modules.tasks.lm import LanguageModel

SIGMA = 0.15


def mup_model(width: int, **overrides):
    config = {"n_layer": 2, "d_model": width, "n_head": width // 32, "vocab_size": 301, "max_seq_len": 16}
    return build_model("transformer_rmt_49m", **{**config, **overrides})


def test_the_rmt_paper_transformers_are_mup_with_the_tuned_values():
    config = get_config("transformer_rmt_405m")
    assert config.mup and (config.init_std, config.input_multiplier) == (0.15, 9.76)
    assert (config.attention_multiplier, config.output_multiplier) == (0.25, 5.52)
    assert (config.mup_base_width, config.mup_base_head_dim, config.mup_base_ffn) == (256, 32, 1024)


@pytest.mark.parametrize("width", [256, 512, 1024])
def test_init_multipliers_and_lr_scales_follow_the_width(width):
    torch.manual_seed(0)
    model = mup_model(width)
    ratio = width / 256
    scales = model.lr_scales()
    assert scales["blocks.0.attn.qkv.weight"] == scales["blocks.1.ffn.0.weight"] == pytest.approx(1 / ratio)
    assert scales["blocks.0.attn.out.weight"] == pytest.approx(1 / ratio)
    assert scales["blocks.0.ffn.2.weight"] == pytest.approx(1024 / (4 * width))  # fan_in D_FF over the proxy's 1024
    assert not {"token_embedding.weight", "position_embedding.weight", "lm_head.weight"} & set(scales)
    assert model.input_multiplier == 9.76 and model.logit_multiplier == pytest.approx(5.52 / ratio)
    assert model.blocks[1].attn.scale == pytest.approx(0.25 * math.sqrt(32) / 32 / 2)  # heads of 32, layer 1
    depth = 1 / math.sqrt(2 * 2)
    expected = {
        "token_embedding.weight": SIGMA,
        "blocks.0.attn.qkv.weight": SIGMA / math.sqrt(width),
        "blocks.0.ffn.0.weight": SIGMA / math.sqrt(width),
        "blocks.0.attn.out.weight": SIGMA / math.sqrt(width) * depth,
        "blocks.0.ffn.2.weight": SIGMA / math.sqrt(4 * width) * depth,
    }
    named = dict(model.named_parameters())
    for name, std in expected.items():
        assert named[name].std().item() == pytest.approx(std, rel=0.05), name
    assert not named["lm_head.weight"].any() and (named["final_norm.weight"] == 1).all()


def test_the_multipliers_act_where_the_rules_say():
    """Against the same weights without muP (float64): embeddings x alpha_in, logits x alpha_out / width ratio, and
    attention logits x alpha_attn sqrt(32) / d_head (1 / sqrt(32) when alpha_attn is 1 at heads of 32)."""
    mup = mup_model(512, input_multiplier=2.0, attention_multiplier=1.0, output_multiplier=3.0).double()
    plain = mup_model(512, mup=False, inverse_layer_scaling=True).double()
    plain.load_state_dict(mup.state_dict())
    with torch.no_grad():
        torch.nn.init.normal_(mup.lm_head.weight, 0, 0.02)
        plain.lm_head.weight.copy_(mup.lm_head.weight)
        plain.token_embedding.weight.mul_(2.0)
        plain.position_embedding.weight.mul_(2.0)
    idx = torch.randint(0, 301, (2, 9))
    torch.testing.assert_close(mup(idx), plain(idx) * 3.0 * 256 / 512)


def test_optimizer_groups_carry_the_mup_lrs_and_the_codes_unscaled_decay():
    module = LanguageModel(
        "transformer_rmt_49m",
        {"n_layer": 2, "d_model": 512, "n_head": 16},
        lr=6.5e-3,
        weight_decay=1e-4 / 6.5e-3,
        decay_embeddings=False,
        lr_scaled_decay=False,
    )
    module._trainer = type("T", (), {"max_steps": 10})()
    groups = module.configure_optimizers()["optimizer"].param_groups
    lr_of = {id(p): g["initial_lr"] for g in groups for p in g["params"]}  # (lr: the schedule at step 0)
    scales = module.model.lr_scales()
    for name, p in module.model.named_parameters():
        assert lr_of[id(p)] == pytest.approx(6.5e-3 * scales.get(name, 1.0)), name
    decaying = [g for g in groups if g["weight_decay"]]
    assert {round(g["initial_lr"] / 6.5e-3, 6) for g in decaying} == {0.5}
    assert all(g["initial_lr"] * g["weight_decay"] == pytest.approx(1e-4) for g in decaying)  # the code's 1e-4


@pytest.mark.parametrize(
    "preset, overrides",
    [
        ("rmt_134m", {"n_layer": 2, "vocab_size": 5000}),
        ("transformer_rmt_160m", {"n_layer": 2, "vocab_size": 5000, "mup": False}),
        ("highway_transformer_191m", {"n_layer": 2, "vocab_size": 5000}),
        ("depthwise_lstm_233m", {"n_layer": 2, "vocab_size": 5000}),
    ],
)
def test_table10_lecun_init_is_n_0_1_over_fan_in_for_every_matrix(preset, overrides):
    """App. C.4: "LeCun initialization for all parameters": every matrix std 1/sqrt(fan_in) (a key matrix's fan_in
    is the dimension it contracts: D_k for retrieval, R for storage), lookup tables std 1, nothing depth-scaled;
    the RMT's unembedding is a matrix of fan_in D_v R (the official init gives it std init_std = 1)."""
    torch.manual_seed(0)
    model = build_model(preset, init="lecun", **overrides)
    c = model.config
    checked = 0
    for name, p in model.named_parameters():
        if p.dim() < 2 or p.numel() < 300 or "norm" in name:
            continue
        if name.endswith(("token.weight", "position.weight", "token_embedding.weight", "position_embedding.weight")):
            fan_in = 1
        elif preset.startswith("rmt") and name.endswith("keys"):
            fan_in = c.d_key if p.shape[0] == c.d_key else c.rank  # retrieval [D_k, n] / storage [R, D_k]
        else:
            fan_in = p.shape[1]
        assert p.std().item() == pytest.approx(1 / math.sqrt(fan_in), rel=0.1), name
        checked += 1
    assert checked >= 6
    if preset.startswith("rmt"):
        assert model.lm_head.weight.std().item() == pytest.approx(1 / math.sqrt(c.d_value * c.rank), rel=0.05)
    with pytest.raises(ValueError, match="does not combine with mup"):
        build_model("transformer_rmt_160m", init="lecun")


def test_table10_runs_take_lecun_init_and_no_mup_at_paper_scale():
    from scaling_axes.experiments.rmt import table10_variants as table10

    for run in table10.runs(PAPER):
        assert run.config.init == "lecun", run.name
        assert not getattr(run.config, "mup", False), run.name
