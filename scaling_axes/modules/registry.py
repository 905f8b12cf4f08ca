"""Architectures and their named presets, in the manner of timm's `create_model`.

Each architecture registers twice, from its two files: `modules/configs/<arch>_config.py` registers its config's
presets, its closed-form parameter and FLOP formulas, its shape (width, depth, outputs) and, if it can grow, how
(`register`); `modules/architectures/<arch>.py` registers the nn.Module that builds it (`register_model`). What
plans and prices runs (`get_config`, `architecture_of`, the formulas) therefore imports no torch; `build_model`
imports the models when it first builds one. Adding an architecture touches no other code (its presets' counts go
in tests/test_models.py: docs/layout.md's change table).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import sys
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor, nn

MODELS = "scaling_axes.modules.architectures"  # every model file, imported when a model is first built

COMPONENTS = ("embedding", "qkv", "attention", "out", "ffn", "norms", "head", "other")
Counts = dict[str, int]  # per component of COMPONENTS


def token_ids(config: Any, seq_len: int) -> tuple[Tensor, int]:
    """A language model's example input for counting FLOPs: one row of `seq_len` token ids, and its token count."""
    import torch

    return torch.zeros(1, seq_len, dtype=torch.long), seq_len


@dataclasses.dataclass(frozen=True)
class Example:
    """A smoke-sized model of an architecture: preset `preset` with `overrides`, on tokenizer `tokenizer` (a MoT's
    byte tables come from its tokenizer), trained on `optimizer`. The tests build, train, export, load, decode and
    compare every registered language model's examples, so that a new architecture is checked by its registration
    alone."""

    preset: str
    overrides: dict[str, Any]
    tokenizer: str = "bytes"
    optimizer: str = "adamw"  # what its architecture's recipes train it with (`LanguageModel.optimizer`)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the suite knows of one architecture, from its config alone.

    params / flops: parameters, and forward matmul FLOPs per token at a context length, per component (COMPONENTS);
    lookup_params: the lookup tables and unembedding that a non-embedding count leaves out; width, depth, outputs:
    residual values per token, layers and output classes (the planner's memory estimate); example_input: an input
    for counting FLOPs on the model and the tokens it holds; components: parameter-name prefixes -> component, beyond
    the names every model here shares; grow: "module:function"
    growing a model into a bigger config (imported when used, so a model file need not import its growth code; it is
    given the options its signature names), and the config fields growth changes (`growing_fields`); examples: its
    smoke-sized models by name (`Example`), one for each way it is built (a language model needs at least one)."""

    params: Callable[[Any], Counts]
    flops: Callable[[Any, int], Counts]
    lookup_params: Callable[[Any], int]
    width: Callable[[Any], int] = lambda c: c.d_model
    depth: Callable[[Any], int] = lambda c: c.n_layer
    outputs: Callable[[Any], int] = lambda c: c.vocab_size
    example_input: Callable[[Any, int], tuple[Tensor, int]] = token_ids
    components: tuple[tuple[str, str], ...] = ()
    grow: str | None = None
    growing_fields: tuple[str, ...] = ()
    examples: dict[str, Example] = dataclasses.field(default_factory=dict)

    @property
    def language_model(self) -> bool:
        return self.example_input is token_ids

    def grow_model(self, model: nn.Module, target: Any, seed: int = 0, **options: Any) -> nn.Module:
        """`model` grown into config `target`. What growth initialises afresh (new parameter tokens, Eq. 14's new
        blocks) is drawn from `seed`, never from the process's random state: that state depends on what the process
        ran before, so a stage grown after other work would start from other weights than the same stage alone. The
        process's random state is left as it was."""
        import torch

        if self.grow is None:
            growable = sorted(c.__name__ for c, a in _ARCHITECTURES.items() if a.grow)
            raise ValueError(f"{type(model).__name__} cannot grow; these can: {', '.join(growable)}")
        function = resolve(self.grow)
        accepted = inspect.signature(function).parameters
        options = {k: v for k, v in {"seed": seed, **options}.items() if k in accepted}
        with torch.random.fork_rng(devices=[]):  # the model is built on the CPU and then moved
            torch.manual_seed(seed)
            return function(model, target, **options)


def resolve(reference: str) -> Any:
    """What `"module:name"` names, its module imported now: how a model file reaches code it must not import (its
    growth, the tables its data gives), so that the file runs alone in an exported model's remote code."""
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class Model:
    """What builds an architecture's config (`build`), and its normalisation modules of its own (`norm_layers`, whose
    gains the optimiser keeps from weight decay), registered by the model's file (`register_model`)."""

    build: Callable[[Any], nn.Module]
    norm_layers: tuple[type[nn.Module], ...] = ()
    module: str = ""


_PRESETS: dict[str, Any] = {}
_ARCHITECTURES: dict[type, Architecture] = {}
_MODELS: dict[type, Model] = {}  # config class -> its model, once its file is imported


def register(architecture: Architecture, presets: dict[str, Any]) -> None:
    """Register an architecture by the config class of its `presets` (name -> frozen dataclass config)."""
    config_types = {type(config) for config in presets.values()}
    if len(config_types) != 1:
        names = sorted(t.__name__ for t in config_types)
        raise TypeError(f"one architecture's presets share one config class; got {names}")
    (config_type,) = config_types
    if config_type in _ARCHITECTURES:
        raise ValueError(f"{config_type.__name__} is registered twice")
    for name, example in architecture.examples.items():
        if example.preset not in presets or name in language_model_examples():
            raise ValueError(f"example {name!r}: its preset is not among these, or its name is taken")
    _ARCHITECTURES[config_type] = architecture
    for name, config in presets.items():
        if name in _PRESETS:
            raise ValueError(f"model preset {name!r} is registered twice")
        _PRESETS[name] = config


def register_model(config_type: type, build: Callable[[Any], nn.Module], norm_layers: tuple = ()) -> None:
    """Register the nn.Module that builds `config_type`'s architecture (already registered by its config file)."""
    if config_type not in _ARCHITECTURES:
        raise TypeError(f"{config_type.__name__} has no registered architecture: register its config's presets first")
    if config_type in _MODELS:
        raise ValueError(f"{config_type.__name__}'s model is registered twice")
    _MODELS[config_type] = Model(build, tuple(norm_layers), sys._getframe(1).f_globals["__name__"])


def _registered_class(config: Any) -> type:
    """`config`'s class, or its nearest registered base class."""
    for cls in type(config).__mro__:
        if cls in _ARCHITECTURES:
            return cls
    raise TypeError(f"no registered architecture takes a {type(config).__name__}")


def architecture_of(config: Any) -> Architecture:
    """The registered architecture of `config` (its class, or the nearest registered base class)."""
    return _ARCHITECTURES[_registered_class(config)]


def model_of(config: Any) -> Model:
    """The model that builds `config`'s architecture, the model files imported if none is registered yet."""
    cls = _registered_class(config)
    if cls not in _MODELS:
        importlib.import_module(MODELS)
    if cls not in _MODELS:
        raise TypeError(f"{cls.__name__} registers no model: call registry.register_model in its model's file")
    return _MODELS[cls]


def registered_in(config: Any) -> str:
    """The module that registered `config`'s model: what an export's remote code must carry, with what it imports
    (its config's file among them)."""
    return model_of(config).module


def architectures() -> list[Architecture]:
    return list(_ARCHITECTURES.values())


def language_model_examples() -> dict[str, Example]:
    """Every registered language model's examples, by name (what the export and decoding tests enumerate)."""
    return {name: e for a in _ARCHITECTURES.values() if a.language_model for name, e in a.examples.items()}


def list_models(prefix: str = "") -> list[str]:
    """Names of every registered preset that starts with `prefix`, sorted."""
    return sorted(name for name in _PRESETS if name.startswith(prefix))


def get_config(name: str, **overrides: Any) -> Any:
    """The preset's config with `overrides` applied (type-checked)."""
    if name not in _PRESETS:
        raise KeyError(f"unknown model {name!r}; registered models: {', '.join(list_models())}")
    return replace_config(_PRESETS[name], **overrides)


def preset_overrides(name: str, config: Any) -> dict[str, Any]:
    """The overrides that turn preset `name` into `config` (so that `get_config(name, **them) == config`)."""
    preset = get_config(name)
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(preset, f.name)
    }


