"""The suite's front door: plan every experiment, or run one by name.

python -m experiments --plan [--scale paper] [--gpu h100] [--mfu 0.4] [--devices 8]
python -m experiments <experiment> [its options]   # = python -m experiments.<experiment> [its options]
python -m experiments --list
"""

from __future__ import annotations

import argparse
import sys

from experiments.all import all_experiments
from experiments.results import SCALES
from experiments.runner import GPUS, dry_run, main, print_plan


def plan(scale: str, gpu: str, mfu: float, devices: int) -> float:
    """Print every experiment's runs (no training) and return the total GPU-hours, each shared run counted once."""
    hours: dict[tuple[str, str], float] = {}
    for experiment in all_experiments():
        runs = dry_run(experiment, scale, mfu, GPUS[gpu], devices)
        if not runs:
            continue
        group = experiment.run_group or experiment.name
        print(f"\n== {experiment.name}" + (f" (run group {group})" if experiment.run_group else ""))
        print_plan(runs, mfu, GPUS[gpu], devices, gpu.upper())
        hours.update({(group, r["run"]): r["gpu_hours"] for r in runs})
    total = sum(hours.values())
    print(f"\ntotal: {len(hours)} runs, {total:,.0f} {gpu.upper()}-hours at {mfu:.0%} MFU (shared runs counted once)")
    return total


def run_main(argv: list[str]) -> None:
    experiments = {e.name: e for e in all_experiments()}
    parser = argparse.ArgumentParser(prog="python -m experiments", description=__doc__.splitlines()[0])
    if argv and not argv[0].startswith("-"):  # an experiment and its own options
        if argv[0] not in experiments:
            parser.error(f"no experiment {argv[0]!r}; experiments: {', '.join(experiments)}")
        main(experiments[argv[0]], argv[1:])
        return
    parser.add_argument("--plan", action="store_true", help="print the plan of every experiment; train nothing")
    parser.add_argument("--list", action="store_true", help="print the experiments")
    parser.add_argument("--scale", choices=SCALES, default="paper")
    parser.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args(argv)
    if args.plan:
        plan(args.scale, args.gpu, args.mfu, args.devices)
    elif args.list:
        print("\n".join(f"{name:45s} {e.description}" for name, e in experiments.items()))
    else:
        parser.error("name an experiment, or pass --plan or --list")


if __name__ == "__main__":
    run_main(sys.argv[1:])
