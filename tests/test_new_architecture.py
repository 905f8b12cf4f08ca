"""docs/layout.md's recipe for a new architecture ("What each kind of change touches"), followed by a test: one
config and its registration (presets and formulas: what `configs/<arch>_config.py` holds), one model class and its
registration (what `architectures/<arch>.py` holds), and the suite's formulas check, planner and training take it
with nothing else changed."""

import dataclasses

import pytest
import torch
from torch import Tensor, nn

from scaling_axes.harness.experiment.plan import dry_run
from scaling_axes.harness.runs import Budget, Experiment, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.modules import get_config
from scaling_axes.modules.flops import counted_flops, counted_params, formula_flops, formula_params
from scaling_axes.modules.registry import Architecture, register, register_model


@dataclasses.dataclass(frozen=True)
class MLPOnlyConfig:
    """A language model of residual MLP blocks and no attention (each token sees only itself)."""

    vocab_size: int = 512
    n_layer: int = 2
    d_model: int = 32


class MLPBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.ffn(x)


class MLPOnly(nn.Module):
    """Module names follow the suite's convention (`token_embedding`, `blocks.<i>.ffn`, `lm_head`), so the shared
    counting attributes every parameter and FLOP to its component."""

    def __init__(self, config: MLPOnlyConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(MLPBlock(config.d_model) for _ in range(config.n_layer))
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.token_embedding(idx)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(x)


def _counts(c: MLPOnlyConfig, per_weight: int) -> dict[str, int]:
    d, v = c.d_model, c.vocab_size
    return {
        "embedding": v * d * (per_weight == 1),
        "qkv": 0,
        "attention": 0,
        "out": 0,
        "ffn": per_weight * c.n_layer * 8 * d * d,
        "norms": 0,
        "head": per_weight * v * d,
        "other": 0,
    }


register(
    Architecture(
        params=lambda c: _counts(c, 1),
        flops=lambda c, seq_len: _counts(c, 2),
        lookup_params=lambda c: 2 * c.vocab_size * c.d_model,
    ),
    {"test_mlp_only_tiny": MLPOnlyConfig()},
)
register_model(MLPOnlyConfig, MLPOnly)
BUDGET = Budget(steps=3, batch_size=2, seq_len=16, lr=1e-3, val_windows=4, checkpoint_every=3)


def test_a_registered_architecture_has_its_formulas_checked_against_the_model():
    config = get_config("test_mlp_only_tiny", d_model=48)
    with torch.device("meta"):
        model = MLPOnly(config)
    assert formula_params(config) == counted_params(model)
    assert formula_flops(config, 16) == counted_flops(config, 16)


@pytest.mark.trained_outcome
def test_a_registered_architecture_is_planned_and_trained(tmp_path, record_property):
    run = Run("mlp", "test_mlp_only_tiny", BUDGET, tokenizer="bytes")
    experiment = Experiment("test_new_architecture", "recipe", lambda scale: [run], lambda scale, results: [])
    (planned,) = dry_run(experiment, SMOKE, 0.4, 989.0, 1)
    assert planned["params"] == sum(formula_params(run.config).values())
    done = train_run(run, tmp_path / "mlp", accelerator="cpu", devices=1)
    record_property("val_loss", done["val_loss"])
    # log(512) = 6.24 at init: it trained and validated (seeds 1-4: 6.32-6.52, AVX-512 and portable kernels alike)
    assert 0 < done["val_loss"] < 7.0


def test_an_architecture_cannot_grow_unless_it_registers_growth():
    from scaling_axes.harness.training.growth import grow_model

    model = MLPOnly(get_config("test_mlp_only_tiny"))
    with pytest.raises(ValueError, match=r"MLPOnly cannot grow; these can: .*TokenformerConfig.*TransformerConfig"):
        grow_model(model, get_config("test_mlp_only_tiny", d_model=64))
