"""The modded-nanogpt backbone and the Mixture of Tokenizers: published parameter counts, mixins, mixouts, masks,
the Muon + Adam optimiser."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scaling_axes.datamodules.byte_slots import pull_from_left, pull_from_right
from scaling_axes.datamodules.token_bytes import token_byte_table
from scaling_axes.modules import build_model, get_config
from scaling_axes.modules.architectures.byte_attention import byte_mask, windowed_attention
from scaling_axes.modules.flops import counted_flops, counted_params, formula_flops, formula_params
from scaling_axes.modules.tasks.optim import MuonWithAdam, constant_then_linear, speedrun_lrs

BACKBONE = {"n_layer": 6, "d_model": 64, "n_head": 2, "head_dim": 32, "attention_free_layers": (2,), "max_seq_len": 32}
TINY = {**BACKBONE, "byte_head_dim": 16}
TINY_BYTES = {**TINY, "d_token": 16, "d_byte": 4}
EOT = 50256


def randomised(model: torch.nn.Module) -> torch.nn.Module:
    """Give the zero-initialised projections and heads random weights, so that every path matters."""
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.normal_(0, 0.05)
    return model


def tokens(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, EOT, (batch, seq), generator=generator)
    idx[:, seq // 3] = EOT
    return idx


def test_backbone_parts_equal_the_reference_breakdown() -> None:
    counts = counted_params(_meta("modded_gpt_454m"))
    assert counts["embedding"] == 51_463_168 + 154_389_504 and counts["head"] == 51_511_296
    blocks = counts["qkv"] + counts["out"] + counts["ffn"] + counts["other"] - 8  # the 8 skip weights
    assert blocks == 197_132_350


def _meta(name: str, **overrides):
    with torch.device("meta"):
        return build_model(name, **overrides)


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("mot_concat_noop_256_48", {}),
        ("mot_concat_split_256_48", {"byte_attention_wired": True, "byte_layers_out": 2, "byte_attention_in": True}),
        ("mot_concat_copy_256_48_wired", {"byte_mask": "within_token"}),
        ("mot_noop_noop_1024", {"mixin": "cross_attn", "d_byte": 64, "d_token": 64}),
        (
            "mot_noop_noop_1024",
            {
                "mixin": "cross_attn",
                "d_byte": 64,
                "d_token": 64,
                "byte_attention_in": True,
                "byte_attention_wired": True,
            },
        ),
    ],
)
def test_flop_and_parameter_formulas_equal_counts_on_the_model(name: str, overrides: dict) -> None:
    config = get_config(name, **{**TINY_BYTES, **overrides})
    assert formula_params(config) == counted_params(_meta(name, **{**TINY_BYTES, **overrides}))
    assert formula_flops(config, 24) == counted_flops(config, 24)


def test_noop_noop_is_the_backbone_alone() -> None:
    mot = randomised(build_model("mot_noop_noop_1024", **TINY, d_token=64))
    backbone = build_model("modded_gpt_454m", **BACKBONE)
    backbone.load_state_dict(mot.state_dict())
    idx = tokens(2, 12)
    torch.testing.assert_close(mot(idx), backbone(idx), rtol=0, atol=0)
    assert torch.equal(mot.loss_targets(idx), idx)


def test_backbone_forward_matches_an_independent_float64_computation() -> None:
    """Embedding norm, x0 lambdas, U-net skips, value embeddings 0,1,2 ... 0,1,2, the attention-free layer, ReLU^2,
    QK norm, rotary, scale 0.12 and the soft cap, written out once more from the reference."""
    model = randomised(build_model("modded_gpt_454m", **BACKBONE)).double()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() < 2:
                p.uniform_(0.3, 1.2)
    idx = tokens(2, 10)
    c = model.config

    def norm(x):
        return x / x.pow(2).mean(-1, keepdim=True).add(torch.finfo(x.dtype).eps).sqrt()

    def rotate(x):  # modded-nanogpt's Rotary: y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos
        freq = (1 / 1024) ** torch.linspace(0, 1, c.head_dim // 4, dtype=torch.float64)
        freq = torch.cat((freq, freq.new_zeros(c.head_dim // 4)))
        theta = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * freq
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * theta.cos() + x2 * theta.sin(), -x1 * theta.sin() + x2 * theta.cos()), -1)

    x0 = norm(model.embed(idx))
    ve = [e(idx) for e in model.value_embeds]
    ve = ve + [None] * (c.n_layer - 6) + ve
    x, skips = x0, []
    for i, block in enumerate(model.blocks):
        if i >= 3:
            x = x + model.skip_weights[i - 3] * skips.pop()
        x = block.lambdas[0] * x + block.lambdas[1] * x0
        if block.attn is not None:
            a = block.attn
            h = norm(x)
            q, k, v = (h @ w.T for w in (a.qkv.q, a.qkv.k, a.qkv.v))
            q, k, v = (t.view(2, 10, c.n_head, c.head_dim).transpose(1, 2) for t in (q, k, v))
            q, k = rotate(norm(q)), rotate(norm(k))
            v = a.lambdas[0] * v + (a.lambdas[1] * ve[i].view(2, 10, c.n_head, c.head_dim).transpose(1, 2))
            scores = (q @ k.transpose(-1, -2) * 0.12).masked_fill(~torch.ones(10, 10, dtype=bool).tril(), -math.inf)
            y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 10, -1)
            x = x + y @ a.out.weight.T
        h = norm(x) @ block.ffn.fc.weight.T
        x = x + h.relu().square() @ block.ffn.proj.weight.T
        if i < 3:
            skips.append(x)
    expected = 30 * torch.sigmoid(norm(x) @ model.lm_head.weight.T / 7.5)
    torch.testing.assert_close(model(idx), expected, rtol=1e-10, atol=1e-10)


def test_concat_mixin_is_a_linear_map_of_normed_token_and_pulled_byte_embeddings() -> None:
    model = randomised(build_model("mot_concat_noop_256_48", **TINY_BYTES)).double()
    idx = tokens(3, 9)
    table = token_byte_table("chars", 16, "left")
    pulled = pull_from_left(table[idx].long(), 456, 457)

    def norm(x):
        return F.rms_norm(x, (x.size(-1),))

    mixed = torch.cat((norm(model.embed.tokens(idx)), norm(model.embed.bytes(pulled)).flatten(-2)), -1)
    torch.testing.assert_close(model.embed_inputs(idx), norm(mixed @ model.embed.proj.weight.T))
    unpulled = build_model("mot_concat_noop_256_48", **TINY_BYTES, pull_in=False).double()
    unpulled.load_state_dict(model.state_dict())
    assert not torch.allclose(unpulled.embed_inputs(idx), model.embed_inputs(idx))


def test_byte_mixouts_predict_the_right_pulled_bytes_of_the_next_tokens() -> None:
    """Targets: per position, 16 slots of the next tokens' bytes up to the next end-of-text (reference 1.6)."""
    model = build_model("mot_concat_split_256_48", **TINY_BYTES)
    next_tokens = tokens(2, 8)
    expected = pull_from_right(token_byte_table("chars", 16, "right")[next_tokens].long(), 456, 457)
    assert torch.equal(model.loss_targets(next_tokens), expected.reshape(2, -1))
    assert model(next_tokens).shape == (2, 8 * 16, 512) and model.predicts_bytes


