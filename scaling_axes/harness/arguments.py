"""Command-line values checked where they are parsed: argparse types that say what range a number must lie in."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from scaling_axes.harness.scales import Scale, UnknownScale, get_scale


def in_range(kind: type, low: float, high: float = math.inf, low_open: bool = False) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within [low, high] (or (low, high] when `low_open`), or an error saying so."""

    def parse(text: str) -> Any:
        value = kind(text)
        if not (low < value if low_open else low <= value) or value > high or value != value:
            raise argparse.ArgumentTypeError(f"{value} is out of range {'(' if low_open else '['}{low:g}, {high:g}]")
        return value

    parse.__name__ = kind.__name__  # argparse says "invalid int value: 'two'"
    return parse


def device_spec(text: str) -> str:
    """--devices as Lightning takes it: 'auto', a count (-1: all), or a comma list of device indices ('0,1')."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if text == "auto" or (len(parts) == 1 and parts[0].lstrip("-").isdigit() and int(parts[0]) >= -1 and
                          int(parts[0]) != 0) or (len(parts) > 1 and all(p.isdigit() for p in parts)):  # fmt: skip
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: use 'auto', a device count (-1 for all) or indices such as '0,1'")


def scale_argument(text: str) -> Scale:
    """--scale: a registered scale, or the registry's refusal naming the scales."""
    try:
        return get_scale(text)
    except UnknownScale as error:
        raise argparse.ArgumentTypeError(str(error)) from None