def config_from(class_name: str, fields: dict[str, Any]) -> Any:
    """The config of the registered class named `class_name` whose every field `fields` gives (a finished run's
    `model_config`, as JSON wrote it): the model rebuilt without its preset."""
    preset = next((config for config in _PRESETS.values() if type(config).__name__ == class_name), None)
    if preset is None:
        known = sorted({type(config).__name__ for config in _PRESETS.values()})
        raise KeyError(f"no registered architecture has a config class {class_name!r}; these do: {', '.join(known)}")
    return replace_config(preset, **fields)


def norm_layers() -> tuple[type, ...]:
    """Every registered model's normalisation modules of its own."""
    return tuple(t for m in _MODELS.values() for t in m.norm_layers)


def build_model(name: str, **overrides: Any) -> nn.Module:
    """Build the preset `name`, with config fields replaced by `overrides`."""
    return build_from_config(get_config(name, **overrides))


def build_from_config(config: Any) -> nn.Module:
    """Build a model from a config of any registered architecture."""
    return model_of(config).build(config)


def replace_config(config: Any, **overrides: Any) -> Any:
    """`dataclasses.replace` that names unknown fields and values of the wrong type (a list for a tuple field, as
    JSON writes one, is taken as the tuple)."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(
            f"unknown config field(s) {unknown} for {type(config).__name__}; valid fields: {', '.join(fields)}"
        )
    hints = typing.get_type_hints(type(config))
    overrides = {
        key: tuple(value) if isinstance(value, list) and typing.get_origin(hints[key]) is tuple else value
        for key, value in overrides.items()
    }
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
