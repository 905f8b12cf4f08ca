"""One module per paper table or figure, grouped per paper; each declares an `EXPERIMENT`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaling_axes.harness.runs import Experiment

if __name__ != "scaling_axes.experiments":  # the checkout's top-level `experiments` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)


def all_experiments() -> list[Experiment]:
    """Every module under this package that declares an EXPERIMENT (a `harness.runs.Experiment`), in name order:
    what the command line runs and lists, and what a test of every experiment reads."""
    import importlib
    import pkgutil

    from scaling_axes.harness.runs import Experiment

    found = []
    for info in pkgutil.walk_packages(__path__, f"{__name__}."):
        experiment = getattr(importlib.import_module(info.name), "EXPERIMENT", None)
        if isinstance(experiment, Experiment):
            found.append(experiment)
    return sorted(found, key=lambda e: e.name)
