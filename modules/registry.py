"""Named model presets, in the manner of timm's `create_model`.

Every architecture registers its presets here as (frozen config, builder). `build_model(name, **overrides)`
replaces config fields by name, checks their types, and builds the model.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from torch import nn

_PRESETS: dict[str, tuple[Any, Callable[[Any], nn.Module]]] = {}


def register_presets(builder: Callable[[Any], nn.Module], presets: dict[str, Any]) -> None:
    """Register `presets` (name -> frozen dataclass config) for the model class `builder`."""
    for name, config in presets.items():
        if name in _PRESETS:
            raise ValueError(f"model preset {name!r} is registered twice")
        _PRESETS[name] = (config, builder)


def list_models(prefix: str = "") -> list[str]:
    """Names of every registered preset that starts with `prefix`, sorted."""
    return sorted(name for name in _PRESETS if name.startswith(prefix))


def get_config(name: str, **overrides: Any) -> Any:
    """The preset's config with `overrides` applied (type-checked)."""
    if name not in _PRESETS:
        raise KeyError(f"unknown model {name!r}; registered models: {', '.join(list_models())}")
    return replace_config(_PRESETS[name][0], **overrides)


def preset_overrides(name: str, config: Any) -> dict[str, Any]:
    """The overrides that turn preset `name` into `config` (so that `get_config(name, **them) == config`)."""
    preset = get_config(name)
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(preset, f.name)}  # fmt: skip


def build_model(name: str, **overrides: Any) -> nn.Module:
    """Build the preset `name`, with config fields replaced by `overrides`."""
    config = get_config(name, **overrides)
    return _PRESETS[name][1](config)


def build_from_config(config: Any) -> nn.Module:
    """Build a model from a config of any registered architecture."""
    for preset, builder in _PRESETS.values():
        if type(preset) is type(config):
            return builder(config)
    raise TypeError(f"no registered architecture takes a {type(config).__name__}")


def replace_config(config: Any, **overrides: Any) -> Any:
    """`dataclasses.replace` that names unknown fields and values of the wrong type."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(
            f"unknown config field(s) {unknown} for {type(config).__name__}; valid fields: {', '.join(fields)}"
        )
    hints = typing.get_type_hints(type(config))
    for key, value in overrides.items():
        if not _is_instance(value, hints[key]):
            raise TypeError(f"config field {key}={value!r} has type {type(value).__name__}; expected {hints[key]}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"config field {key}={value!r} is not a finite number")
    return dataclasses.replace(config, **overrides)


def _is_instance(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, arg) for arg in typing.get_args(hint))
    if origin is tuple:
        return isinstance(value, tuple)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is type(None):
        return value is None
    return isinstance(value, origin or hint)
