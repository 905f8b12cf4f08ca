"""The RMT against the released code (github:bmac3/residual-matrix-transformer at 1afac0c), its equations ported here
in float64 from `../shared/reference/rmt.md` section 1 with the code's own tensor layouts (E [V, D_v, R], the qkv keys
[D_k, 3, R], W1 [D_v, R, D_FF], W2 [D_FF, D_v, R], W_U [D_v, R, V]) and named-axis contractions, not from our module:
on the four presets the cpu scale trains (RMT Fig. 2's ladder), with the code's options (RMSNorm over the matrix with
a full gain, ALiBi, document masking, tanh GELU, muP multipliers) and the init the code draws (section 2)."""

import math

import pytest
import torch

from scaling_axes.experiments.rmt import fig2_scaling_laws as fig2
from scaling_axes.experiments.rmt.setup import RMTS
from scaling_axes.harness.scales import CPU
from scaling_axes.modules import build_model

CODE_OPTIONS = {"norm": "rmsnorm", "position": "alibi", "document_mask": True, "bos_token_id": 7, "gelu": "tanh"}
MULTIPLIERS = {"input_alpha": 1.7, "attention_alpha": 0.6, "output_alpha": 2.3}


def cpu_shape(model: str) -> dict:
    """The overrides the cpu scale trains `model` with (its vocabulary cut to keep the test small)."""
    run = {r.name: r for r in fig2.runs(CPU)}[model]
    return {**run.overrides, "vocab_size": 97}


def code_weights(model) -> dict[str, torch.Tensor]:
    """Our parameters in the code's layouts (its `init` shapes, section 1), float64."""
    c, p = model.config, {k: v.double() for k, v in model.state_dict().items()}
    V, R, Dv, Dk, F = c.vocab_size, c.rank, c.d_value, c.d_key, c.d_ff
    out = {"E": p["embed.token.weight"].view(V, Dv, R), "S_E": p["embed.token_storage.keys"]}
    for layer in range(c.n_layer):
        b = f"blocks.{layer}."
        out |= {
            f"g_attn{layer}": p[f"{b}attn_norm.weight"],
            f"Rq{layer}": p[f"{b}attn.qkv.keys"].view(Dk, 3, R),
            f"S_O{layer}": p[f"{b}attn.out.keys"],
            f"g_ffn{layer}": p[f"{b}ffn_norm.weight"],
            f"Rf{layer}": p[f"{b}ffn.retrieval.keys"],
            f"W1{layer}": p[f"{b}ffn.up.weight"].T.reshape(Dv, R, F),
            f"W2{layer}": p[f"{b}ffn.down.weight"].T.reshape(F, Dv, R),
            f"S_F{layer}": p[f"{b}ffn.storage.keys"],
        }
    return out | {
        "g_final": p["final_norm.weight"],
        "R_out": p["readout.keys"],
        "W_U": p["lm_head.weight"].T.reshape(Dv, R, V),
    }


def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """`rmsnorm.py`: one statistic per token over both axes (v, k), a [D_v, D_k] gain."""
    return x * torch.rsqrt((x * x).mean(dim=(-2, -1), keepdim=True) + eps) * gain


