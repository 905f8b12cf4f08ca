"""The Residual Matrix Transformer against the paper's equations in float64, and its exact special cases."""

import math

import pytest
import torch
import torch.nn.functional as F

from scaling_axes.modules import build_model, get_config
from scaling_axes.modules.architectures.rmt import RMT, RMTAttention, alibi_bias

TINY = {"n_layer": 2, "d_key": 6, "d_value": 5, "rank": 3, "d_ff": 16, "vocab_size": 41, "max_seq_len": 12}


def _ln(x, weight, bias=0.0, eps=1e-6):
    flat = x.flatten(-2)
    mean, var = flat.mean(-1, keepdim=True), flat.var(-1, unbiased=False, keepdim=True)
    return ((flat - mean) / torch.sqrt(var + eps)).view(x.shape) * weight + bias


def reference_logits(model: RMT, idx: torch.Tensor) -> torch.Tensor:
    """Eq. 18-27 with einsum, one head at a time, in float64."""
    c, p = model.config, {k: v.double() for k, v in model.state_dict().items()}
    V, R, Dv, T = c.vocab_size, c.rank, c.d_value, idx.shape[1]
    words = p["embed.token.weight"].view(V, Dv, R)[idx]
    positions = p["embed.position.weight"].view(-1, Dv, R)[:T]
    x = torch.einsum("btvh,hk->btvk", words, p["embed.token_storage.keys"])  # Eq. 18
    x = x + torch.einsum("tvh,hk->tvk", positions, p["embed.position_storage.keys"])  # Eq. 19
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in range(c.n_layer):
        b = f"blocks.{layer}."
        xn = _ln(x, p[f"{b}attn_norm.weight"], p.get(f"{b}attn_norm.bias", 0.0))
        r = p[f"{b}attn.qkv.keys"]  # columns: r_Q^(1..R), r_K^(1..R), r_V^(1..R)
        w_out = p[f"{b}attn.out.keys"]
        for h in range(R):  # Eq. 21-22 per head, Eq. 20 summed over heads
            q, k, v = (torch.einsum("btvk,k->btv", xn, r[:, j * R + h]) for j in range(3))
            logits = q @ k.transpose(1, 2) / math.sqrt(Dv) / (layer + 1)
            heads = logits.masked_fill(~causal, -math.inf).softmax(-1) @ v
            x = x + torch.einsum("btv,k->btvk", heads, w_out[h])
        xn = _ln(x, p[f"{b}ffn_norm.weight"], p.get(f"{b}ffn_norm.bias", 0.0))
        u = torch.cat(
            [torch.einsum("btvk,k->btv", xn, p[f"{b}ffn.retrieval.keys"][:, h])[..., None] for h in range(R)], dim=-1
        ).flatten(-2)
        y = (F.gelu(u @ p[f"{b}ffn.up.weight"].T) @ p[f"{b}ffn.down.weight"].T).view(*u.shape[:2], Dv, R)
        x = x + sum(torch.einsum("btv,k->btvk", y[..., h], p[f"{b}ffn.storage.keys"][h]) for h in range(R))
    z = _ln(x, p["final_norm.weight"], p.get("final_norm.bias", 0.0))
    features = torch.einsum("btvk,kh->btvh", z, p["readout.keys"]).flatten(-2)  # Eq. 26
    return features @ p["lm_head.weight"].T  # Eq. 27: the R matrices W_U^(h) side by side


@pytest.mark.parametrize("norm_bias", [False, True])
def test_forward_matches_the_paper_equations(norm_bias):
    model = build_model("rmt_46m", **TINY, norm_bias=norm_bias).double()
    assert (model.final_norm.bias is not None) == norm_bias
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
    idx = torch.randint(0, 41, (2, 9))
    torch.testing.assert_close(model(idx), reference_logits(model, idx), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["rmt_305m", "transformer_rmt_405m", "rmt_residual_dk12", "highway_transformer_191m"])
def test_rmt_paper_models_have_no_bias_terms(name):
    """App. C.1: 'We do not use any bias terms', read as including the LayerNorms', for both families alike."""
    with torch.device("meta"):
        names = [n for n, _ in build_model(name, n_layer=2).named_parameters()]
    assert not [n for n in names if n.endswith("bias")] and any(n.endswith("norm.weight") for n in names)


def test_one_hot_keys_make_each_head_read_and_write_only_its_own_column():
    """D_k = R with identity keys: the residual is R stacked D_v-vectors, head h owns column h."""
    config = get_config("rmt_46m", **{**TINY, "d_key": 3})
    attention = RMTAttention(config, layer=0).double()
    with torch.no_grad():
        attention.qkv.keys.copy_(torch.eye(3, dtype=torch.float64).repeat(1, 3))
        attention.out.keys.copy_(torch.eye(3, dtype=torch.float64))
    x, xn = torch.randn(2, 7, 5, 3, dtype=torch.float64), torch.randn(2, 7, 5, 3, dtype=torch.float64)
    out = attention(x, lambda _: xn, None)  # reads xn (the 'normalised' x), writes into x
    for h in range(3):
        own = xn[..., h]
        expected = F.scaled_dot_product_attention(own, own, own, is_causal=True, scale=1 / math.sqrt(5))
        torch.testing.assert_close(out[..., h], x[..., h] + expected)


