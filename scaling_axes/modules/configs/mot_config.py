"""The Mixture of Tokenizers' configs and presets (`architectures/mot.py` is the model; `architectures/modded_gpt.py`
its backbone): the modded-nanogpt GPT-2-medium backbone, the reference's MoT rows (section 4.5), and one set of
parameter and FLOP formulas for both, the backbone being a MoT with no-op mixin and mixout."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from scaling_axes.datamodules.byte_vocabulary import ByteVocabulary, vocabulary_without_tokenizer
from scaling_axes.modules.registry import Architecture, Example, register, resolve

MaskKind = Literal["causal", "within_token"]


@dataclasses.dataclass(frozen=True)
class ModdedGPTConfig:
    vocab_size: int = 50257
    n_layer: int = 16
    d_model: int = 1024
    n_head: int = 8
    head_dim: int = 128
    mlp_ratio: int = 4
    max_seq_len: int = 1024
    attention_scale: float = 0.12
    attention_free_layers: tuple[int, ...] = (7,)
    value_embeddings: int = 3
    rope_min_period: float = 1024.0  # the ladder's lowest frequency is 1 / rope_min_period
    logit_cap: float = 30.0
    logit_cap_divisor: float = 7.5
    head_multiple: int = 128
    precision_as_run: bool = False  # the original's bf16 embedding tables, so bf16 Adam state for them too

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "d_model", "n_head", "head_dim", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        if self.n_layer % 2:
            raise ValueError(f"n_layer={self.n_layer} must be even: the U-net pairs layer i with n_layer - 1 - i")
        if 2 * self.value_embeddings > self.n_layer:
            raise ValueError(
                f"value_embeddings={self.value_embeddings} need 2 x that many layers; n_layer={self.n_layer}"
            )
        if any(not 0 <= i < self.n_layer for i in self.attention_free_layers):
            raise ValueError(f"attention_free_layers={self.attention_free_layers} outside 0..{self.n_layer - 1}")

    @property
    def d_attention(self) -> int:
        return self.n_head * self.head_dim

    @property
    def head_size(self) -> int:
        """Output classes: the vocabulary padded to a multiple of `head_multiple` (50257 -> 50304)."""
        return -(-self.vocab_size // self.head_multiple) * self.head_multiple

    def value_embedding_of(self, layer: int) -> int | None:
        """Which value embedding layer `layer` mixes into V: 0,1,2 for the first layers and again for the last."""
        k = self.value_embeddings
        if layer < k:
            return layer
        return layer - (self.n_layer - k) if layer >= self.n_layer - k else None


# what reads a tokenizer's tables, resolved when used: where the tables are stored (an exported model) this file
# runs without the suite's data code
TOKEN_BYTES, TOKENIZERS = "scaling_axes.datamodules.token_bytes", "scaling_axes.datamodules.tokenizers:TOKENIZERS"


@dataclasses.dataclass(frozen=True)
class MoTConfig(ModdedGPTConfig):
    """Defaults: the original's choices (pull in and out, the 458-character vocabulary, 16 bytes per token)."""

    mixin: Literal["noop", "concat", "cross_attn"] = "noop"
    mixout: Literal["noop", "split", "copy"] = "noop"
    d_token: int = 1024  # the mixin's token embedding width (noop: d_model)
    d_byte: int = 1024
    bytes_per_token: int = 16
    byte_vocabulary: Literal["chars", "utf8"] = "chars"
    pull_in: bool = True
    pull_out: bool = True
    byte_attention_in: bool = False
    byte_layers_out: int = 0
    byte_attention_wired: bool = True
    byte_mask: MaskKind = "causal"
    byte_window_tokens: int = 8
    byte_head_dim: int = 128
    eot_token: int = 50256
    # the tokenizer whose tokens' bytes are mixed in; "synthetic": random bytes (timing); "stored": the checkpoint's
    # tables, of `byte_symbols` symbols (an exported model, which carries its tables and no tokenizer code)
    byte_table: str = "gpt2"
    byte_symbols: int = 0
    cross_attn_output_norm: bool = False  # this suite's earlier variant: RMS-norm the cross-attention's output

    def __post_init__(self) -> None:
        super().__post_init__()
        for field, allowed in (
            ("mixin", ("noop", "concat", "cross_attn")),
            ("mixout", ("noop", "split", "copy")),
            ("byte_mask", ("causal", "within_token")),
        ):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field}={getattr(self, field)!r}; allowed: {', '.join(allowed)}")
        if (self.byte_table == "stored") != (self.byte_symbols > 0):
            raise ValueError(f"byte_symbols={self.byte_symbols} is the size of stored tables: > 0 with them, else 0")
        if self.mixin == "noop" and self.d_token != self.d_model:
            raise ValueError(f"mixin 'noop' embeds tokens at d_model={self.d_model}; got d_token={self.d_token}")
        if self.mixin == "cross_attn" and not self.d_token == self.d_byte == self.d_model:
            raise ValueError(
                f"cross_attn needs d_token == d_byte == d_model; got {self.d_token}, {self.d_byte}, {self.d_model}"
            )
        if self.byte_attention_in and self.mixin == "noop":
            raise ValueError("byte_attention_in applies to the bytes of a mixin; mixin='noop' has none")
        if self.byte_layers_out and self.mixout == "noop":
            raise ValueError(f"byte_layers_out={self.byte_layers_out} needs a byte mixout; mixout='noop'")
        if self.mixout == "split" and self.d_model % self.bytes_per_token:
            raise ValueError(f"split mixout: d_model={self.d_model} not divisible by {self.bytes_per_token} bytes")

    @property
    def byte_vocab(self) -> ByteVocabulary:
        if self.byte_table == "stored":
            return ByteVocabulary(self.byte_vocabulary, self.byte_symbols)
        if self.byte_table == "synthetic":
            return vocabulary_without_tokenizer(self.byte_vocabulary)
        return self.tokenizer_bytes("byte_vocabulary")(self.byte_vocabulary, tokenizer=self.byte_table)

    def tokenizer_bytes(self, name: str) -> Any:
        """`datamodules.token_bytes`'s `name`, for the tables of this config's tokenizer (one the suite has)."""
        if self.byte_table not in (tokenizers := resolve(TOKENIZERS)):
            raise ValueError(f"byte_table={self.byte_table!r}; allowed: synthetic, stored, {', '.join(tokenizers)}")
        return resolve(f"{TOKEN_BYTES}:{name}")

    @property
    def byte_window(self) -> int:
        return self.byte_window_tokens * self.bytes_per_token

    @property
    def d_byte_out(self) -> int:
        return self.d_model // self.bytes_per_token if self.mixout == "split" else self.d_model


