"""The checkout the suite runs from: git in it, and the commit every run's records and loggers name."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

CHECKOUT = Path(__file__).parent  # the package, inside the checkout


def git(*args: str) -> str:
    """`git args` in the suite's checkout: its output, empty outside a git checkout."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=CHECKOUT).stdout.strip()
    except OSError:  # no git
        return ""


@functools.cache
def source_commit() -> str:
    """The commit the suite runs from (what a run's records and loggers name)."""
    return git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
