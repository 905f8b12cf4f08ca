"""Tokenformer: the whole forward against a float64 re-derivation of the reference formulas, and growth."""

import math

import pytest
import torch
from conftest import TINY_TOKENFORMER

from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.growth import grow_checkpoint_cli
from scaling_axes.modules import build_model, get_config
from scaling_axes.modules.architectures.tokenformer import Pattention, Tokenformer
from scaling_axes.modules.growth.tokenformer import grow
from scaling_axes.modules.tasks.lm import LanguageModel, load_lm_checkpoint, load_weights, save_lm_checkpoint


def _pattention(x, keys, values, tau=None):
    scores = x @ keys.T
    tau = tau or keys.shape[0]
    normed = scores * math.sqrt(tau) / scores.norm(dim=-1, keepdim=True)
    return 0.5 * normed * (1 + torch.erf(normed / math.sqrt(2))) @ values


def _rope(x, dims, base=10000.0):
    """Rotation as complex multiplication of the pairs (i, i + dims/2): independent of rotate_half."""
    half, seq = dims // 2, x.shape[-2]
    freqs = base ** (-torch.arange(half, dtype=torch.float64) * 2 / dims)
    phase = torch.polar(torch.ones(seq, half, dtype=torch.float64), torch.outer(torch.arange(seq).double(), freqs))
    z = torch.complex(x[..., :half], x[..., half:dims]) * phase
    return torch.cat((z.real, z.imag, x[..., dims:]), dim=-1)


def reference_logits(model: Tokenformer, idx: torch.Tensor) -> torch.Tensor:
    """Reference section 5, formulas 1-5, in float64 and in the plainest form."""
    c, p = model.config, {k: v.double() for k, v in model.state_dict().items()}
    heads, dh, seq = c.n_head, c.d_head, idx.shape[1]

    def ln0(x):
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)

    x = p["token_embedding.weight"][idx]
    for i in range(c.n_layer):
        b = f"blocks.{i}."
        u = ln0(x)
        q, k, v = (
            _pattention(u, p[f"{b}attn.qkv.{n}.key_param_tokens"], p[f"{b}attn.qkv.{n}.value_param_tokens"])
            .view(-1, seq, heads, dh)
            .transpose(1, 2)
            for n in ("query", "key", "value")
        )
        q, k = _rope(q, c.rotary_dims), _rope(k, c.rotary_dims)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        scores = scores.masked_fill(torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), float("-inf"))
        att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(-1, seq, c.d_model)
        x = x + _pattention(att, p[f"{b}attn.out.key_param_tokens"], p[f"{b}attn.out.value_param_tokens"])
        x = x + _pattention(ln0(x), p[f"{b}ffn.key_param_tokens"], p[f"{b}ffn.value_param_tokens"])
    z = ln0(x) * p["final_norm.weight"] + p["final_norm.bias"]
    return z @ p["token_embedding.weight"].T


def test_forward_matches_reference_formulas():
    model = build_model("tokenformer_150m", **TINY_TOKENFORMER).double()
    with torch.no_grad():  # make the final norm's affine part matter
        model.final_norm.weight.normal_()
        model.final_norm.bias.normal_()
    idx = torch.randint(0, 97, (2, 11))
    torch.testing.assert_close(model(idx), reference_logits(model, idx), rtol=1e-10, atol=1e-10)


def test_structure_follows_the_official_code():
    model = build_model("tokenformer_150m", **TINY_TOKENFORMER)
    names = {n for n, _ in model.named_parameters()}
    assert "lm_head" not in str(names) and "blocks.0.attn_norm.weight" not in names  # tied, non-parametric LN
    assert {"final_norm.weight", "final_norm.bias"} <= names
    assert not any(n.endswith("bias") and "final_norm" not in n for n in names)


def test_official_initialisation_scales():
    model = build_model("tokenformer_150m", n_layer=12)  # the real 150M width and depth
    keys = model.blocks[0].ffn.key_param_tokens
    values = model.blocks[0].ffn.value_param_tokens
    assert keys.std().item() == pytest.approx(0.02, rel=0.02)
    assert values.std().item() == pytest.approx(2 / (12 * math.sqrt(768)), rel=0.02)  # 0.006014


def _tiny(**overrides):
    base = {"n_layer": 2, "d_model": 32, "n_head": 4, "max_seq_len": 32, "vocab_size": 97}
    return get_config("tokenformer_124m", **{**base, **overrides})


def _grown_pair(new_keys: str, pin_tau: bool, normalization: str = "l2_norm_gelu"):
    small = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32, normalization=normalization)).double()
    target = _tiny(qkv_tokens=20, proj_tokens=20, ffn_tokens=80, normalization=normalization)
    return small, grow(small, target, new_keys=new_keys, pin_tau=pin_tau)


