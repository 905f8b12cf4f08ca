"""Any language model of scaling-axes as a `transformers` causal LM, for `trust_remote_code=True`.

`python -m scaling_axes export` copies this file (as `modeling_scaling_axes.py`) beside the weights of a model that
no native `transformers` architecture matches (Tokenformer, RMT, MoT, ...), with the suite's own files that build
the model (`interop/remote_code.py`): `AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` then
builds it from the registry's preset and overrides in config.json, with torch and transformers alone. It is a
complete causal LM: `generate` (greedy, sampling, batched with left padding), `pipeline("text-generation")`,
gradient checkpointing, input and output embeddings.

`use_cache=True` returns a `DynamicCache` of every attention layer's keys and values, and a step then runs only the
new tokens (`layers.decoding`, whose state is the call's: two threads generate with one model). It recomputes
instead, returning no cache, where a cache would not give the same logits: a padded batch (the backbones take no
padding mask: each row runs on its own tokens, so left padding changes nothing, and it trains) and a sequence longer
than the model's window (each step then sees the last `max_position_embeddings`). A forward past the window gives
every position its logits, window by window from the end (`layers.windowed`), as the suite's lm-eval scorer scores;
the logits cover the tokenizer's vocabulary exactly.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from scaling_axes.interop.hf_config import ScalingAxesConfig
from scaling_axes.modules import architectures  # noqa: F401  (registers the models: an export imports its own)
from scaling_axes.modules.architectures.layers import Decoding, decoding, windowed
from scaling_axes.modules.registry import build_model

# the cache's name in forward, generate and outputs: `cache` from transformers 5.2x, `past_key_values` before
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class ScalingAxesForCausalLM(PreTrainedModel, GenerationMixin):
    """The suite's model under `backbone`: token ids [batch, seq] -> next-token logits."""

    config_class = ScalingAxesConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True

    def __init__(self, config: ScalingAxesConfig) -> None:
        super().__init__(config)
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
        if getattr(self.backbone, "embeds_bytes", False):  # a MoT backbone with no byte mixin resizes as any model
            raise NotImplementedError(
                "a Mixture of Tokenizers model embeds each token with its bytes (its byte "
                "table): new tokens need their bytes, which resizing cannot give"
            )
        return super().resize_token_embeddings(*args, **kwargs)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        prefix_ids: Tensor | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """Next-token logits over the tokenizer's vocabulary (`config.vocab_size`: a backbone padded past it has its
        extra rows cut, so they can never be generated), at every position (past the window: `_logits`); with `labels`,
        their mean cross-entropy (shifted; -100, padded positions and a padded row's first token ignored). A padded
        batch runs each row on its unpadded tokens (its padded positions' logits are zero), gradients included. With
        `use_cache`, `input_ids` are the tokens after those the cache (`cache` or `past_key_values`) holds,
        `prefix_ids` those tokens (`generate` passes both); past the window it gives the last window's logits, all a
        next token needs."""
        padded = attention_mask is not None and not bool(attention_mask.all())
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        cache = DynamicCache() if cache is None else cache
        cached = cache.get_seq_length()
        if (self.config.use_cache if use_cache is None else use_cache) and labels is None and not padded:
            if cached + input_ids.size(1) <= self._window:
                with decoding(cache, prefix_ids):
                    return CausalLMOutputWithPast(logits=self._vocabulary(self.backbone(input_ids)), **{CACHE: cache})
            if cached:  # past the window: the last window again, as without a cache (the prefix checked as inside)
                ids = torch.cat((Decoding(cache, cached, prefix_ids).prefix_ids(), input_ids), dim=1)[
                    :, -self._window :
                ]
                return CausalLMOutputWithPast(logits=self._vocabulary(self.backbone(ids)))
        logits = self._padded_logits(input_ids, attention_mask) if padded else self._logits(input_ids)
        loss = None
        if labels is not None:
            if padded:  # a target counts where it and the token before it are real (a row's first has no context)
                real = attention_mask.bool()
                labels = labels.masked_fill(~(real & torch.cat((real[:, :1], real[:, :-1]), dim=1)), -100)
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    @property
    def _window(self) -> int:
        return self.config.max_position_embeddings or self.backbone.config.max_seq_len

    def _vocabulary(self, logits: Tensor) -> Tensor:
        return logits[..., : self.config.vocab_size]

    def _logits(self, input_ids: Tensor) -> Tensor:
        """The backbone's logits over the vocabulary at every position; past the window, window by window from the
        end (`layers.windowed`), the rule the suite's lm-eval scorer follows too."""
        return self._vocabulary(windowed(self.backbone, input_ids, self._window))

    def _padded_logits(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Each row's logits on its own unpadded tokens, put back at their positions (out of place, so that a
        padded batch trains); zero at the padded ones."""
        rows = []
        for ids, keep in zip(input_ids, attention_mask.bool(), strict=True):
            row = self._logits(ids[keep][None])[0]
            rows.append(row.new_zeros(ids.size(0), row.size(-1)).index_put((keep.nonzero()[:, 0],), row))
        return torch.stack(rows)

    def prepare_inputs_for_generation(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The tokens the cache does not hold yet (all of them without one), and those it holds; past the window
        with nothing cached, the last window's columns alone, uncached (a next token needs no more)."""
        cache = kwargs.get(CACHE)
        cached = 0 if cache is None else cache.get_seq_length()
        if not cached and input_ids.size(1) > self._window:  # left-padded: each row's last tokens are on the right
            mask = None if attention_mask is None else attention_mask[:, -self._window :]
            return {"input_ids": input_ids[:, -self._window :], "attention_mask": mask, "use_cache": False}
        return {
            "input_ids": input_ids[:, cached:],
            "prefix_ids": input_ids[:, :cached],
            "attention_mask": attention_mask,
            CACHE: cache,
            "use_cache": use_cache,
        }


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
