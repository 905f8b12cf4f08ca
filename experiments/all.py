"""Run every experiment at one scale, then regenerate REPORT.md: ``python -m experiments.all --scale smoke``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import experiments
from experiments.results import SCALES, write_report
from experiments.runner import Experiment, main


def all_experiments() -> list[Experiment]:
    """Every module of `experiments` that declares an EXPERIMENT, in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(experiments.__path__), key=lambda m: m.name):
        experiment = getattr(importlib.import_module(f"experiments.{info.name}"), "EXPERIMENT", None)
        if isinstance(experiment, Experiment):
            found.append(experiment)
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=SCALES, default="smoke")
    parser.add_argument("--report", action="store_true", help="only rebuild the tables from finished runs")
    args = parser.parse_args()
    for experiment in all_experiments():
        print(f"== {experiment.name} ({args.scale})", flush=True)
        main(experiment, ["--scale", args.scale, *(["--report"] if args.report else [])])
    print(f"wrote {write_report()}")
