"""The released Tokenformer weights (`Haiyang-W/TokenFormer-150M` ... `-1-5B`) in this suite's Tokenformer.

The releases are raw GPT-NeoX state dicts (`pytorch_model.bin`) whose keys follow NeoX's `sequential` pipeline
layout (reference `tokenformer.md` section 2): the embedding at index 0, layer i at index i + 2, the final norm at
L + 3, no output matrix (tied to the embedding). Block norms are non-parametric and have no keys; rotary inverse
frequencies, if a NeoX version saved them, are recomputed here and skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from torch import Tensor

from scaling_axes.io import load_torch
from scaling_axes.modules.architectures.tokenformer import Tokenformer
from scaling_axes.modules.configs.tokenformer_config import OFFICIAL_REPOS

_PATTENTIONS = {
    "attention.query": "attn.qkv.query",
    "attention.key": "attn.qkv.key",
    "attention.value": "attn.qkv.value",
    "attention.proj": "attn.out",
    "mlp": "ffn",
}
_RECOMPUTED = re.compile(r"sequential\.\d+\.attention\.rotary_emb\.inv_freq")


def official_key_map(n_layer: int) -> dict[str, str]:
    """Official key -> this suite's key, for every parameter of an `n_layer` Tokenformer."""
    mapping = {"sequential.0.word_embeddings.weight": "token_embedding.weight"}
    for layer in range(n_layer):
        for official, ours in _PATTENTIONS.items():
            for tokens in ("key_param_tokens", "value_param_tokens"):
                mapping[f"sequential.{layer + 2}.{official}.{tokens}"] = f"blocks.{layer}.{ours}.{tokens}"
    for name in ("weight", "bias"):
        mapping[f"sequential.{n_layer + 3}.norm.{name}"] = f"final_norm.{name}"
    return mapping


def convert_official_state_dict(official: dict[str, Tensor], model: Tokenformer) -> dict[str, Tensor]:
    """The official state dict renamed to `model`'s keys; refuses a key or shape that does not fit."""
    mapping, expected = official_key_map(model.config.n_layer), model.state_dict()
    unknown = sorted(k for k in official if k not in mapping and not _RECOMPUTED.fullmatch(k))
    missing = sorted(k for k in mapping if k not in official)
    if unknown or missing:
        raise KeyError(
            f"official Tokenformer state dict does not fit {model.config.n_layer} layers: unknown keys "
            f"{unknown[:5]}{'...' if len(unknown) > 5 else ''}, missing keys {missing[:5]}"
            f"{'...' if len(missing) > 5 else ''} (is the preset the one the weights were trained as?)"
        )
    converted = {}
    for key, ours in mapping.items():
        if official[key].shape != expected[ours].shape:
            raise ValueError(
                f"official {key} has shape {tuple(official[key].shape)} but {ours} of this preset is "
                f"{tuple(expected[ours].shape)}: wrong preset for these weights"
            )
        converted[ours] = official[key].to(expected[ours].dtype)
    return converted


def load_official_tokenformer(model: Tokenformer, source: str) -> Tokenformer:
    """Load `source` (a local `pytorch_model.bin`, a folder with one, or a hub id) into `model` in place."""
    path = Path(source)
    if path.is_dir():
        path = path / "pytorch_model.bin"
    if not path.exists():
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(source, "pytorch_model.bin"))
        except Exception as err:
            raise FileNotFoundError(
                f"official Tokenformer weights: {source} is neither a local file nor reachable on the hub ({err}); "
                f"download pytorch_model.bin from one of {', '.join(OFFICIAL_REPOS.values())} and pass its path"
            ) from err
    official = load_torch(path, "download pytorch_model.bin of the official release again")
    model.load_state_dict(convert_official_state_dict(official, model))
    return model
