"""FLOP formulas against counts on the instantiated model (meta device), and the paper's Table 3 erratum."""

import pytest
import torch

from scaling_axes.experiments.tokenformer.table3_params_flops import paper_params
from scaling_axes.modules import get_config, list_models
from scaling_axes.modules.configs.vit_tokenformer_config import ViTConfig
from scaling_axes.modules.flops import (
    counted_flops,
    counted_non_embedding_params,
    formula_flops,
    formula_params,
    non_embedding_params,
)
from scaling_axes.modules.registry import build_from_config


@pytest.mark.parametrize("name", list_models())
def test_forward_flops_formula_equals_count(name):
    config = get_config(name)
    assert formula_flops(config, 256) == counted_flops(config, 256)


@pytest.mark.parametrize("name", ["tokenformer_150m", "transformer_124m"])
def test_training_is_three_times_forward(name):
    config = get_config(name, n_layer=2)
    assert sum(counted_flops(config, 64, backward=True).values()) == 3 * sum(counted_flops(config, 64).values())


def test_pattention_costs_twice_a_linear_when_n_equals_d():
    """Reference 5.11: Q/K/V/O at n = d cost 2x a Linear; the FFN at n = 4d costs a 4d MLP."""
    tok, tr = get_config("tokenformer_150m"), get_config("transformer_124m", max_seq_len=2048)
    f_tok, f_tr = formula_flops(tok, 2048), formula_flops(tr, 2048)
    assert f_tok["qkv"] == 2 * f_tr["qkv"] and f_tok["out"] == 2 * f_tr["out"]
    assert f_tok["ffn"] == f_tr["ffn"] and f_tok["attention"] == f_tr["attention"]


@pytest.mark.parametrize("name", list_models("tokenformer_"))
def test_paper_table3_omits_the_factor_two_for_attention_pattentions(name):
    """Issue #12 of the official repo: n_layer * d * n counts only the keys; the values double it."""
    config = get_config(name)
    ours, printed = formula_params(config), paper_params(config)
    assert ours["qkv"] == 2 * printed["qkv"] and ours["out"] == 2 * printed["out"]
    assert ours["ffn"] == printed["ffn"]


def test_table3_flop_column_and_totals_carry_the_same_erratum():
    """Tokenformer-150M (n = d = 768, 12 layers): N is 12 L d^2 = 84.9M as printed and 16 L d^2 = 113.2M in truth;
    the FLOP column (2 x parameters) and 2N + 2 n_layer n_ctx d follow; the FFN and every Transformer row agree."""
    from scaling_axes.experiments.tokenformer.table3_params_flops import _preset_rows

    rows = {r.metric: r for r in _preset_rows("tokenformer_150m")}
    layers, d, context = 12, 768, 2048
    assert rows["params_non_embedding_n"].paper == 12 * layers * d**2 == 84_934_656
    assert rows["params_non_embedding_n"].ours == 16 * layers * d**2 == 113_246_208
    assert rows["forward_flops_per_token_2n_plus_attention"].ours == 2 * 16 * layers * d**2 + 2 * layers * context * d
    assert (
        rows["forward_flops_per_token_qkv"].ours
        == 2 * rows["forward_flops_per_token_qkv"].paper
        == 4 * 3 * layers * d**2
    )
    assert {rows[f"forward_flops_per_token_{c}"].status for c in ("qkv", "out")} == {"differs"}
    assert rows["forward_flops_per_token_ffn"].status == "match"
    transformer = {r.metric: r for r in _preset_rows("transformer_124m")}
    assert {transformer[f"forward_flops_per_token_{c}"].status for c in ("qkv", "out", "ffn")} == {"match"}


def test_tokenformer_flops_grow_slower_with_length_than_a_widened_transformer():
    """Fig. 5's claim: at fixed d the token-token cost rises less when the model grows by tokens."""
    from scaling_axes.modules.flops import train_flops_per_token

    def slope(model):
        return train_flops_per_token(get_config(model), 65536) - train_flops_per_token(get_config(model), 512)

    assert slope("tokenformer_1_4b") < slope("transformer_1_4b")
    assert slope("tokenformer_1_4b") == slope("tokenformer_124m")  # d = 768 for the whole family


@pytest.mark.parametrize("name", [n for n in list_models() if not isinstance(get_config(n), ViTConfig)])
def test_non_embedding_formula_equals_the_count_on_the_model(name):
    """Everything but nn.Embedding tables and the untied `lm_head`, for every language-model preset."""
    config = get_config(name)
    with torch.device("meta"):
        model = build_from_config(config)
    assert non_embedding_params(config) == counted_non_embedding_params(model)
    assert 0 < non_embedding_params(config) < sum(formula_params(config).values())
