"""Incremental decoding (`layers.decoding`): every language model, fed its tokens a few at a time over a key/value
cache, gives the logits of one whole-sequence forward (float64); a step's cost does not grow with the prefix."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache

from scaling_axes.modules import build_model
from scaling_axes.modules.architectures.layers import decoding
from tests.test_export import EXAMPLES, EXPORTED


def _perturbed(preset: str, overrides: dict) -> torch.nn.Module:
    """The model in float64 with every weight moved off its initialisation (zero-initialised heads included)."""
    model = build_model(preset, **overrides).double().eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return model


@pytest.mark.parametrize("name", EXPORTED)
def test_decoding_over_a_cache_gives_the_whole_sequences_logits(name) -> None:
    model = _perturbed(EXAMPLES[name].preset, EXAMPLES[name].overrides)
    ids = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(1))
    if getattr(model.config, "document_mask", False):  # a document boundary, where a model masks documents
        ids[0, 10] = model.config.bos_token_id
    with torch.no_grad():
        whole, cache, pieces = model(ids), DynamicCache(), []
        for start, end in ((0, 12), (12, 13), (13, 20), *((t, t + 1) for t in range(20, 30))):
            with decoding(cache, ids[:, :start]):
                pieces.append(model(ids[:, start:end]))
    assert whole.std() > 0.05  # logits that depend on the weights
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, atol=1e-12, rtol=1e-12)


def _step_flops(model: torch.nn.Module, ids: torch.Tensor, prefix: int) -> int:
    """Matmul FLOPs of the forward of token `prefix` after a cache of the `prefix` before it, but for attention's
    scores: those grow by one row per cached token however a cache is kept (FlopCounterMode counts no
    `scaled_dot_product_attention` on the CPU; elsewhere its entries are left out)."""
    cache = DynamicCache()
    with torch.no_grad(), decoding(cache, ids[:, :0]):
        model(ids[:, :prefix])
    with torch.no_grad(), decoding(cache, ids[:, :prefix]), FlopCounterMode(display=False) as counter:
        model(ids[:, prefix : prefix + 1])
    return sum(flops for op, flops in counter.get_flop_counts()["Global"].items() if "attention" not in str(op))


@pytest.mark.parametrize("name", EXPORTED)
def test_a_cached_step_costs_the_same_whatever_the_prefix(name) -> None:
    """A step after 50 tokens costs what one after 30 does (past the MoT's 24 tokens of byte context), a 50th of
    the whole forward it replaces."""
    model = build_model(EXAMPLES[name].preset, **EXAMPLES[name].overrides).eval()
    ids = torch.randint(0, 256, (1, 60), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), FlopCounterMode(display=False) as whole:
        model(ids[:, :51])
    assert _step_flops(model, ids, 30) == _step_flops(model, ids, 50) < whole.get_total_flops() / 40


@pytest.mark.parametrize("name", EXPORTED)
def test_a_whole_sequence_forward_never_reads_the_decoding_context(name, monkeypatch) -> None:
    """Outside `decoding` no forward reads its ContextVar (torch 2.11's Dynamo breaks the compiled graph at a
    ContextVar's get: a compiled training step ran slower than eager on the H200); inside, and after a context
    closed, decoding is unchanged."""
    from scaling_axes.modules.architectures import layers

    class Unread:
        def get(self):
            raise AssertionError("a whole-sequence forward read the decoding ContextVar")

        def __getattr__(self, name):
            return getattr(real, name)

    model, real = _perturbed(EXAMPLES[name].preset, EXAMPLES[name].overrides), layers._DECODING
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole = model(ids)
        with decoding(DynamicCache(), ids[:, :0]):
            first = model(ids[:, :4])
        monkeypatch.setattr(layers, "_DECODING", Unread())
        torch.testing.assert_close(model(ids), whole, atol=0, rtol=0)
    torch.testing.assert_close(first, whole[:, :4], atol=1e-12, rtol=1e-12)