@pytest.mark.parametrize("growth", ["tokens", "exact", "new_parameters"])
def test_growth_draws_its_fresh_init_from_the_runs_seed_not_from_what_the_process_ran_before(growth):
    """What growth initialises afresh comes from the run's seed: new parameter tokens' values, the fresh columns that
    Net2Net keeps where the new residual coordinates are read, Eq. 14's new blocks. Grown after other work (another
    random state), a stage starts from the same weights; the caller's random state is untouched."""
    from scaling_axes.harness.training.growth import grow_model

    if growth == "tokens":
        small, target, options = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32)), _tiny(), {}
    else:
        base = {"n_layer": 2, "n_head": 4, "max_seq_len": 32, "vocab_size": 97}
        small = build_model("transformer_354m", d_model=32, **base)
        target, options = get_config("transformer_757m", d_model=64, **base), {"net2net": growth}

    def grown(seed, history):
        torch.manual_seed(history)  # what ran before in this process
        before = torch.get_rng_state()
        state = grow_model(small, target, seed=seed, **options).state_dict()
        assert torch.equal(torch.get_rng_state(), before), "growth moved the caller's random state"
        return state

    first, after_other_work, other_seed = grown(1234, 0), grown(1234, 99), grown(1235, 0)
    assert all(torch.equal(first[k], after_other_work[k]) for k in first)
    assert not all(torch.equal(first[k], other_seed[k]) for k in first)


@pytest.mark.parametrize("normalization", ["l2_norm_gelu", "gelu_l2_norm", "gelu_l1_norm", "softmax"])
@pytest.mark.parametrize("pin_tau", [True, False])
def test_growth_preserves_the_function_exactly_when_the_docstring_says(normalization, pin_tau):
    """Zero new keys: exact iff tau is pinned and the normalisation maps zero scores to zero without touching the
    row norm (the L2 variants); tau following n (the paper's runs) and softmax move the logits (measured here)."""
    small, grown = _grown_pair("zero", pin_tau=pin_tau, normalization=normalization)
    idx = torch.randint(0, 97, (2, 16))
    change = (grown(idx) - small(idx)).abs().max().item()
    if pin_tau and normalization != "softmax":
        assert change < 1e-12 and grown.config.tau_ffn_tokens == 32
    else:
        assert change > 1e-3, change
    assert grown.blocks[0].ffn.num_param_tokens == 80 and grown.blocks[0].ffn.tau == (32 if pin_tau else 80)


def test_growth_follows_the_new_token_count_by_default():
    small = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32))
    grown = grow(small, _tiny(qkv_tokens=20, proj_tokens=20, ffn_tokens=80))
    assert grown.config.tau_ffn_tokens is None and grown.blocks[0].ffn.tau == 80  # as the official code


def test_random_new_keys_change_the_function_even_with_pinned_tau():
    small, grown = _grown_pair("random", pin_tau=True)
    idx = torch.randint(0, 97, (2, 16))
    assert (grown(idx) - small(idx)).abs().max() > 1e-3


def test_growth_copies_old_tokens_into_the_first_rows():
    small, grown = _grown_pair("random", pin_tau=True)
    old, new = small.blocks[1].attn.qkv.value, grown.blocks[1].attn.qkv.value
    assert torch.equal(new.key_param_tokens[:8], old.key_param_tokens)
    assert torch.equal(new.value_param_tokens[:8], old.value_param_tokens)
    assert new.value_param_tokens[8:].abs().sum() > 0  # new values random, not zero


def test_pinned_tau_stays_at_the_first_size_along_a_chain():
    small, grown = _grown_pair("zero", pin_tau=True)
    bigger = grow(grown, _tiny(qkv_tokens=30, proj_tokens=30, ffn_tokens=120), pin_tau=True)
    assert (bigger.config.tau_qkv_tokens, bigger.config.tau_ffn_tokens) == (8, 32)
    idx = torch.randint(0, 97, (1, 8))
    torch.testing.assert_close(bigger(idx), small(idx), rtol=1e-12, atol=1e-12)


def test_growth_rejects_other_changes_and_shrinking():
    small = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32))
    with pytest.raises(ValueError, match="d_model"):
        grow(small, _tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32, d_model=64))
    with pytest.raises(ValueError, match="qkv_tokens"):
        grow(small, _tiny(qkv_tokens=4, proj_tokens=8, ffn_tokens=32))
    with pytest.raises(ValueError, match="new_keys='ones'"):
        grow(small, _tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32), new_keys="ones")


