"""Registry, presets (exact parameter counts), and the Transformer baseline's math."""

import dataclasses
import math

import pytest
import torch
from conftest import TINY_TRANSFORMER

from scaling_axes.modules import build_model, get_config, list_models
from scaling_axes.modules.architectures.layers import RotaryEmbedding
from scaling_axes.modules.flops import counted_params, formula_params

# Tokenformer: the official training log (150M) and the reference's arithmetic from the official configs.
# Transformer: the shapes recorded in modules/configs/transformer_config.py.
EXACT_COUNTS = {
    "tokenformer_150m": 151_881_216,
    "tokenformer_450m": 454_166_528,
    "tokenformer_900m": 903_252_480,
    "tokenformer_1_5b": 1_587_219_456,
    "tokenformer_124m": 123_569_664,
    "tokenformer_354m": 354_190_848,
    "tokenformer_owt2_354m": 353_503_232,
    "tokenformer_owt2_757m": 756_156_416,
    "transformer_124m": 123_689_472,
    "transformer_354m": 353_822_720,
    "transformer_757m": 757_226_496,
    "transformer_1_4b": 1_311_625_216,
    # the RMT paper's models: shapes of its Tables 8 and 9 (corrected rows) and Fig. 6; no bias anywhere, the
    # LayerNorms' included (App. C.1)
    "transformer_rmt_49m": 49_415_808,
    "transformer_rmt_160m": 162_541_824,
    "transformer_rmt_260m": 263_960_704,
    "transformer_rmt_405m": 405_490_688,
    "rmt_46m": 45_900_160,
    "rmt_134m": 134_291_072,
    "rmt_206m": 206_313_056,
    "rmt_305m": 305_128_448,
    "rmt_residual_dk6": 134_226_072,
    "rmt_residual_dk12": 134_241_072,
    "rmt_residual_dk24": 134_271_072,
    "rmt_residual_dk32": 134_291_072,
    "rmt_residual_dk48": 134_331_072,
    "rmt_residual_dk64": 134_371_072,
    # the residual-path variants of the RMT paper's Table 10 (modules/architectures/variants.py)
    "highway_transformer_191m": 190_853_376,
    "depthwise_lstm_233m": 233_311_488,
    "hierarchical_aggregation_165m": 164_902_656,
    # the Mixture of Tokenizers runs (MoT reference 4.1, 4.5); copy counts no byte attention: it was never wired (6.4)
    "modded_gpt_454m": 454_496_326,
    "mot_noop_noop_1024": 454_496_326,
    "mot_concat_noop_512_64": 430_366_918,
    "mot_concat_noop_256_48": 416_969_510,
    "mot_concat_split_256_48": 365_490_982,
    "mot_concat_copy_256_48": 365_982_502,
    "mot_concat_copy_256_48_wired": 370_176_808,
}
# ViT-Tokenformer slot counts are ours (not public); tests/test_vit.py holds them within 1% of Table 2's sizes
VIT = {
    "vit_b16",
    "vit_l16",
    "vit_tokenformer_b16",
    "vit_tokenformer_b16_matched",
    "vit_tokenformer_l16",
    "vit_tokenformer_l16_matched",
}
NOMINAL = {"tokenformer_757m": 757e6, "tokenformer_1_4b": 1.4e9}
# The RMT paper's sizes from its own count (App. A with untied embeddings and positions; reference section 4):
# ours adds the LayerNorm gains and, for the RMT, the position storage keys of Eq. 19.
RMT_PAPER = {
    "transformer_rmt_49m": 49.41e6,
    "transformer_rmt_160m": 162.52e6,
    "transformer_rmt_260m": 263.93e6,
    "transformer_rmt_405m": 405.44e6,
    "rmt_46m": 45.89e6,
    "rmt_134m": 134.24e6,
    "rmt_206m": 206.20e6,
    "rmt_305m": 304.93e6,
}


def _count(name: str) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(name).parameters())


@pytest.mark.parametrize("name", sorted(EXACT_COUNTS))
def test_preset_parameter_counts_are_exact(name):
    assert _count(name) == EXACT_COUNTS[name]


@pytest.mark.parametrize("name", sorted(NOMINAL))
def test_progressive_presets_within_half_a_percent_of_their_size(name):
    assert abs(_count(name) - NOMINAL[name]) / NOMINAL[name] < 0.005


TABLE10 = {"highway_transformer_191m": 191e6, "depthwise_lstm_233m": 233e6, "hierarchical_aggregation_165m": 165e6}


@pytest.mark.parametrize("name", sorted(TABLE10))
def test_table10_variants_within_two_percent(name):
    assert abs(_count(name) - TABLE10[name]) / TABLE10[name] < 0.02


@pytest.mark.parametrize("name", sorted(RMT_PAPER))
def test_rmt_paper_presets_within_half_a_percent(name):
    assert abs(_count(name) - RMT_PAPER[name]) / RMT_PAPER[name] < 0.005


@pytest.mark.parametrize("name", list_models())
def test_parameter_formula_equals_count_per_component(name):
    with torch.device("meta"):
        model = build_model(name)
    assert formula_params(model.config) == counted_params(model)


