"""The `transformers` configuration of a scaling-axes language model exported with remote code (its
`configuration_scaling_axes.py`): the registered preset and the overrides that resolve it to the trained model."""

from __future__ import annotations

from typing import Any

import transformers
from transformers import PretrainedConfig

TESTED_TRANSFORMERS = ("4.57.6", "5.24.0")  # the lines every export is loaded on by tests/test_hf_lines.py
NEEDS_TRANSFORMERS = (4, 57)  # the older line's newest release series: refused below it, in one line
if tuple(int(part) for part in transformers.__version__.split(".")[:2]) < NEEDS_TRANSFORMERS:
    raise ImportError(
        f"this export needs transformers>={'.'.join(map(str, NEEDS_TRANSFORMERS))}, not {transformers.__version__} "
        f"(tested: {' and '.join(TESTED_TRANSFORMERS)}): pip install -U 'transformers>=4.57'"
    )


# the models it configures. In an export this is the model's own file, so that configuration files differ by model:
# transformers maps a config class to the first model class loaded for it, and two exports with one configuration
# file would share one config class, loading an RMT's config with a Tokenformer's model class
from scaling_axes.modules import architectures  # noqa: F401, E402 (after the check: it refuses an old transformers first)


class ScalingAxesConfig(PretrainedConfig):
    """A registered preset (`preset`) with the config overrides (`overrides`) that resolve it to the trained model;
    the standard fields (`hidden_size`, `num_hidden_layers`, ...) are what the export read off that model."""

    model_type = "scaling_axes"

    def __init__(
        self,
        preset: str = "transformer_124m",
        overrides: dict[str, Any] | None = None,
        hidden_size: int | None = None,
        num_hidden_layers: int | None = None,
        num_attention_heads: int | None = None,
        max_position_embeddings: int | None = None,
        use_cache: bool = True,
        **kwargs: Any,
    ) -> None:
        self.preset, self.overrides = preset, dict(overrides or {})
        self.hidden_size, self.num_hidden_layers = hidden_size, num_hidden_layers
        self.num_attention_heads, self.max_position_embeddings = num_attention_heads, max_position_embeddings
        self.use_cache = use_cache
        super().__init__(**kwargs)