def test_grow_a_lightning_checkpoint_from_the_command_line(tmp_path):
    overrides = {"n_layer": 2, "d_model": 32, "n_head": 4, "max_seq_len": 32, "vocab_size": 97}
    small = LanguageModel("tokenformer_124m", {**overrides, "qkv_tokens": 8, "proj_tokens": 8, "ffn_tokens": 32})
    save_lm_checkpoint(
        tmp_path / "small.ckpt",
        "tokenformer_124m",
        small.hparams.model_overrides,
        small.model.state_dict(),
        dict(small.hparams),
    )
    grow_checkpoint_cli([str(tmp_path / "small.ckpt"), "tokenformer_354m", str(tmp_path / "grown.ckpt"), "--pin-tau"])
    grown, hparams = load_lm_checkpoint(tmp_path / "grown.ckpt")
    assert hparams["model"] == "tokenformer_354m" and grown.config.qkv_tokens == 2140
    assert grown.config.tau_qkv_tokens == 8  # pinned: the exact variant, so the function is the checkpoint's
    idx = torch.randint(0, 97, (1, 8))
    torch.testing.assert_close(grown(idx), small.model(idx), rtol=1e-5, atol=1e-5)


def test_a_checkpoint_that_does_not_fit_names_the_tensor():
    small = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32))
    big = Tokenformer(_tiny(qkv_tokens=20, proj_tokens=20, ffn_tokens=80))
    with pytest.raises(
        ValueError,
        match=r"blocks\.0\.attn\.qkv\.query\.key_param_tokens: ckpt has \(8, 32\), "
        r"model has \(20, 32\)",
    ):
        load_weights(big, small.state_dict(), "ckpt")


def test_tpu_numerics_are_tanh_gelu_eps_scaled_logits_and_unit_embeddings():
    """The TPU code (Figs. 3/4/7) against the GPU code (Table 1), same weights: the TPU model equals the GPU one with
    each Pattention's GELU made tanh and eps 1e-5 and the logits divided by sqrt(d); embeddings start N(0, 1)."""
    gpu = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32, numerics="gpu")).double()
    tpu = Tokenformer(_tiny(qkv_tokens=8, proj_tokens=8, ffn_tokens=32, numerics="tpu")).double()
    assert tpu.token_embedding.weight.std().item() == pytest.approx(1.0, rel=0.1)
    assert gpu.token_embedding.weight.std().item() < 0.03
    tpu.load_state_dict(gpu.state_dict())
    idx = torch.randint(0, 97, (2, 16))
    assert (tpu(idx) - gpu(idx)).abs().max() > 1e-3
    for layer in gpu.modules():
        if isinstance(layer, Pattention):
            layer.gelu, layer.eps = "tanh", 1e-5
    gpu.logit_multiplier = 1 / math.sqrt(32)
    torch.testing.assert_close(tpu(idx), gpu(idx), rtol=1e-12, atol=1e-12)
    assert get_config("tokenformer_354m").numerics == "tpu" and get_config("tokenformer_150m").numerics == "gpu"
    assert get_config("tokenformer_354m").eps == 1e-5 and get_config("tokenformer_150m").eps == 0.0
    assert get_config("tokenformer_354m", pattention_eps=1e-6).eps == 1e-6
    with pytest.raises(TypeError, match="numerics='cpu'"):
        get_config("tokenformer_150m", numerics="cpu")


def test_paper_errata_on_tau_placement_steps_and_the_openwebtext_split():
    from scaling_axes.datamodules.sources import OPENWEBTEXT_HELD_OUT
    from scaling_axes.experiments.tokenformer import table1_zeroshot as table1
    from scaling_axes.experiments.tokenformer import table3_params_flops as table3
    from scaling_axes.harness.results import published

    tau = table3.tau_inside_row()  # Eqs. 4-5 as printed: tau inside the norm cancels
    assert tau.ours < 1e-12 and tau.status == "differs" and "moves the output by 2." in tau.note
    steps = table1.steps_row(published("tokenformer"))
    assert steps.paper == 14_300 and steps.ours == 143_000 == table1.PILE.steps and steps.status == "differs"
    assert OPENWEBTEXT_HELD_OUT == published("tokenformer")[("fig3", "openwebtext", "held_out_fraction")]


