"""Any language model of scaling-axes as a `transformers` model, for `trust_remote_code=True`.

`python -m scaling_axes export` copies this file beside the weights of a model that no native `transformers`
architecture matches (Tokenformer, RMT, MoT): `AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`
then builds the model from the suite's registry (the preset and its overrides, in config.json), so the `scaling-axes`
package must be installed where it loads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


class ScalingAxesConfig(PretrainedConfig):
    """A registered preset (`preset`) with the config overrides (`overrides`) that resolve it to the trained model."""

    model_type = "scaling_axes"

    def __init__(self, preset: str = "transformer_124m", overrides: dict[str, Any] | None = None, **kwargs) -> None:
        self.preset, self.overrides = preset, dict(overrides or {})
        super().__init__(**kwargs)


class ScalingAxesForCausalLM(PreTrainedModel):
    """The suite's model under `model`: token ids [batch, seq] -> next-token logits."""

    config_class = ScalingAxesConfig
    base_model_prefix = "backbone"

    def __init__(self, config: ScalingAxesConfig) -> None:
        super().__init__(config)
        from scaling_axes.modules import build_model

        with torch.device("cpu"):  # not `from_pretrained`'s meta device: the buffers' values are built here
            self.backbone = build_model(config.preset, **config.overrides)
        self.built_buffers = {  # those out of the state dict (MoT's byte tables), by module
            id(module): {name: buffer.clone() for name, buffer in module.named_buffers(recurse=False)
                         if name in module._non_persistent_buffers_set}
            for module in self.backbone.modules()
        }  # fmt: skip
        self.post_init()

    def _init_weights(self, module) -> None:
        """Weights come from the checkpoint; buffers that `from_pretrained` replaced by empty tensors (those kept out
        of the state dict) get their values as built."""
        for name, value in self.built_buffers.get(id(module), {}).items():
            getattr(module, name).copy_(value)

    def forward(self, input_ids: Tensor, labels: Tensor | None = None, **_: Any) -> CausalLMOutput:
        logits = self.backbone(input_ids)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)
