"""Any language model of scaling-axes as a `transformers` causal LM, for `trust_remote_code=True`.

`python -m scaling_axes export` copies this file beside the weights of a model that no native `transformers`
architecture matches (Tokenformer, RMT, MoT): `AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`
then builds the model from the suite's registry (the preset and its overrides, in config.json), so the `scaling-axes`
package must be installed where it loads. It is a complete causal LM: `generate` (greedy, sampling, batched with
left padding), `pipeline("text-generation")`, gradient checkpointing, input and output embeddings.

Generation has no KV cache: the suite's backbones take a whole window of token ids, so each step runs the last
`max_position_embeddings` tokens again (`use_cache` is off in the generation config). They take no padding mask
either: a padded batch runs each row on its own tokens, so left padding changes nothing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


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
        **kwargs,
    ) -> None:
        self.preset, self.overrides = preset, dict(overrides or {})
        self.hidden_size, self.num_hidden_layers = hidden_size, num_hidden_layers
        self.num_attention_heads, self.max_position_embeddings = num_attention_heads, max_position_embeddings
        super().__init__(**kwargs)


class ScalingAxesForCausalLM(PreTrainedModel, GenerationMixin):
    """The suite's model under `backbone`: token ids [batch, seq] -> next-token logits."""

    config_class = ScalingAxesConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True

    def __init__(self, config: ScalingAxesConfig) -> None:
        super().__init__(config)
        from scaling_axes.modules import build_model

        with torch.device("cpu"):  # not `from_pretrained`'s meta device: the buffers' values are built here
            self.backbone = build_model(config.preset, **config.overrides)
        self.built_buffers = {  # those out of the state dict (MoT's byte tables), by module
            id(module): {
                name: buffer.clone()
                for name, buffer in module.named_buffers(recurse=False)
                if name in module._non_persistent_buffers_set
            }
            for module in self.backbone.modules()
        }
        for layer in layers(self.backbone):
            checkpointable(layer)
        vocab = self.backbone.config.vocab_size  # where the embeddings sit, found once (a resize replaces them)
        self.vocabulary_modules = {  # "input", and "output" where the unembedding is a layer of its own
            role: next(
                (
                    name
                    for name, m in self.backbone.named_modules()
                    if isinstance(m, kind) and getattr(m, size) == vocab
                ),
                None,
            )
            for role, kind, size in (("input", nn.Embedding, "num_embeddings"), ("output", nn.Linear, "out_features"))
        }
        self.post_init()

    def _init_weights(self, module) -> None:
        """Weights come from the checkpoint; buffers that `from_pretrained` replaced by empty tensors (those kept out
        of the state dict) get their values as built."""
        for name, value in self.built_buffers.get(id(module), {}).items():
            getattr(module, name).copy_(value)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.backbone.get_submodule(self.vocabulary_modules["input"])

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        _replace(self.backbone, self.vocabulary_modules["input"], value)

    def get_output_embeddings(self) -> nn.Linear | None:
        """The unembedding, where it is a layer of its own (None where it is tied to the input embedding)."""
        name = self.vocabulary_modules["output"]
        return None if name is None else self.backbone.get_submodule(name)

    def set_output_embeddings(self, value: nn.Linear) -> None:
        _replace(self.backbone, self.vocabulary_modules["output"], value)

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> nn.Embedding:
        if hasattr(self.backbone, "bytes_vocab") or hasattr(self.backbone.config, "byte_table"):
            raise NotImplementedError(
                "a Mixture of Tokenizers model embeds each token with its bytes (its byte "
                "table): new tokens need their bytes, which resizing cannot give"
            )
        return super().resize_token_embeddings(*args, **kwargs)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None, **_: Any
    ) -> CausalLMOutputWithPast:
        """Next-token logits; with `labels`, their mean cross-entropy (shifted, -100 ignored). A padded batch runs
        each row on its unpadded tokens (its padded positions' logits are zero)."""
        if labels is not None and input_ids.size(1) > self._window:
            raise ValueError(f"{input_ids.size(1)} tokens with labels: the model's window is {self._window}")
        if attention_mask is None or bool(attention_mask.all()):
            logits = self._logits(input_ids)
        else:
            pairs = list(zip(input_ids, attention_mask.bool(), strict=True))
            rows = [self._logits(ids[mask][None])[0] for ids, mask in pairs]
            logits = rows[0].new_zeros(*input_ids.shape, rows[0].size(-1))
            for logit, row, (_, mask) in zip(logits, rows, pairs, strict=True):
                logit[mask] = row
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    @property
    def _window(self) -> int:
        return self.config.max_position_embeddings or self.backbone.config.max_seq_len

    def _logits(self, input_ids: Tensor) -> Tensor:
        """The backbone's logits; past its window, those of the last window (what generating needs), zero before."""
        if input_ids.size(1) <= self._window:
            return self.backbone(input_ids)
        logits = self.backbone(input_ids[:, -self._window :])
        return F.pad(logits, (0, 0, input_ids.size(1) - self._window, 0))

    def prepare_inputs_for_generation(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, **_: Any
    ) -> dict[str, Any]:
        """Every step sees every token so far (no cache)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def layers(backbone: nn.Module) -> list[nn.Module]:
    """The backbone's repeated layers (each outermost stack of them, embedding tables aside): what checkpointing
    recomputes."""
    stacks: dict[str, nn.ModuleList] = {}
    for name, module in backbone.named_modules():  # outer stacks before what they hold
        if isinstance(module, nn.ModuleList) and not any(name.startswith(f"{outer}.") for outer in stacks):
            stacks[name] = module
    return [layer for stack in stacks.values() for layer in stack if not isinstance(layer, nn.Embedding)]


def checkpointable(layer: nn.Module) -> None:
    """`layer`'s forward recomputed in the backward pass while `gradient_checkpointing` is set on it, as
    `transformers` sets it (`gradient_checkpointing_enable`); its state dict unchanged."""
    forward = layer.forward
    layer.gradient_checkpointing = False

    def maybe_checkpointed(*args: Any, **kwargs: Any) -> Any:
        if layer.gradient_checkpointing and layer.training:
            return layer._gradient_checkpointing_func(forward, *args, **kwargs)
        return forward(*args, **kwargs)

    layer.forward = maybe_checkpointed


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    """Put `new` at `name` in `root`."""
    parent, _, attribute = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, attribute, new)