def test_progressive_figure_draws_fig3_and_fig4_panels(tmp_path):
    from scaling_axes.experiments.tokenformer import fig3_progressive_scaling as fig3

    runs = fig3.runs(SMOKE)
    results = {
        r.name: {"val_ppl": 100.0 / (i + 1), "params": 1e6 * (i + 1), "val_loss": 1.0} for i, r in enumerate(runs)
    }
    fig3.EXPERIMENT.figure(SMOKE, results, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 20_000
    assert {r.name.rsplit("_", 1)[1] for r in runs if r.grow_from} == {
        "short",
        "shortpinned",
        "shortrandom",
    }  # Fig. 4's stage budgets


def test_the_diagnosis_changes_one_thing_at_a_time_and_measures_its_gain():
    """Each variant differs from today's cpu recipe in its stated fields alone; its rows are the recipe's loss minus
    its own and its own minus the Transformer's, per seed, with Student-t's interval."""
    import dataclasses

    from scipy import stats

    from scaling_axes.experiments.tokenformer import diagnosis
    from scaling_axes.harness.scales import CPU

    runs = {run.name: run for run in diagnosis.runs(CPU)}
    recipe = dataclasses.asdict(runs[diagnosis.RECIPE].config)
    for name, change in diagnosis.variants(recipe["d_model"], recipe["numerics"]).items():
        config = dataclasses.asdict(runs[f"tokenformer_{name}"].config)
        assert {k for k in config if config[k] != recipe[k]} == set(change), name
    loss = {diagnosis.RECIPE: [5.0, 5.1, 4.9], diagnosis.TRANSFORMER: [4.0, 4.1, 3.9]}
    loss |= {name: [4.6, 4.8, 4.55] for name in runs if name not in loss}
    results = {
        n: {"val_loss": v[0], "seed_runs": {2: {"val_loss": v[1]}, 3: {"val_loss": v[2]}}} for n, v in loss.items()
    }
    rows = {(r.row, r.metric): r for r in diagnosis.report(CPU, results)}
    gain = [5.0 - 4.6, 5.1 - 4.8, 4.9 - 4.55]
    row = rows[("full_rotary", "gain_over_recipe")]
    assert row.ours == pytest.approx(sum(gain) / 3) and row.seeds == 3
    spread = (sum((g - sum(gain) / 3) ** 2 for g in gain) / 2) ** 0.5
    assert row.high - row.ours == pytest.approx(stats.t.ppf(0.975, 2) * spread / 3**0.5)
    assert rows[("full_rotary", "gap_to_transformer")].ours == pytest.approx((0.6 + 0.7 + 0.65) / 3)


def test_key_and_value_init_options_set_the_parameter_tokens_scale():
    from scaling_axes.modules import build_model
    from scaling_axes.modules.architectures.tokenformer import Pattention

    shape = {"n_layer": 2, "d_model": 64, "n_head": 4, "qkv_tokens": 512, "proj_tokens": 512, "ffn_tokens": 2048}
    model = build_model(
        "tokenformer_150m", **shape, vocab_size=97, max_seq_len=32, key_init_std=0.125, value_init_std=0.02
    )
    keys = torch.cat([m.key_param_tokens.detach().flatten() for m in model.modules() if isinstance(m, Pattention)])
    values = torch.cat([m.value_param_tokens.detach().flatten() for m in model.modules() if isinstance(m, Pattention)])
    assert keys.double().std().item() == pytest.approx(0.125, rel=0.02)
    assert values.double().std().item() == pytest.approx(0.02, rel=0.02)


@pytest.mark.parametrize("scale_name", ["cpu", "small"])
def test_table6_sets_each_growth_chain_against_scratch_on_the_chains_total_tokens(scale_name):
    """Issue 83: beside the paper's per-stage comparison (grown 1.4B against scratch on one stage's tokens), the grown
    chain and its tau-pinned twin each against the 1.4B from scratch on the chain's own total tokens."""
    from scaling_axes.experiments.tokenformer import fig3_progressive_scaling as fig3
    from scaling_axes.harness.runs import growth_chain
    from scaling_axes.harness.scales import get_scale

    scale = get_scale(scale_name)
    by_name = {r.name: r for r in fig3.runs(scale)}
    scratch = by_name["tokenformer_1_4b_scratch_chain"]
    for grown in ("tokenformer_1_4b_short", "tokenformer_1_4b_shortpinned"):
        chain = growth_chain(by_name[grown], by_name)
        assert scratch.budget.tokens == sum(r.budget.tokens for r in chain) and len(chain) == 4
    rows = {r.row for r in fig3.EXPERIMENT.report(scale, {}) if r.table == "table6" and r.metric == "claim"}
    assert {
        f"{g}_vs_tokenformer_1_4b_scratch_chain" for g in ("tokenformer_1_4b_short", "tokenformer_1_4b_shortpinned")
    } <= rows
    assert "tokenformer_1_4b_scratch_chain_vs_tokenformer_1_4b_scratch_short" in rows  # its positive control