def code_logits(config, w: dict[str, torch.Tensor], idx: torch.Tensor, bos: int) -> torch.Tensor:
    """`RMT.forward` as the code computes it, query by query for the mask and the ALiBi distance."""
    R, Dv, L, T = config.rank, config.d_value, config.n_layer, idx.shape[1]
    x = torch.einsum("btvh,hk->btvk", w["E"][idx] * config.input_alpha, w["S_E"])  # Eq. 18
    slopes = torch.tensor([2.0 ** (-8.0 * h / R) for h in range(1, R + 1)], dtype=torch.float64)
    document = torch.cumsum(idx == bos, dim=1)
    for layer in range(L):
        xn = rms_norm(x, w[f"g_attn{layer}"])
        q, k, v = torch.einsum("btvk,kqh->qbtvh", xn, w[f"Rq{layer}"])  # Eq. 22: one contraction for q, k, v
        scale = config.attention_alpha * math.sqrt(Dv) / Dv / (layer + 1)  # sqrt(base D_v) / D_v, then 1/(l+1)
        o = torch.zeros_like(q)
        for b in range(idx.shape[0]):
            for i in range(T):
                allowed = [j for j in range(i + 1) if document[b, j] == document[b, i]]
                distance = torch.tensor([len([a for a in allowed if a >= j]) - 1 for j in allowed], dtype=torch.float64)
                logits = torch.einsum("vh,jvh->hj", q[b, i], k[b, allowed]) * scale - slopes[:, None] * distance
                o[b, i] = torch.einsum("hj,jvh->vh", logits.softmax(-1), v[b, allowed])
        x = x + torch.einsum("btvh,hk->btvk", o, w[f"S_O{layer}"])  # Eq. 20
        u = torch.einsum("btvk,kh->btvh", rms_norm(x, w[f"g_ffn{layer}"]), w[f"Rf{layer}"])  # Eq. 25
        hidden = torch.nn.functional.gelu(torch.einsum("btvh,vhf->btf", u, w[f"W1{layer}"]), approximate="tanh")
        y = torch.einsum("btf,fvh->btvh", hidden, w[f"W2{layer}"])
        x = x + torch.einsum("btvh,hk->btvk", y, w[f"S_F{layer}"])  # Eq. 23
    features = torch.einsum("btvk,kh->btvh", rms_norm(x, w["g_final"]), w["R_out"])
    return torch.einsum("btvh,vhn->btn", features, w["W_U"]) * config.output_alpha  # Eq. 26-27


@pytest.mark.parametrize("preset", RMTS)
def test_the_cpu_presets_compute_what_the_released_code_computes(preset):
    torch.manual_seed(0)
    model = build_model(preset, **cpu_shape(preset), **CODE_OPTIONS, **MULTIPLIERS).double()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(1.0, 0.3)  # gains away from 1, or a transposed gain would pass
    idx = torch.randint(0, 97, (2, 11))
    idx[0, 4] = idx[1, 7] = 7  # a document boundary in each row
    expected = code_logits(model.config, code_weights(model), idx, bos=7)
    torch.testing.assert_close(model(idx), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("preset", RMTS)
def test_the_cpu_presets_draw_the_codes_init(preset):
    """Section 2's table: sigma / sqrt(fan_in) for keys and W1, W2; sublayer storage also / sqrt(2L), the embedding's
    storage and W2 not; word vectors sigma. Drawn at the cpu shapes with a vocabulary large enough to measure."""
    shape = {**cpu_shape(preset), "vocab_size": 4000}
    model = build_model(preset, **shape)
    c, sigma = model.config, 0.02
    block = model.blocks[-1]
    expected = {
        "word vectors": (model.embed.token.weight, sigma),
        "embedding storage": (model.embed.token_storage.keys, sigma / math.sqrt(c.rank)),
        "attention retrieval": (block.attn.qkv.keys, sigma / math.sqrt(c.d_key)),
        "attention storage": (block.attn.out.keys, sigma / math.sqrt(c.rank) / math.sqrt(2 * c.n_layer)),
        "W1": (block.ffn.up.weight, sigma / math.sqrt(c.d_value * c.rank)),
        "W2": (block.ffn.down.weight, sigma / math.sqrt(c.d_ff)),
        "FF storage": (block.ffn.storage.keys, sigma / math.sqrt(c.rank) / math.sqrt(2 * c.n_layer)),
        "readout": (model.readout.keys, sigma / math.sqrt(c.d_key)),
    }
    for what, (param, std) in expected.items():
        n = param.numel()
        # the sample std's relative error is about 1/sqrt(2n): 6 of those, or 0.35 for the few-element key sets
        assert param.std().item() == pytest.approx(std, rel=min(0.35, 6 / math.sqrt(2 * n))), what