def test_split_hands_each_byte_slot_its_own_dims_and_copy_gives_all_slots_the_same_state() -> None:
    split = randomised(build_model("mot_concat_split_256_48", **TINY_BYTES)).double()
    x = torch.randn(2, 5, 64, dtype=torch.float64)
    logits = split.soft_cap(split.lm_head(F.rms_norm(x.view(2, 5, 16, 4), (4,)))).reshape(2, 80, -1)
    torch.testing.assert_close(split.logits(x), logits)
    copy = randomised(build_model("mot_concat_copy_256_48", **TINY_BYTES)).double()  # as run: x + norm(x)
    out = copy.logits(x).view(2, 5, 16, -1)
    assert torch.equal(out, out[:, :, :1].expand_as(out))  # the same prediction in every slot (reference 6.4)
    wired = randomised(build_model("mot_concat_copy_256_48_wired", **TINY_BYTES)).double()
    out = wired.logits(x).view(2, 5, 16, -1)
    assert not torch.allclose(out[:, :, 0], out[:, :, 1])


def test_cross_attention_mixin_is_independent_of_batch_composition() -> None:
    model = randomised(build_model("mot_noop_noop_1024", **TINY, mixin="cross_attn", d_token=64, d_byte=64))
    idx = tokens(4, 7)
    together = model.embed_inputs(idx)
    alone = torch.cat([model.embed_inputs(idx[i : i + 1]) for i in range(4)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model(idx[1:2]), model(idx)[1:2], rtol=1e-4, atol=1e-5)


def test_byte_masks_equal_a_dense_reference() -> None:
    n, width, window = 80, 4, 12
    for kind in ("causal", "within_token"):
        expected = torch.zeros(n, n, dtype=torch.bool)
        for q in range(n):
            for k in range(n):
                in_window = q - k < window
                allowed = k <= q if kind == "causal" else k // width <= q // width
                expected[q, k] = allowed and in_window
        assert torch.equal(byte_mask(n, width, window, kind), expected)
    within = byte_mask(n, width, window, "within_token")
    assert within[4, 7] and not within[3, 4]  # a token's bytes see each other, never a later token's


def test_flex_attention_and_masked_sdpa_agree() -> None:
    from torch.nn.attention.flex_attention import flex_attention

    from scaling_axes.modules.architectures.byte_attention import _flex_block_mask

    q, k, v = torch.randn(3, 2, 2, 256, 16).unbind(0)
    for kind in ("causal", "within_token"):
        block = _flex_block_mask(256, 16, 128, kind, "cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flex = flex_attention(q, k, v, block_mask=block, scale=0.12)
        torch.testing.assert_close(flex, windowed_attention(q, k, v, 0.12, 16, 128, kind), rtol=1e-5, atol=1e-5)


def test_wired_byte_attention_respects_the_window() -> None:
    """Changing a byte's input changes no output byte outside its window (the input-side layer)."""
    model = randomised(
        build_model("mot_concat_noop_256_48", **TINY_BYTES, byte_attention_in=True, byte_window_tokens=1)
    )
    layer = model.embed.byte_layer
    x = torch.randn(1, 64, 4)
    changed = x.clone()
    changed[0, 20] += 1.0
    moved = (layer(changed) - layer(x)).abs().sum(-1)[0] > 0
    assert moved.nonzero().flatten().tolist() == list(range(20, 36))  # causal: itself and the next 15 bytes


def test_bad_configs_fail_with_the_allowed_values() -> None:
    with pytest.raises(TypeError, match=r"mixin='bytes'.*'noop', 'concat', 'cross_attn'"):
        get_config("mot_noop_noop_1024", mixin="bytes")
    with pytest.raises(ValueError, match="cross_attn needs d_token == d_byte == d_model"):
        get_config("mot_concat_noop_256_48", mixin="cross_attn")
    with pytest.raises(ValueError, match="byte_layers_out=1 needs a byte mixout"):
        get_config("mot_noop_noop_1024", byte_layers_out=1)
    with pytest.raises(ValueError, match="n_layer=5 must be even"):
        get_config("modded_gpt_454m", n_layer=5)


def test_muon_with_adam_groups_lrs_schedule_and_state() -> None:
    model = build_model("mot_concat_noop_256_48", **TINY_BYTES)
    groups = model.param_groups()
    assert any(p is model.embed.proj.weight for p in groups["embed"]) and groups["head"] == [model.lm_head.weight]
    assert all(p.dim() == 2 for p in groups["muon"]) and all(p.dim() < 2 for p in groups["scalar"])
    assert sum(len(g) for g in groups.values()) == len(list(model.parameters()))
    lrs = speedrun_lrs(1024)
    assert lrs["head"] == 0.003125
    optimizer = MuonWithAdam(groups, lrs, momentum_warmup=4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: constant_then_linear(s, 10, 0.6))
    before = {id(p): p.detach().clone() for p in model.parameters()}
    for _ in range(5):
        out = model(tokens(2, 8))
        F.cross_entropy(out.view(-1, out.shape[-1]), tokens(2, 8, 1).view(-1)).backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    assert all(not torch.equal(before[id(p)], p) for p in groups["muon"] + groups["embed"] + groups["head"])
    assert optimizer.muon.param_groups[0]["momentum"] == pytest.approx(0.95)
    assert optimizer.muon.param_groups[0]["lr"] == pytest.approx(0.025 * (1 - 0.5) / 0.6)  # step 5 of 10
    restored = MuonWithAdam(build_model("mot_concat_noop_256_48", **TINY_BYTES).param_groups(), lrs)
    restored.load_state_dict(optimizer.state_dict())
    assert restored.steps == 5 and restored.param_groups[-1]["lr"] == optimizer.param_groups[-1]["lr"]
    assert [constant_then_linear(s, 100, 0.6) for s in (0, 39, 40, 70, 100)] == pytest.approx([1, 1, 1, 0.5, 0])


def _newton_schulz_reference(g: torch.Tensor, coefficients) -> torch.Tensor:
    """The record's iteration written out in float64, one (a, b, c) per step: X <- aX + b(XX^T)X + c(XX^T)^2 X."""
    x = g.double().T if g.shape[0] > g.shape[1] else g.double()
    x = x / (torch.linalg.matrix_norm(x) + 1e-7)
    for a, b, c in coefficients:
        x = a * x + b * (x @ x.T) @ x + c * (x @ x.T) @ (x @ x.T) @ x
    return x.T if g.shape[0] > g.shape[1] else x


@pytest.mark.parametrize("shape", [(24, 40), (40, 24)])
def test_newton_schulz_follows_the_records_per_iteration_coefficients(shape) -> None:
    from scaling_axes.modules.tasks.optim import RECORD_COEFFICIENTS, TORCH_COEFFICIENTS, newton_schulz

    g = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    ours = newton_schulz(g, RECORD_COEFFICIENTS).double()
    reference = _newton_schulz_reference(g, RECORD_COEFFICIENTS)
    assert (ours - reference).abs().max() < 0.03  # bf16 iterations against float64
    fixed = _newton_schulz_reference(g, TORCH_COEFFICIENTS)
    assert (reference - fixed).abs().max() > 0.1  # the schedules differ by far more than bf16's rounding
    singular = torch.linalg.svdvals(reference)
    assert 0.6 < singular.min() and singular.max() < 1.3  # an approximate orthogonalisation


def test_record_muon_with_torchs_triple_steps_as_torch_muon() -> None:
    """Our Muon's momentum, decay, shape scaling and orientation equal torch.optim.Muon's when both use one triple."""
    from scaling_axes.modules.tasks.optim import TORCH_COEFFICIENTS, Muon

    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(16, 48, generator=generator), torch.randn(48, 16, generator=generator)]
    ours, theirs = [nn.Parameter(w.clone()) for w in weights], [nn.Parameter(w.clone()) for w in weights]
    a = Muon(ours, lr=0.05, weight_decay=0.1, coefficients=TORCH_COEFFICIENTS)
    b = torch.optim.Muon(theirs, lr=0.05, weight_decay=0.1, nesterov=True, ns_steps=5, adjust_lr_fn="original")
    for _ in range(3):
        grads = [torch.randn(w.shape, generator=generator) for w in weights]
        for params, optimizer in ((ours, a), (theirs, b)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    for p, q, w in zip(ours, theirs, weights, strict=True):  # bf16 iterations in a different order: 2% of the move
        assert (p - q).norm() < 0.04 * (q - w).norm()  # (the record's triples end 13-15% away from torch's)


def test_muon_with_adam_uses_the_record_schedule_by_default() -> None:
    from scaling_axes.modules.tasks.optim import RECORD_COEFFICIENTS, Muon

    groups = build_model("mot_concat_noop_256_48", **TINY_BYTES).param_groups()
    optimizer = MuonWithAdam(groups, speedrun_lrs(64))
    assert isinstance(optimizer.muon, Muon) and optimizer.muon.param_groups[0]["coefficients"] == RECORD_COEFFICIENTS
    assert isinstance(MuonWithAdam(groups, speedrun_lrs(64), newton_schulz="torch").muon, torch.optim.Muon)
    with pytest.raises(ValueError, match="newton_schulz"):
        MuonWithAdam(groups, speedrun_lrs(64), newton_schulz="polar")


def test_precision_as_run_keeps_embedding_tables_and_their_adam_state_in_bf16() -> None:
    model = build_model("mot_concat_noop_256_48", **TINY_BYTES, precision_as_run=True)
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    assert len(tables) == 2 + TINY_BYTES.get("value_embeddings", 3)  # tokens, bytes and the value embeddings
    assert all(m.weight.dtype == torch.bfloat16 for m in tables)
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if "embed" not in n or "proj" in n)
    optimizer = MuonWithAdam(model.param_groups(), speedrun_lrs(64))
    idx = torch.randint(0, 50257, (2, 8))
    model(idx).float().logsumexp(-1).mean().backward()
    optimizer.step()
    assert all(optimizer.adam.state[m.weight]["exp_avg"].dtype == torch.bfloat16 for m in tables)
    reference = build_model("mot_concat_noop_256_48", **TINY_BYTES)
    assert all(m.weight.dtype == torch.float32 for m in reference.modules() if isinstance(m, nn.Embedding))


def _original_cross_attention(mixin, token_embeddings, byte_embeddings):
    """`CrossAttention.forward` of the original (reference 2.3) in float64, its kv_w = [k; v] stacked as [2, d, d]:
    one fused projection split by heads, QK norm, rotary per position scale, lambda x V, 1/sqrt(head_dim), c_proj."""
    heads, dim = mixin.n_head, mixin.head_dim
    batch, seq, _ = token_embeddings.shape
    kv_w = torch.stack((mixin.k.weight, mixin.v.weight))
    k, v = F.linear(byte_embeddings, kv_w.flatten(end_dim=1)).view(batch, -1, 2 * heads, dim).chunk(2, dim=-2)
    q = F.linear(token_embeddings, mixin.q.weight).view(batch, seq, heads, dim)
    q, k = F.rms_norm(q, (dim,)), F.rms_norm(k, (dim,))
    q, k = mixin.rotary(q.transpose(1, 2)), mixin.rotary(k.transpose(1, 2))
    v = mixin.value_scale * v.transpose(1, 2)
    k, v = k.reshape(batch, heads, seq, -1, dim), v.reshape(batch, heads, seq, -1, dim)
    weights = (q.unsqueeze(3) @ k.transpose(-1, -2) / dim**0.5).softmax(-1)
    y = (weights @ v).squeeze(3).transpose(1, 2).reshape(batch, seq, heads * dim)
    return F.linear(y, mixin.out.weight)


def test_cross_attention_mixin_is_the_originals_and_its_output_norm_an_option() -> None:
    cross = {**TINY, "mixin": "cross_attn", "d_token": 64, "d_byte": 64}
    model = randomised(build_model("mot_noop_noop_1024", **cross)).double()
    idx, byte_ids = tokens(2, 5), torch.randint(0, 458, (2, 5, 16))
    tokens_in = F.rms_norm(model.embed.tokens(idx), (64,))
    bytes_in = F.rms_norm(model.embed.bytes(byte_ids.view(2, -1)), (64,))
    expected = _original_cross_attention(model.embed, tokens_in, bytes_in)
    torch.testing.assert_close(model.embed(idx, byte_ids), expected, rtol=1e-10, atol=1e-10)  # no output norm
    normed = randomised(build_model("mot_noop_noop_1024", **cross, cross_attn_output_norm=True)).double()
    normed.load_state_dict(model.state_dict())
    torch.testing.assert_close(normed.embed(idx, byte_ids), F.rms_norm(expected, (64,)))
    muon = {id(p) for p in model.param_groups()["muon"]}
    assert all(id(m.weight) in muon and m.weight.shape == (64, 64) for m in (model.embed.k, model.embed.v))
    with_bytes = randomised(build_model("mot_noop_noop_1024", **cross, byte_attention_in=True)).double()
    assert with_bytes.embed.byte_layer is not None  # byte attention before the cross-attention, as the original allows
    with pytest.raises(ValueError, match="mixin='noop' has none"):
        get_config("mot_noop_noop_1024", byte_attention_in=True)
