"""One experiment's command line: ``python -m scaling_axes run <experiment> --scale SCALE [--run-name RUN]
[--seeds N] [--report] [--list] [--dry-run]``. ``--run-name RUN`` trains exactly one run (what a cluster job launches
under torchrun or srun; `<run>_seed<k>` is its repeat at seed k); without it every missing run is trained in order,
then the results table is rebuilt.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from scaling_axes.harness.claims.plan import pilot_plan, training_plan
from scaling_axes.harness.experiment.plan import RUN_OVERHEAD_S, dry_run, print_plan
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.experiment.table import rebuild
from scaling_axes.harness.results import RESULTS_DIR
from scaling_axes.harness.runs import (
    RUNS_DIR,
    Experiment,
    Run,
    at_plan_rate,
    default_runs,
    find_run,
    seed_run,
    with_seeds,
)
from scaling_axes.harness.scales import SCALES, SMOKE, device_spec, in_range, not_empty, scale_argument
from scaling_axes.harness.training.hardware import GPUS, MEASURED_MFU, MEASURED_MFU_SOURCE
from scaling_axes.harness.training.launch import parse_loggers, world_size
from scaling_axes.io import SuiteError, check_directory


def main(experiment: Experiment, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m scaling_axes run {experiment.name}", description=experiment.description
    )
    parser.add_argument("--scale", type=scale_argument, choices=SCALES.values(), default=SMOKE)
    parser.add_argument(
        "--run-name",
        dest="run",
        type=not_empty(str),
        help="train exactly this run (not --run: torchrun would take it for its own --run-path)",
    )
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    parser.add_argument("--report", action="store_true", help="only rebuild the results table from finished runs")
    parser.add_argument("--dry-run", action="store_true", help="print parameters, FLOPs and time; train nothing")
    parser.add_argument(
        "--out-dir",
        type=not_empty(Path),
        default=Path("."),
        help="runs under OUT_DIR/runs, tables under OUT_DIR/results (default: here)",
    )
    parser.add_argument(
        "--mfu",
        type=in_range(float, 0, 1, low_open=True),
        default=MEASURED_MFU,
        help=f"MFU for --dry-run (default {MEASURED_MFU:g}: {MEASURED_MFU_SOURCE})",
    )
    parser.add_argument(
        "--overhead-s",
        type=in_range(float, 0),
        default=RUN_OVERHEAD_S,
        help=f"fixed seconds per run for --dry-run (default {RUN_OVERHEAD_S:g}: start-up, data, validation)",
    )
    parser.add_argument("--gpu", choices=sorted(GPUS), default="h100", help="the GPU --dry-run prices hours on")
    parser.add_argument(
        "--peak-tflops",
        type=in_range(float, 0, low_open=True),
        help="per device, --dry-run (default: the --gpu's bf16 peak)",
    )
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument(
        "--devices",
        type=device_spec,
        default="auto",
        help="devices per node as Lightning takes them: 'auto', a count (-1: all), '0,1'",
    )
    parser.add_argument("--num-nodes", type=in_range(int, 1), default=1)
    parser.add_argument(
        "--precision", default=None, help="Lightning precision (default: bf16-mixed on a CUDA GPU, 32-true on the CPU)"
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model (default: on a GPU, runs of 2000 steps or more)",
    )
    parser.add_argument("--strategy", default="auto", help="ddp, fsdp (one FSDP2 unit per block), or any Lightning's")
    parser.add_argument(
        "--allow-other-kernels",
        action="store_true",
        help="resume a run on another GPU model or CPU instruction set than it started on (refused otherwise: it "
        "rounds differently); recorded in the run's config.yaml",
    )
    parser.add_argument(
        "--allow-other-code",
        action="store_true",
        help="resume a run under other code than it started with (its commit and code digest differ; refused "
        "otherwise: it would not be the same run); recorded in the run's config.yaml",
    )
    parser.add_argument(
        "--allow-other-plan",
        action="store_true",
        help="resume a claim run under another analysis plan than it started under (refused otherwise); both digests "
        "are recorded in its config.yaml and done.json, and every verdict on it is `plan_changed`",
    )
    parser.add_argument(
        "--logger",
        type=parse_loggers,
        default=["csv"],
        metavar="csv,tensorboard,wandb",
        help="where the curves go besides metrics.csv, which is always written: tensorboard "
        "(<run>/tensorboard) and wandb (WANDB_MODE=offline keeps it in <run>/wandb), comma-separated; "
        "each an optional extra: pip install 'scaling-axes[tensorboard]'",
    )
    parser.add_argument(
        "--force-new",
        action="store_true",
        help="move a run directory started with other settings aside (never deleted) and start the run over",
    )
    parser.add_argument(
        "--allow-repeats",
        action="store_true",
        help="train runs that pass over their data more often "
        "than the experiment allows (their rows are marked as memorisation)",
    )
    parser.add_argument(
        "--seeds",
        type=in_range(int, 1),
        default=None,
        help="the pilot's seeds: train every run at seeds 1..SEEDS (repeats are <run>_seed<k>; default: the "
        "scale's, 3 at cpu scale, else 1); a scale with a plan trains the plan's seeds instead (--pilot: the pilot)",
    )
    parser.add_argument(
        "--pilot",
        action="store_true",
        help="where the scale has an analysis plan, train and report the pilot (sweeps, seeds 1..SEEDS) into "
        "results/<scale>/pilot/ instead of the plan's confirmatory seeds",
    )
    parser.add_argument(
        "--micro-batch",
        type=in_range(int, 1),
        help="sequences per device and pass; accumulation "
        "keeps the global batch (the data are the same however the batch is split)",
    )
    args = parser.parse_args(argv)
    args.seeds = args.seeds or experiment.seeds_at(args.scale)

    planned = None if args.pilot else (plan := training_plan(args.scale)) and plan.experiments.get(experiment.name)
    if args.list and planned is not None:
        print(f"the plan's confirmatory runs ({plan.path}, digest {plan.digest}): each arm at its fixed rate")
        for k in planned.seeds:
            for name, lr in planned.arms.items():
                run = at_plan_rate(seed_run(find_run(experiment, args.scale, name), k), lr)
                grown = f" (grown from {run.grow_from})" if run.grow_from else ""
                print(f"{run.name:36s} {run.model:24s} {run.budget.tokens:>12.3e} tokens, lr {lr}{grown}")
        return
    if args.list:
        for run in with_seeds(experiment.runs(args.scale), args.seeds):
            grown = f" (grown from {run.grow_from})" if run.grow_from else ""
            grown += " (on request: --run-name names it)" if run.on_request else ""
            if run.sweep:
                swept = (
                    f"{run.sweep.anchor}'s lr: {run.sweep.rule}"
                    if run.sweep.anchor
                    else f"lr swept from {', '.join(f'{lr:g}' for lr in run.sweep.grid)}"
                )
                grown += f" ({swept})"
            print(f"{run.name:28s} {run.model:24s} {run.budget.tokens:>12.3e} tokens{grown}")
        return
    if args.dry_run:
        devices = world_size({"devices": args.devices, "num_nodes": args.num_nodes, "accelerator": "cpu"})
        peak = args.peak_tflops or GPUS[args.gpu]
        plan = dry_run(
            experiment, args.scale, args.mfu, peak, devices, args.precision or "bf16-mixed", args.seeds, args.overhead_s
        )
        print_plan(plan, args.mfu, peak, devices, args.gpu.upper(), args.overhead_s)
        if experiment.plan_note:
            print(experiment.plan_note(args.scale))
        return
    check_directory(args.out_dir, "--out-dir")
    governing = pilot_plan(args.scale) if args.pilot else training_plan(args.scale)
    if not args.report and governing is not None and (why := governing.out_of_budget(experiment.name)):
        raise SuiteError(f"{experiment.name}: {governing.path} trains none of its runs ({why}); nothing was trained")
    if not args.report and planned is not None and not plan.analysis_commit:
        raise SuiteError(
            f"{plan.path} (digest {plan.digest}) registered no analysis_commit: its confirmatory runs trained before "
            "the recipes changed (issue 83); train --pilot, or register a new plan, before confirmatory runs"
        )
    if not args.report:
        trainer_options = {
            "accelerator": args.accelerator,
            "devices": args.devices,
            "num_nodes": args.num_nodes,
            "precision": args.precision,
            "strategy": args.strategy,
            "compile": args.compile,
            "loggers": args.logger,
            "other_kernels": args.allow_other_kernels or None,
            "other_code": args.allow_other_code or None,
            "other_plan": args.allow_other_plan or None,
        }
        # Lightning's refusal now, not after the first run's data and model
        schedule = Schedule.of(
            experiment,
            args.scale,
            args.out_dir / RUNS_DIR,
            args.force_new,
            args.allow_repeats,
            governing,
            **trainer_options,
        )
        train_runs(schedule, args)
        if args.run:
            return  # one cluster job trains one run; --report gathers them
    path = rebuild(experiment, args.scale, args.out_dir / RUNS_DIR, args.out_dir / RESULTS_DIR, pilot=args.pilot)
    print(f"wrote {path}")


def train_runs(schedule: Schedule, args: argparse.Namespace) -> None:
    """The run `--run-name` names, as one job at its own seed (a sweep point, or a repeat `<run>_seed<k>`); or every
    run: with a plan, each of its arms at each fresh seed, at the rate the plan fixed; else its sweep first (on its
    own seeds), then its claim seeds at the chosen rate, and below it where they spiked there
    (`FinishedRuns.settled_rate`)."""
    experiment, scale = schedule.experiment, schedule.scale

    def launch(run: Run) -> None:
        if args.micro_batch:
            run = dataclasses.replace(run, budget=dataclasses.replace(run.budget, micro_batch=args.micro_batch))
        schedule.train(run)

    if schedule.plan_digest and schedule.planned is None and not args.run and not args.pilot:
        print(
            f"{experiment.name}: the {scale} scale's plan trains none of its runs (its claims are outside the family)"
        )
        return
    if schedule.planned is not None:  # the plan's confirmatory runs: its arms at its fixed rates and fresh seeds
        planned = schedule.planned
        arms = [find_run(experiment, scale, name) for name in planned.arms]
        for run in (
            [find_run(experiment, scale, args.run)]
            if args.run
            else [seed_run(arm, k) for k in planned.seeds for arm in arms]
        ):
            launch(schedule.at_chosen_rate(run))
        return
    runs = [find_run(experiment, scale, args.run)] if args.run else default_runs(experiment, scale)
    chosen = [schedule.at_chosen_rate(run) for run in runs]
    for run in chosen if args.run else with_seeds(chosen, args.seeds):
        launch(run)
    for run in () if args.run else runs:
        if run.sweep is not None:
            schedule.finished_runs.settled_rate(run, args.seeds, launch)
