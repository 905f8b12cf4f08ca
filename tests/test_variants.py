"""Table 10's residual-path variants against their equations, in float64."""

import torch
import torch.nn.functional as F

from scaling_axes.modules import build_model

SMALL = {"n_layer": 3, "d_model": 16, "n_head": 2, "vocab_size": 30, "max_seq_len": 16}


def _ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


def test_highway_block_adds_self_dependency_units():
    model = build_model("highway_transformer_191m", **SMALL).double()
    block, x = model.blocks[1], torch.randn(2, 5, 16, dtype=torch.float64)
    u = _ln(x, block.attn_norm)
    h = (
        x
        + block.attn(u)
        + torch.tanh(u @ block.attn_sdu.transform.weight.T) * torch.sigmoid(u @ block.attn_sdu.gate.weight.T)
    )
    u = _ln(h, block.ffn_norm)
    expected = h + block.ffn(u) + torch.tanh(block.ffn_sdu.transform(u)) * torch.sigmoid(block.ffn_sdu.gate(u))
    torch.testing.assert_close(block(x), expected)


def test_depth_lstm_step_follows_the_lstm_equations():
    model = build_model("depthwise_lstm_233m", **SMALL).double()
    block = model.blocks[0]
    hidden, cell = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 5, 16, dtype=torch.float64)
    both = torch.cat((block.attn(_ln(hidden, block.attn_norm)), hidden), -1)
    gates = torch.sigmoid(both @ block.gates.weight.T)
    i, f, o = gates[..., :16], gates[..., 16:32], gates[..., 32:]
    w1, w2 = block.candidate[0].weight, block.candidate[2].weight
    new_cell = f * cell + i * (F.gelu(both @ w1.T) @ w2.T)
    new_hidden, out_cell = block((hidden, cell))
    torch.testing.assert_close(out_cell, new_cell)
    torch.testing.assert_close(new_hidden, o * torch.tanh(new_cell))
    assert not any(name.startswith("blocks.0.ffn") for name, _ in model.named_parameters())  # FFN absorbed


def test_layer_aggregation_merges_stage_outputs_in_a_chain():
    model = build_model("hierarchical_aggregation_165m", **SMALL).double()
    x0 = torch.randn(1, 4, 16, dtype=torch.float64)
    stages, x = [], x0
    for block in model.blocks:  # 3 layers in 3 stages: every layer ends a stage
        x = block(x)
        stages.append(x)
    first, second = model.aggregators
    merged = _ln(torch.cat((stages[0], stages[1]), -1) @ first[0].weight.T, first[1])
    merged = _ln(torch.cat((merged, stages[2]), -1) @ second[0].weight.T, second[1])
    torch.testing.assert_close(model.run_blocks(x0), merged)