def test_every_preset_is_listed():
    """A preset registered without its count fails here by name, saying where the count goes."""
    registered = {name for name in list_models() if not name.startswith("test_")}  # tests register their own
    unlisted = sorted(registered - (set(EXACT_COUNTS) | set(NOMINAL) | VIT))
    assert not unlisted, (
        f"preset(s) {unlisted} have no parameter count here: add each to tests/test_models.py's EXACT_COUNTS with its "
        "count from the paper or its code (or sum(p.numel() for p in build_model(name).parameters()) checked by "
        "hand against its formula), as docs/layout.md's change table says"
    )
    stale = sorted((set(EXACT_COUNTS) | set(NOMINAL) | VIT) - registered)
    assert not stale, f"{stale} listed in tests/test_models.py but registered nowhere: remove them there"


def test_every_language_model_of_the_suite_registers_examples_the_export_tests_build():
    """An architecture registered without a smoke-sized example would be exported, loaded and decoded by no test: it
    fails here by name, saying where the examples go."""
    from scaling_axes.modules.registry import _ARCHITECTURES, registered_in

    lacking = sorted(
        config.__name__
        for config, architecture in _ARCHITECTURES.items()
        if architecture.language_model and not architecture.examples and registered_in(config()).startswith("scaling")
    )
    assert not lacking, (
        f"{lacking} register no examples: add `examples={{name: Example(preset, smoke-sized overrides, tokenizer)}}` "
        "to the Architecture(...) in its configs/<arch>_config.py, as docs/layout.md's change table says"
    )


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(KeyError, match=r"unknown model 'tokenformer_2b'.*tokenformer_150m"):
        build_model("tokenformer_2b")


def test_unknown_override_lists_the_fields():
    with pytest.raises(TypeError, match=r"unknown config field\(s\) \['hidden'\].*d_model"):
        build_model("transformer_124m", hidden=3)


@pytest.mark.parametrize(
    "override,message",
    [
        ({"n_layer": "12"}, "n_layer='12' has type str"),
        ({"position": "alibi"}, "position='alibi'"),
        ({"tie_embeddings": 1}, "tie_embeddings=1"),
    ],
)
def test_override_of_the_wrong_type_is_named(override, message):
    with pytest.raises(TypeError, match=message):
        get_config("transformer_124m", **override)


def test_inconsistent_config_is_rejected():
    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_head=12"):
        get_config("transformer_124m", d_model=100)
    with pytest.raises(ValueError, match=r"rotary_pct=0\.01"):
        get_config("tokenformer_150m", rotary_pct=0.01)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_config("transformer_124m").d_model = 3


def test_rotary_matches_complex_rotation_and_keeps_norms():
    rope = RotaryEmbedding(8).double()
    x = torch.randn(1, 2, 5, 12, dtype=torch.float64)
    out = rope(x)
    half = 4
    freqs = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / 8)
    phase = torch.polar(torch.ones(5, half, dtype=torch.float64), torch.outer(torch.arange(5.0).double(), freqs))
    z = torch.complex(x[..., :half], x[..., half:8]) * phase
    torch.testing.assert_close(out, torch.cat((z.real, z.imag, x[..., 8:]), -1))
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("position", ["rope", "learned", "none"])
def test_transformer_is_causal(position):
    model = build_model("transformer_124m", **TINY_TRANSFORMER, position=position)
    idx = torch.randint(0, 97, (1, 10))
    changed = idx.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 97
    torch.testing.assert_close(model(idx)[:, :6], model(changed)[:, :6])
    assert not torch.allclose(model(idx)[:, 6:], model(changed)[:, 6:])


def test_transformer_block_matches_explicit_formula():
    model = build_model("transformer_124m", **TINY_TRANSFORMER, position="none").double()
    block, x = model.blocks[0], torch.randn(1, 6, 32, dtype=torch.float64)
    u = torch.nn.functional.layer_norm(x, (32,), block.attn_norm.weight, block.attn_norm.bias)
    q, k, v = (block.attn.qkv(u)).split(32, -1)
    q, k, v = (t.view(1, 6, 4, 8).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(torch.ones(6, 6).triu(1).bool(), -math.inf)
    h = x + block.attn.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 6, 32))
    u = torch.nn.functional.layer_norm(h, (32,), block.ffn_norm.weight, block.ffn_norm.bias)
    expected = h + block.ffn[2](torch.nn.functional.gelu(block.ffn[0](u)))
    torch.testing.assert_close(block(x), expected)


def test_tied_and_untied_heads():
    tied = build_model("transformer_124m", **TINY_TRANSFORMER)
    untied = build_model("transformer_124m", **{**TINY_TRANSFORMER, "tie_embeddings": False})
    assert tied.lm_head is None and untied.lm_head.weight.shape == (97, 32)
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 97 * 32


def test_learned_positions_reject_sequences_past_max_seq_len():
    model = build_model("transformer_124m", **TINY_TRANSFORMER, position="learned")
    with pytest.raises(ValueError, match="sequence length 33 exceeds max_seq_len=32"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_token_ids_must_be_two_dimensional():
    model = build_model("transformer_124m", **TINY_TRANSFORMER)
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        model(torch.zeros(4, dtype=torch.long))
