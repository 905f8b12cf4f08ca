"""Models of the suite. Importing this package registers every architecture's presets."""

from scaling_axes.modules import modded_gpt, mot, rmt, tokenformer, transformer, variants, vit_tokenformer  # noqa: F401
from scaling_axes.modules.registry import build_from_config, build_model, get_config, list_models

__all__ = ["build_from_config", "build_model", "get_config", "list_models"]
