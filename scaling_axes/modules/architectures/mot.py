"""Mixture of Tokenizers (S. Mueller, 2025): every token embedded together with its bytes, optionally predicting
bytes, on the modded-nanogpt backbone.

The backbone is `modded_gpt.py`, the configs and presets `configs/mot_config.py`; the MoT reference's sections 1-3
and 6 describe what this file builds.

The model takes token ids only; it looks their bytes up in frozen tables (`datamodules.token_bytes`, or the
checkpoint's with `byte_table="stored"`) and pulls them across tokens on the device, as the original's data
generator did, so the data path is the same as every other language model's. With a byte mixout the targets become
bytes too: `loss_targets` maps the next-token ids to the right-pulled bytes of the next tokens, 16 slots each, pads
and end-of-text included (section 3.4).

Mixins: `noop` (the backbone's token embedding), `concat` (RMS-normed token and byte embeddings concatenated, one
Linear to d_model, norm), `cross_attn` (token queries over their own bytes, at any batch size). Mixouts: `noop`,
`split` (d_model/16 dims per byte slot), `copy` (the whole state copied to every slot). Byte self-attention
layers, at the input (one) and the output (`byte_layers_out`), use a 128-byte sliding window, causal or
bidirectional within a token; `byte_attention_wired=False` reproduces the reported runs, where the layer was
never wired in and returned its input (section 6.4).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from scaling_axes.datamodules.byte_slots import pull_from_left, pull_from_right, synthetic_token_byte_table
from scaling_axes.modules.architectures.byte_mixing import ByteMixout, ConcatMixin, CrossAttentionMixin
from scaling_axes.modules.architectures.layers import current_decoding
from scaling_axes.modules.architectures.modded_gpt import ModdedGPT, speedrun_linear
from scaling_axes.modules.configs.mot_config import MoTConfig
from scaling_axes.modules.registry import register_model


class MixtureOfTokenizers(ModdedGPT):
    """The backbone with a byte mixin in place of its token embedding and optionally a byte mixout and head."""

    def __init__(self, config: MoTConfig) -> None:
        super().__init__(config)
        self.bytes_vocab = config.byte_vocab
        if config.mixin != "noop":
            self.embed = {"concat": ConcatMixin, "cross_attn": CrossAttentionMixin}[config.mixin](config)
            self.register_buffer("input_bytes", self._table("left"), persistent=self.tables_stored)
        self.mixout = ByteMixout(config) if config.mixout != "noop" else None
        if self.mixout is not None:
            self.lm_head = speedrun_linear(config.d_byte_out, self.bytes_vocab.head_size, zero=True)
            self.register_buffer("target_bytes", self._table("right"), persistent=self.tables_stored)
        self.tables_as_run()  # the mixin's own tables

    @property
    def tables_stored(self) -> bool:
        """Whether the byte tables are the checkpoint's (in its state dict) rather than built from a tokenizer."""
        return self.config.byte_table == "stored"

    def _table(self, padding: str) -> Tensor:
        c = self.config
        if self.tables_stored:
            table = torch.full((c.vocab_size, c.bytes_per_token), self.bytes_vocab.pad_id, dtype=torch.int16)
        elif c.byte_table == "synthetic":
            table = synthetic_token_byte_table(c.byte_vocabulary, c.bytes_per_token, padding)
        else:
            build = c.tokenizer_bytes("token_byte_table")
            table = build(c.byte_vocabulary, c.bytes_per_token, padding, c.byte_table)
        if table.shape[0] != c.vocab_size:
            raise ValueError(f"byte tables cover {c.byte_table}'s {table.shape[0]} tokens; vocab_size={c.vocab_size}")
        return table.long().to(torch.get_default_device())  # meta under a meta-device build (FLOP counts)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """As the backbone's, except that the concat Linear trains with the embeddings (the original's line 1156)."""
        groups = super().param_groups()
        if isinstance(self.embed, ConcatMixin):
            concat = self.embed.proj.weight  # by identity: `list.remove` compares tensors with ==, elementwise
            groups["muon"] = [p for p in groups["muon"] if p is not concat]
            groups["embed"].append(concat)
        return groups

    @property
    def predicts_bytes(self) -> bool:
        return self.mixout is not None

    @property
    def embeds_bytes(self) -> bool:
        """Whether a token's embedding reads its bytes (a new token would need them: no resizing then)."""
        return self.config.mixin != "noop"

    def embed_inputs(self, idx: Tensor) -> Tensor:
        """The mixin's embedding; while decoding, of `idx` after the cached tokens that it looks back at."""
        if self.config.mixin == "noop":
            return super().embed_inputs(idx)
        step, seq = current_decoding(), idx.shape[1]
        if step is not None and step.start:
            idx = torch.cat((step.prefix_ids()[:, -self.context_tokens :], idx), dim=1)
        byte_ids = self.input_bytes[idx]
        if self.config.pull_in:
            byte_ids = pull_from_left(byte_ids, self.bytes_vocab.pad_id, self.bytes_vocab.eot_id)
        return self.embed(idx, byte_ids)[:, -seq:]

    @property
    def context_tokens(self) -> int:
        """The earlier tokens a token's mixin embedding depends on: those whose bytes its pull reaches (each token
        has at least one), and those the byte layer's window reaches."""
        c = self.config
        wired = c.byte_attention_in and c.byte_attention_wired
        return c.bytes_per_token + (c.byte_window_tokens if wired else 0)

    def logits(self, x: Tensor) -> Tensor:
        return super().logits(x if self.mixout is None else self.mixout(x))

    def loss_targets(self, targets: Tensor) -> Tensor:
        """Next-token ids [B, T] -> what the logits predict: the same ids, or [B, 16T] bytes of the next tokens,
        pulled from the right when `pull_out`."""
        if self.mixout is None:
            return targets
        byte_ids = self.target_bytes[targets]
        if self.config.pull_out:
            byte_ids = pull_from_right(byte_ids, self.bytes_vocab.pad_id, self.bytes_vocab.eot_id)
        return byte_ids.reshape(targets.shape[0], -1)


register_model(MoTConfig, MixtureOfTokenizers)