def _row(mixin: str, mixout: str, d_token: int, d_byte: int, **extra) -> MoTConfig:
    return MoTConfig(mixin=mixin, mixout=mixout, d_token=d_token, d_byte=d_byte, **extra)


def _mot(c: ModdedGPTConfig) -> MoTConfig:
    """The backbone as a MoT with no-op mixin and mixout, so one formula covers both."""
    return c if isinstance(c, MoTConfig) else MoTConfig(**dataclasses.asdict(c), d_token=c.d_model)


def _byte_layer(c: MoTConfig, d: int, n_bytes: int, flops: bool) -> int:
    """A wired byte self-attention layer of width `d`: parameters, or FLOPs per byte over `n_bytes` bytes."""
    if not c.byte_attention_wired:
        return 0
    d_attention = max(1, d // c.byte_head_dim) * c.byte_head_dim
    if flops:
        return 2 * 4 * d * d_attention + 4 * n_bytes * d_attention
    return 4 * d * d_attention + 2


def _modded_params(config: ModdedGPTConfig) -> dict[str, int]:
    """Embeddings (tokens, value embeddings, mixin), Q/K/V and output of the attention layers, ReLU^2 MLPs, the
    head (with a byte mixout's layers) and the scalars (block and V lambdas, U-net skip weights) as "other"."""
    c = _mot(config)
    d, layers = c.d_model, c.n_layer
    attention_layers = layers - len(set(c.attention_free_layers))
    embedding, head_matrix = _modded_tables(c)
    if c.mixin == "concat":
        embedding += (c.d_token + c.bytes_per_token * c.d_byte) * d
        embedding += _byte_layer(c, c.d_byte, 0, flops=False) if c.byte_attention_in else 0
    elif c.mixin == "cross_attn":
        embedding += 4 * d * d + 1 + (_byte_layer(c, d, 0, flops=False) if c.byte_attention_in else 0)
    return {
        "embedding": embedding,
        "qkv": attention_layers * 3 * c.d_attention * d,
        "attention": 0,
        "out": attention_layers * c.d_attention * d,
        "ffn": layers * 2 * c.mlp_ratio * d * d,
        "norms": 0,
        "head": head_matrix + c.byte_layers_out * _byte_layer(c, c.d_byte_out, 0, flops=False),
        "other": 2 * layers + 2 * attention_layers + layers // 2,
    }


def _modded_tables(c: MoTConfig) -> tuple[int, int]:
    """(Lookup-table parameters: tokens, value embeddings, bytes; parameters of the head's output matrix)."""
    tables = c.vocab_size * c.d_token + c.value_embeddings * c.vocab_size * c.d_model
    if c.mixin != "noop":
        tables += c.byte_vocab.size * c.d_byte
    head_size = c.head_size if c.mixout == "noop" else c.byte_vocab.head_size
    return tables, c.d_byte_out * head_size


def _modded_flops(config: ModdedGPTConfig, seq_len: int) -> dict[str, int]:
    """Per token; byte-level work counts once per byte slot, byte attention over the 16 x seq_len byte stream."""
    c = _mot(config)
    d, slots = c.d_model, c.bytes_per_token
    attention_layers = c.n_layer - len(set(c.attention_free_layers))
    embedding = 0
    if c.mixin == "concat":
        embedding = 2 * (c.d_token + slots * c.d_byte) * d
        embedding += slots * _byte_layer(c, c.d_byte, slots * seq_len, flops=True) if c.byte_attention_in else 0
    elif c.mixin == "cross_attn":  # q and out d x d, k and v per byte, scores and weighted sum over the 16 bytes
        embedding = 2 * 2 * d * d + slots * 2 * 2 * d * d + 2 * 2 * slots * d
        embedding += slots * _byte_layer(c, d, slots * seq_len, flops=True) if c.byte_attention_in else 0
    if c.mixout == "noop":
        head = 2 * d * c.head_size
    else:
        byte_head = 2 * c.d_byte_out * c.byte_vocab.head_size
        head = slots * (byte_head + c.byte_layers_out * _byte_layer(c, c.d_byte_out, slots * seq_len, flops=True))
    return {
        "embedding": embedding,
        "qkv": attention_layers * 2 * d * 3 * c.d_attention,
        "attention": attention_layers * 4 * seq_len * c.d_attention,
        "out": attention_layers * 2 * c.d_attention * d,
        "ffn": c.n_layer * 2 * 2 * c.mlp_ratio * d * d,
        "norms": 0,
        "head": head,
        "other": 0,
    }


_SMOKE = {"n_layer": 6, "d_model": 32, "n_head": 2, "head_dim": 16, "attention_free_layers": (2,), "max_seq_len": 64}
_SMOKE_MOT = {**_SMOKE, "byte_head_dim": 16, "d_token": 16, "d_byte": 4}


def _modded_architecture(examples: dict[str, Example]) -> Architecture:
    """The backbone and the MoT share their formulas: the backbone is a MoT with no-op mixin and mixout. Their
    recipes train them on the speedrun's Muon + Adam groups, and so do their examples' tests."""
    examples = {name: dataclasses.replace(example, optimizer="muon") for name, example in examples.items()}
    return Architecture(
        params=_modded_params,
        flops=_modded_flops,
        lookup_params=lambda c: sum(_modded_tables(_mot(c))),
        components=(
            (r"^(embed|value_embeds)\.", "embedding"),
            (r"^mixout\.", "head"),
            (r"(lambdas|skip_weights)$", "other"),
        ),
        examples=examples,
    )


register(
    _modded_architecture({"modded_gpt": Example("modded_gpt_454m", _SMOKE, "gpt2")}),
    {"modded_gpt_454m": ModdedGPTConfig()},
)

# The three 10,000-step rows and the mixout runs of reference 4.5; `_as_run` = byte layers as they ran (identity).
_as_run = {"byte_attention_wired": False}
register(
    _modded_architecture(
        {
            "mot": Example("mot_concat_noop_256_48", _SMOKE_MOT, "gpt2"),
            "mot_backbone": Example("mot_noop_noop_1024", {**_SMOKE_MOT, "d_token": 32, "d_byte": 32}, "gpt2"),
            "mot_byte_attention": Example("mot_concat_noop_256_48", {**_SMOKE_MOT, "byte_attention_in": True}, "gpt2"),
            "mot_byte_mixout": Example("mot_concat_split_256_48", _SMOKE_MOT, "gpt2"),  # predicts bytes: not exported
        },
    ),
    {
        "mot_noop_noop_1024": _row("noop", "noop", 1024, 1024),
        "mot_concat_noop_512_64": _row("concat", "noop", 512, 64),
        "mot_concat_noop_256_48": _row("concat", "noop", 256, 48),
        "mot_concat_split_256_48": _row("concat", "split", 256, 48, **_as_run),
        "mot_concat_copy_256_48": _row("concat", "copy", 256, 48, byte_layers_out=1, **_as_run),
        "mot_concat_copy_256_48_wired": _row("concat", "copy", 256, 48, byte_layers_out=1),
    },
)
