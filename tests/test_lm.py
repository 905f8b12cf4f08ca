"""The LightningModule: schedule, parameter groups, losses and the failures it must stop on."""

import contextlib
import math
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from conftest import TINY_TOKENFORMER

from scaling_axes.modules.flops import lookup_tables
from scaling_axes.modules.tasks.lm import LanguageModel, warmup_cosine


def test_warmup_then_cosine_to_the_floor():
    assert warmup_cosine(0, 10, 110, 0.1) == 0.0
    assert warmup_cosine(5, 10, 110, 0.1) == 0.5
    assert warmup_cosine(10, 10, 110, 0.1) == 1.0
    assert warmup_cosine(60, 10, 110, 0.1) == pytest.approx(0.55)
    assert warmup_cosine(110, 10, 110, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(500, 10, 110, 0.0) == 0.0


@pytest.mark.parametrize("decay_embeddings", [True, False])
def test_weight_decay_groups(decay_embeddings):
    module = LanguageModel("tokenformer_150m", TINY_TOKENFORMER, decay_embeddings=decay_embeddings)
    embedding = module.model.token_embedding.weight
    groups = _configured_groups(module)
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert (id(embedding) in decayed) == decay_embeddings
    assert id(module.model.final_norm.weight) not in decayed
    assert id(module.model.blocks[0].ffn.key_param_tokens) in decayed


@pytest.mark.parametrize("model", ["rmt_46m", "transformer_rmt_49m"])
def test_norm_parameters_of_any_rank_are_not_decayed_in_either_rmt_paper_family(model):
    """App. C.1: no decay on LayerNorm parameters. The RMT's gains and biases are [D_v, D_k] matrices, which a
    1-d rule would decay; every other matrix is decayed."""
    tiny = (
        {"n_layer": 2, "d_key": 6, "d_value": 5, "rank": 3, "d_ff": 16}
        if model.startswith("rmt")
        else {"n_layer": 2, "d_model": 32, "n_head": 4}
    )
    module = LanguageModel(model, tiny, decay_embeddings=False)
    decayed = {id(p) for p in _configured_groups(module)[0]["params"]}
    named = dict(module.model.named_parameters())
    norms, tables = {name for name in named if "norm" in name}, {id(p) for p in lookup_tables(module.model)}
    assert norms and {n for n in named if id(named[n]) in decayed} == {
        n for n, p in named.items() if p.dim() >= 2 and n not in norms and id(p) not in tables
    }
    if model.startswith("rmt"):
        assert named["blocks.0.attn_norm.weight"].dim() == 2


@contextlib.contextmanager
def attached_trainer(module, **attributes):
    """A stand-in Trainer with just the attributes a hook reads (LightningModule.trainer is a property)."""
    trainer = SimpleNamespace(**attributes)
    with mock.patch.object(type(module), "trainer", property(lambda self: trainer)):
        yield


def _configured_groups(module):
    with attached_trainer(module, max_steps=100):
        return module.configure_optimizers()["optimizer"].param_groups


def test_z_loss_is_the_mean_squared_log_partition():
    module = LanguageModel("tokenformer_150m", TINY_TOKENFORMER, z_loss=1e-4)
    inputs, targets = torch.randint(0, 97, (2, 3)), torch.randint(0, 97, (2, 3))
    ce, z = module.loss(inputs, targets)
    logits = module(inputs).detach()
    assert ce.item() == pytest.approx(torch.nn.functional.cross_entropy(logits.view(-1, 97), targets.view(-1)).item())
    assert z.item() == pytest.approx((torch.logsumexp(logits, -1) ** 2).mean().item())


def test_non_finite_loss_stops_with_the_step():
    module = LanguageModel("tokenformer_150m", TINY_TOKENFORMER)
    with torch.no_grad():
        module.model.token_embedding.weight.fill_(math.nan)
    batch = (torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
    message = "nan at step 0; last finite loss none; last good checkpoint: none written yet"
    with (
        attached_trainer(module, world_size=1, checkpoint_callback=None),
        pytest.raises(FloatingPointError, match=message),
    ):
        module.training_step(batch, 0)


def test_vocabulary_larger_than_the_model_is_rejected():
    module = LanguageModel("tokenformer_150m", TINY_TOKENFORMER)
    with (
        attached_trainer(module, datamodule=SimpleNamespace(vocab_size=50257)),
        pytest.raises(ValueError, match="50257 ids but model 'tokenformer_150m' has vocab_size=97"),
    ):
        module.setup("fit")


def test_init_weights_that_do_not_fit_are_named(tmp_path):
    other = LanguageModel("tokenformer_150m", {**TINY_TOKENFORMER, "qkv_tokens": 20})
    torch.save(other.model.state_dict(), tmp_path / "w.pt")
    with pytest.raises(ValueError, match=r"query\.key_param_tokens.*\(20, 32\).*\(12, 32\)"):
        LanguageModel("tokenformer_150m", TINY_TOKENFORMER, init_weights=str(tmp_path / "w.pt"))


def _reference_terms(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy and the squared log-partition's mean in float64, written out (not the suite's code)."""
    lse = torch.logsumexp(logits.double(), dim=-1)
    picked = logits.double().gather(-1, targets[..., None]).squeeze(-1)
    return (lse - picked).mean(), lse.pow(2).mean()


@pytest.mark.parametrize("with_z", [True, False])
@pytest.mark.parametrize("spread", [3.0, 300.0])  # 300: rows whose softmax underflows at every id but one or two
def test_the_eager_loss_from_one_softmax_equals_float64_in_value_and_gradient(with_z, spread):
    """`eager_loss_terms` (one softmax, its gradient that softmax scaled per row) against float64 cross-entropy and
    z term, for logits [batch, time, vocab]: values to 1e-6 relative, the gradient of ce + 0.3 z to fp32 rounding;
    without z its term is 0 and adds no gradient."""
    from scaling_axes.modules.tasks.loss import eager_loss_terms

    generator = torch.Generator().manual_seed(7)
    logits = (torch.randn(3, 5, 41, generator=generator) * spread).requires_grad_()
    targets = torch.randint(0, 41, (3, 5), generator=generator)
    ce, z = eager_loss_terms(logits, targets, with_z)
    (ce + 0.3 * z).backward()
    exact = logits.detach().double().requires_grad_()
    ce64, z64 = _reference_terms(exact, targets)
    (ce64 + (0.3 * z64 if with_z else 0)).backward()
    assert ce.dtype == z.dtype == torch.float32
    assert ce.item() == pytest.approx(ce64.item(), rel=1e-6)
    assert z.item() == (pytest.approx(z64.item(), rel=1e-6) if with_z else 0.0)
    torch.testing.assert_close(logits.grad.double(), exact.grad, rtol=1e-5, atol=1e-7)


def test_the_eager_loss_equals_the_compiled_paths_plain_loss_and_refuses_a_second_backward() -> None:
    """The plain `loss_terms` (what `compile_training` compiles) and the eager one agree on a 50k vocabulary; the
    eager backward scales its saved softmax in place, so a second backward through it is refused, not wrong."""
    from scaling_axes.modules.tasks.loss import eager_loss_terms, loss_terms

    logits = (torch.randn(2, 4, 50_257) * 4).requires_grad_()
    targets = torch.randint(0, 50_257, (2, 4))
    plain, eager = loss_terms(logits, targets, True), eager_loss_terms(logits, targets, True)
    for a, b in zip(plain, eager, strict=True):
        assert a.item() == pytest.approx(b.item(), rel=1e-6)
    total = eager[0] + 1e-4 * eager[1]
    total.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        total.backward()
