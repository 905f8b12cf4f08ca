"""Net2Net widening: the widened Transformer computes the same function; noise breaks the copies' symmetry."""

import pytest
import torch

from scaling_axes.experiments.tokenformer import progressive
from scaling_axes.harness import scales
from scaling_axes.modules import build_model, get_config
from scaling_axes.modules.growth.net2net import widen

SMALL = {"n_layer": 2, "vocab_size": 300}
SPECS = {scale: progressive.scale_spec(scale).transformer for scale in (scales.SMOKE, scales.SMALL)}
PAIRS = [  # (source preset, overrides), (target preset, overrides): every pair the experiments grow through
    (("transformer_354m", SMALL), ("transformer_757m", SMALL)),  # the paper's pair: 1024 -> 1536, 16 -> 24 heads
    (("transformer_757m", SMALL), ("transformer_1_4b", SMALL)),  # 1536 -> 2048, 24 -> 32 heads
    (("transformer_757m", SMALL), ("transformer_1_4b", {**SMALL, "tie_embeddings": False})),  # tied -> untied
    *[
        ((f"transformer_{a}", spec[i]), (f"transformer_{b}", spec[i + 1]))
        for spec in SPECS.values()
        for i, (a, b) in enumerate([("354m", "757m"), ("757m", "1_4b")], start=1)
    ],
]


def _randomised(model):
    """Non-trivial norms and biases, so that every rescaling and copy is exercised."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if name.endswith("norm.weight") else 0.0, 0.3)
    return model


@pytest.mark.parametrize("source,target", PAIRS, ids=lambda p: f"{p[0]}{p[1].get('d_model', '')}")
def test_widened_model_computes_the_same_logits(source, target):
    small = _randomised(build_model(source[0], **source[1]).double())
    wide = widen(small, get_config(target[0], **target[1]))
    assert wide.config.d_model == get_config(target[0], **target[1]).d_model
    idx = torch.randint(0, small.config.vocab_size, (2, 24))
    torch.testing.assert_close(wide(idx), small(idx), rtol=1e-10, atol=1e-10)


def test_adding_heads_keeps_the_function_with_rotary_positions():
    config = {"n_layer": 2, "vocab_size": 100, "position": "rope", "max_seq_len": 64}
    small = _randomised(build_model("transformer_124m", **config, d_model=64, n_head=2).double())
    wide = widen(small, get_config("transformer_124m", **config, d_model=160, n_head=5))
    idx = torch.randint(0, 100, (1, 20))
    torch.testing.assert_close(wide(idx), small(idx), rtol=1e-10, atol=1e-10)


def _duplicated_ffn_pair(wide, small):
    """Indices (i, j) of an MLP hidden unit and one of its copies in the widened first block."""
    fc_small, fc_wide = small.blocks[0].ffn[0].weight, wide.blocks[0].ffn[0].weight[:, : small.config.d_model]
    for j in range(small.config.ffn_dim, wide.config.ffn_dim):
        for i in range(small.config.ffn_dim):
            if torch.equal(fc_wide[j], fc_small[i]):
                return i, j
    raise AssertionError("no copy found")


def test_copies_stay_symmetric_without_noise_and_differ_with_it():
    config = {"n_layer": 1, "vocab_size": 50, "position": "none", "max_seq_len": 16}
    small = build_model("transformer_124m", **config, d_model=16, n_head=2)
    target = get_config("transformer_124m", **config, d_model=24, n_head=2)
    exact = widen(small, target, generator=torch.Generator().manual_seed(0))
    i, j = _duplicated_ffn_pair(exact, small)
    fc, proj, d = exact.blocks[0].ffn[0], exact.blocks[0].ffn[2], small.config.d_model
    # on the old residual columns a copy equals its original (the new columns read LayerNorm's zeros)
    assert torch.equal(fc.weight[i, :d], fc.weight[j, :d]) and torch.equal(proj.weight[:, i], proj.weight[:, j])
    exact(torch.randint(0, 50, (2, 16))).logsumexp(-1).mean().backward()
    torch.testing.assert_close(fc.weight.grad[i, :d], fc.weight.grad[j, :d])  # equal updates: no new capacity
    noisy = widen(small, target, noise=0.05, generator=torch.Generator().manual_seed(0))
    assert (noisy.blocks[0].ffn[0].weight[i, :d] - noisy.blocks[0].ffn[0].weight[j, :d]).abs().max() > 1e-4
    idx = torch.randint(0, 50, (1, 16))
    assert (noisy(idx) - small(idx)).abs().max() < 0.1 * small(idx).abs().max()  # still close to the function


@pytest.mark.parametrize(
    "target,message",
    [
        ({"n_layer": 3}, "n_layer"),
        ({"d_model": 8, "n_head": 2}, "at least as wide"),
        ({"d_model": 48, "n_head": 4}, "grow either the head count or the head size"),
    ],
)
def test_impossible_widenings_are_named(target, message):
    config = {"n_layer": 2, "vocab_size": 50, "position": "none"}
    small = build_model("transformer_124m", **config, d_model=16, n_head=2)
    with pytest.raises(ValueError, match=message):
        widen(small, get_config("transformer_124m", **{**config, **target}))


def test_rotary_head_size_change_and_untied_to_tied_are_refused():
    rope = build_model("transformer_124m", n_layer=1, vocab_size=50, position="rope", d_model=32, n_head=2)
    with pytest.raises(ValueError, match="rotary frequencies depend on the head size"):
        widen(rope, get_config("transformer_124m", n_layer=1, vocab_size=50, position="rope", d_model=48, n_head=2))
    untied = build_model("transformer_124m", n_layer=1, vocab_size=50, d_model=32, n_head=2, tie_embeddings=False)
    with pytest.raises(ValueError, match="untied model cannot be widened into a tied one"):
        widen(untied, get_config("transformer_124m", n_layer=1, vocab_size=50, d_model=48, n_head=2))


def test_the_papers_net2net_embeds_the_old_weights_and_initialises_the_new_blocks():
    """Eq. 14's Net2Net: each old tensor fills the leading block of the wider one (Q, K and V each in its own third),
    the rest keeps a fresh init, so the function changes, unlike `widen`'s."""
    from scaling_axes.modules.growth.net2net import widen_with_new_parameters

    small = _randomised(build_model("transformer_354m", **SPECS[scales.SMOKE][1])).double()
    big = widen_with_new_parameters(small, get_config("transformer_757m", **SPECS[scales.SMOKE][2]))
    for name, tensor in small.state_dict().items():
        wide = big.state_dict()[name]
        if ".attn.qkv." in name:  # [q; k; v]: the leading rows of each third
            wide, tensor = wide.view(3, -1, *wide.shape[1:]), tensor.view(3, -1, *tensor.shape[1:])
        assert torch.equal(wide[tuple(slice(0, n) for n in tensor.shape)], tensor), name
    fc, old_fc = big.state_dict()["blocks.0.ffn.0.weight"], small.state_dict()["blocks.0.ffn.0.weight"]
    assert fc[old_fc.shape[0] :].abs().sum() > 0 and fc[:, old_fc.shape[1] :].abs().sum() > 0  # fresh, not zero
    idx = torch.randint(0, 97, (2, 12))
    assert (big.double()(idx) - small(idx)).abs().max() > 1e-3  # not function-preserving