def test_gradients_reach_every_key_vector():
    model = build_model("rmt_46m", **TINY)
    model(torch.randint(0, 41, (2, 10))).logsumexp(-1).mean().backward()
    keys = {n: p.grad for n, p in model.named_parameters() if n.endswith("keys")}
    assert len(keys) == 2 + 4 * TINY["n_layer"] + 1  # embedding (words, positions), 4 per layer, readout
    for name, grad in keys.items():
        per_key = grad.abs().sum(dim=1) if grad.shape[0] == TINY["rank"] else grad.abs().sum(dim=0)
        assert (per_key > 0).all(), f"{name}: a key without gradient"


def test_rmsnorm_over_the_whole_matrix():
    model = build_model("rmt_46m", **TINY, norm="rmsnorm").double()
    x = torch.randn(2, 3, 5, 6, dtype=torch.float64)
    gain = torch.randn(5, 6, dtype=torch.float64)
    with torch.no_grad():
        model.final_norm.weight.copy_(gain)
    expected = x * torch.rsqrt(x.pow(2).mean(dim=(-2, -1), keepdim=True) + 1e-6) * gain
    torch.testing.assert_close(model.final_norm(x), expected)


def test_alibi_slopes_and_document_mask():
    idx = torch.tensor([[5, 50256, 7, 8]])
    bias = alibi_bias(idx, heads=4, document_mask=True, bos_token_id=50256)
    slopes = [2 ** (-8 * h / 4) for h in range(1, 5)]
    for h, m in enumerate(slopes):
        assert bias[0, h, 3, 2].item() == pytest.approx(-m) and bias[0, h, 3, 1].item() == pytest.approx(-2 * m)
    assert torch.isinf(bias[0, :, 2, 0]).all()  # token 2 is in the second document
    assert torch.isinf(bias[0, :, 0, 1]).all()  # causal
    model = build_model("rmt_46m", **{**TINY, "vocab_size": 50257}, position="alibi", document_mask=True)
    a, b = torch.tensor([[3, 4, 50256, 9, 10]]), torch.tensor([[30, 40, 50256, 9, 10]])
    torch.testing.assert_close(model(a)[:, 2:], model(b)[:, 2:])  # the first document cannot leak


def test_zero_unembedding_and_multipliers():
    model = build_model("rmt_46m", **TINY, zero_init_unembedding=True)
    assert torch.equal(model(torch.randint(0, 41, (1, 4))), torch.zeros(1, 4, 41))
    base = build_model("rmt_46m", **TINY)
    scaled = build_model("rmt_46m", **TINY, output_alpha=2.5)
    scaled.load_state_dict(base.state_dict())
    idx = torch.randint(0, 41, (1, 4))
    torch.testing.assert_close(scaled(idx), 2.5 * base(idx))


def test_official_init_scales():
    model = build_model("rmt_305m", n_layer=24, vocab_size=100)
    block = model.blocks[0]
    assert block.attn.qkv.keys.std().item() == pytest.approx(0.02 / 8, rel=0.05)  # sigma / sqrt(D_k)
    assert block.ffn.storage.keys.std().item() == pytest.approx(0.02 / 4 / math.sqrt(48), rel=0.15)
    assert model.embed.token_storage.keys.std().item() == pytest.approx(0.02 / 4, rel=0.15)  # not depth-scaled


def test_bad_rmt_config_is_named():
    with pytest.raises(TypeError, match="norm='batchnorm'"):
        get_config("rmt_46m", norm="batchnorm")
    with pytest.raises(ValueError, match="document_mask needs position='alibi'"):
        build_model("rmt_46m", **TINY, document_mask=True)(torch.zeros(1, 3, dtype=torch.long))


def test_rmt_paper_transformer_uses_inverse_layer_scaling_and_fp32_attention_on_request(monkeypatch):
    model = build_model("transformer_rmt_49m", n_layer=3, vocab_size=50, d_model=16, n_head=2).double()
    attn = model.blocks[2].attn
    scale = 0.25 * math.sqrt(32) / 8 / 3  # muP's alpha_attn sqrt(base head) / d_head, then layer 2's 1 / 3
    assert not attn.upcast and attn.scale == pytest.approx(scale)  # bf16 SDPA by default (flash keeps fp32 stats)
    assert build_model("transformer_rmt_49m", n_layer=1, attention_fp32=True).blocks[0].attn.upcast

    import scaling_axes.modules.architectures.rmt as rmt_module

    asked, attention = [], rmt_module.causal_attention

    def recorded(*args, upcast: bool, **kwargs):
        asked.append(upcast)
        return attention(*args, upcast=upcast, **kwargs)

    monkeypatch.setattr(rmt_module, "causal_attention", recorded)
    for fp32 in (False, True):
        build_model("rmt_46m", **TINY, attention_fp32=fp32)(torch.zeros(1, 4, dtype=torch.long))
    assert asked == [False, False, True, True]  # each of the two layers, as configured
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    q, k, v = (t.view(1, 5, 2, 8).transpose(1, 2) for t in attn.qkv(x).split(16, -1))
    logits = (q @ k.transpose(-1, -2) * scale).masked_fill(torch.ones(5, 5).triu(1).bool(), -math.inf)
    expected = attn.out((logits.softmax(-1) @ v).transpose(1, 2).reshape(1, 5, 16))
    torch.testing.assert_close(attn(x), expected)
