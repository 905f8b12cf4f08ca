"""The suite's one command line: ``python -m scaling_axes <command>`` (installed as ``scaling-axes``).

python -m scaling_axes list                                    # every experiment, one line each
python -m scaling_axes plan [--scale paper] [--gpu h100] [--mfu 0.2] [--devices 8]
python -m scaling_axes run rmt_fig2_scaling_laws --scale small  # one experiment (options: run NAME --help)
python -m scaling_axes all --scale smoke                       # every experiment, then results/REPORT.md
python -m scaling_axes report                                  # results/REPORT.md from the results CSVs
python -m scaling_axes report --scale cpu                      # a scale's claims judged again from its files
python -m scaling_axes power --scale cpu [--draft]             # the power table its plan's seeds come from
python -m scaling_axes cost --scale cpu [--measure]            # each arm's throughput; the plan priced from it
python -m scaling_axes simulate --scale cpu                    # the decision rule's error rate, by Monte Carlo
python -m scaling_axes fit --model.model tokenformer_150m ...  # LightningCLI, for runs outside the tables
python -m scaling_axes grow in.ckpt tokenformer_354m out.ckpt  # grow a checkpoint
python -m scaling_axes export runs/<experiment>/<scale>/<run> OUT  # a Hugging Face folder (transformers)
python -m scaling_axes eval | lm-eval | bench-kernels | bench-training [their own options]
python -m scaling_axes gpu-check OUT                           # everything a GPU lease should check, in one call
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from pathlib import Path

from scaling_axes.experiments import all_experiments
from scaling_axes.harness.claims.plan import plan_path, registering_path
from scaling_axes.harness.scales import PAPER, SCALES, SMOKE, Scale, in_range, scale_argument
from scaling_axes.harness.training.hardware import GPUS, MEASURED_MFU
from scaling_axes.io import SuiteError, out_of_resources, read_json

# Commands that train nothing (--help, list, plan, run --list, run --dry-run, export --help) import neither Lightning
# nor torchvision, and torch only where they need it: what trains is imported by the command that trains.

DELEGATED = {  # subcommands that parse their own arguments: module, function taking argv
    "fit": ("scaling_axes.harness.training.lightning_cli", "fit_main"),
    "grow": ("scaling_axes.harness.training.growth", "grow_checkpoint_cli"),
    "eval": ("scaling_axes.interop.evaluate", "main"),
    "lm-eval": ("scaling_axes.interop.lm_eval", "main"),
    "export": ("scaling_axes.interop.export", "main"),
    "bench-kernels": ("scaling_axes.benchmarks.kernels", "main"),
    "bench-training": ("scaling_axes.benchmarks.training", "main"),
    "bench-harness": ("scaling_axes.benchmarks.harness", "main"),
    "bench-generate": ("scaling_axes.benchmarks.generate", "main"),
    "gpu-check": ("scaling_axes.benchmarks.gpu_check", "main"),
}


def plan(scale: Scale, gpu: str, mfu: float, devices: int) -> float:
    """Print every experiment's runs (no training) and return the total GPU-hours, each shared run counted once."""
    from scaling_axes.harness.experiment.plan import dry_run, print_plan

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


def power(scale: Scale, print_draft: bool, out_dir: Path) -> None:
    """Print the power table of `scale`'s plan (`experiment.power_table`) from the pilot under `out_dir`, and with
    `print_draft` the plan's experiments part it gives; a scale without a plan or results is refused by name."""
    from scaling_axes.harness.experiment.plan_checks import checked_plan, results_dir_of
    from scaling_axes.harness.experiment.power_table import costs, draft, draft_yaml, print_power

    results_dir_of(out_dir, scale)
    plan = checked_plan(scale, out_dir, experiment_names(), draft=True, path=registering_path(scale))
    experiments = {e.name: e for e in all_experiments()}
    found = draft(plan, experiments, scale)
    print_power(plan, found, costs(found.experiments, experiments, scale))
    if print_draft:
        print(f"\n{draft_yaml(found)}")


def simulate(scale: Scale, draws: int, out_dir: Path) -> None:
    """Write `results/<scale>/simulation/size.csv` under `out_dir`: the error rate of the scale's whole decision rule
    per paper family and direction under its nulls (`claims.simulation`), and print it."""
    from scaling_axes.harness.claims.simulation import COLUMNS, size_table
    from scaling_axes.harness.experiment.plan_checks import checked_plan, results_dir_of
    from scaling_axes.io import write_csv

    results = results_dir_of(out_dir, scale)
    rows = size_table(checked_plan(scale, out_dir, experiment_names()), draws)
    path = results / scale.name / "simulation" / "size.csv"
    print(write_csv(path, COLUMNS, rows), end="")
    print(f"wrote {path}")


def cost(scale: Scale, measure: bool, named: str | None, budget: float | None) -> None:
    """Measure each arm's throughput, or price the plan from it (`experiment.cost`), in the plan's priority order
    (or `named`, comma-separated) against its budget (or `budget`)."""
    from scaling_axes.harness.claims.plan import plan_for
    from scaling_axes.harness.experiment.cost import (
        measure_into,
        price_in_order,
        print_priced,
        read_throughput,
        throughput_path,
    )

    plan = plan_for(scale, registering_path(scale), draft=True)
    by_name = {e.name: e for e in all_experiments()}
    names = named.split(",") if named else list(plan.cost.priority) if plan and plan.cost else []
    if not names or (unknown := [n for n in names if n not in by_name]):
        what = f"no experiment {unknown[0]!r}" if names else "the plan names no cost.priority"
        raise SuiteError(f"cost: {what}; name them in priority order, --experiments a,b: {', '.join(by_name)}")
    path = throughput_path(scale)
    if measure:
        print(f"wrote {path}: {measure_into(path, [by_name[n] for n in names], scale)} arms")
        return
    budget = budget or (plan.cost.budget_core_hours if plan and plan.cost else None)
    if budget is None:
        raise SuiteError("cost: the plan names no cost.budget_core_hours; pass --budget-hours")
    measured = read_throughput(path)
    pilot, ceiling = (len(plan.pilot_seeds), plan.max_seeds) if plan else (3, 20)
    priced = price_in_order([by_name[n] for n in names], scale, measured, pilot, ceiling)
    print_priced(priced, budget, pilot, ceiling)


def experiment_names() -> set[str]:
    """Every experiment's name, read from its module's text where it can be (no torch), else imported."""
    from scaling_axes.harness.experiment.listing import listed

    return {name for name, _ in listed() or ()} or {e.name for e in all_experiments()}


def report(scale: Scale | None, out_dir: Path) -> None:
    """results/REPORT.md under `out_dir` from its results CSVs; with `scale`, that scale's claims judged again by its
    plan (checked first) and its REPORT.md. A folder holding no such results is refused, with nothing written."""
    from scaling_axes.harness.experiment.plan_checks import checked_plan, results_dir_of
    from scaling_axes.harness.experiment.rejudge import rejudge_scale
    from scaling_axes.harness.experiment.report import write_report

    results = results_dir_of(out_dir, scale)
    if scale is None:
        print(f"wrote {write_report(results)}")
        return
    if scale.judges_claims and plan_path(scale).exists():
        checked_plan(scale, out_dir, experiment_names())
    print(f"wrote {rejudge_scale(scale, results)}")


def run_all(scale: Scale, report_only: bool) -> None:
    """Every experiment at `scale` (at paper scale a cluster launches runs one by one instead), then REPORT.md and
    `results/<scale>/REPORT.md`, which names the machine, the commit and how long this took."""
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.harness.experiment.report import write_report
    from scaling_axes.harness.runs import RUNS_DIR

    started = time.time()
    for experiment in all_experiments():
        print(f"== {experiment.name} ({scale})", flush=True)
        named_only = experiment.on_request and scale.judges_claims  # smoke, the pipeline check, trains it
        if named_only and not report_only:
            print(f"{experiment.name} trains only when run by name (`run {experiment.name}`); its report as it stands")
        main(experiment, ["--scale", scale.name, *(["--report"] if report_only or named_only else [])])
    print(f"wrote {write_report()}")
    dones = [
        read_json(p, "delete it and rerun the run's command to finish it again")
        for p in Path(RUNS_DIR).glob(f"*/{scale.name}/*/done.json")
        if not p.parent.is_symlink()  # a run another experiment declared identically: counted where it trained
    ]
    trained = sum(d.get("wall_seconds_last_session") or 0 for d in dones) / 60
    this_call = "reports rebuilt" if report_only else f"{(time.time() - started) / 60:.1f} minutes in this call"
    timing = f"{this_call}; the {len(dones)} runs' own wall time {trained:.1f} minutes in all (their last sessions)"
    print(f"wrote {write_report(scale=scale, header=machine_header(timing))}")


def machine_header(minutes: str) -> tuple[str, ...]:
    """Where and from what the results came: the machine, torch, the commit, the time."""
    import torch

    from scaling_axes.checkout import git, source_commit

    commit = source_commit()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {os.cpu_count()} cores"
    return (
        f"Machine: {platform.machine()} {device}; {platform.python_implementation()} "
        f"{platform.python_version()}, torch {torch.__version__}. Commit {commit}"
        f"{' with uncommitted code changes' if dirty else ''}. {time.strftime('%Y-%m-%d')}, {minutes}.",
        "",
    )


OUT_DIR_HELP = "the folder whose results/ it judges and writes beside (default: this one, the checkout)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scaling_axes",
        description=__doc__.splitlines()[0],
        epilog="Errors print as one line (exit status 2); --debug, anywhere on the line, shows their traceback.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    commands.add_parser("list", help="print the experiments")
    commands.add_parser("run", help="run one experiment; its options follow its name", add_help=False).add_argument(
        "experiment"
    )
    plan_parser = commands.add_parser("plan", help="print every experiment's runs; train nothing")
    plan_parser.add_argument("--scale", type=scale_argument, choices=SCALES.values(), default=PAPER)
    plan_parser.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    plan_parser.add_argument("--mfu", type=in_range(float, 0, 1, low_open=True), default=MEASURED_MFU)
    plan_parser.add_argument("--devices", type=in_range(int, 1), default=8)
    power_parser = commands.add_parser("power", help="the power table of a scale's plan, from its pilot; train nothing")
    power_parser.add_argument("--scale", type=scale_argument, choices=SCALES.values(), default=SCALES["cpu"])
    power_parser.add_argument("--draft", action="store_true", help="print the plan's experiments part it gives")
    power_parser.add_argument("--out-dir", type=Path, default=Path("."), help=OUT_DIR_HELP)
    simulate_parser = commands.add_parser("simulate", help="the size of a scale's decision rule, by Monte Carlo")
    simulate_parser.add_argument("--scale", type=scale_argument, choices=SCALES.values(), default=SCALES["cpu"])
    simulate_parser.add_argument("--draws", type=in_range(int, 100), default=20000)
    simulate_parser.add_argument("--out-dir", type=Path, default=Path("."), help=OUT_DIR_HELP)
    cost_parser = commands.add_parser("cost", help="measure each arm's throughput, or price a scale's plan from it")
    cost_parser.add_argument("--scale", type=scale_argument, choices=SCALES.values(), default=SCALES["cpu"])
    cost_parser.add_argument("--measure", action="store_true", help="train each arm's probe into throughput.csv")
    cost_parser.add_argument("--experiments", help="comma-separated, in priority order (default: the plan's)")
    cost_parser.add_argument("--budget-hours", type=in_range(float, 0, low_open=True), help="default: the plan's")
    all_parser = commands.add_parser("all", help="run every experiment at one scale, then write REPORT.md")
    all_parser.add_argument("--scale", type=scale_argument, choices=SCALES.values(), default=SMOKE)
    all_parser.add_argument("--report", action="store_true", help="only rebuild the tables from finished runs")
    report_parser = commands.add_parser("report", help="rebuild results/REPORT.md from the results CSVs")
    report_parser.add_argument(
        "--scale",
        type=scale_argument,
        choices=SCALES.values(),
        help="judge that scale's committed claims again by today's rules from its CSVs and "
        "per-seed files (no runs needed), then write its REPORT.md",
    )
    report_parser.add_argument("--out-dir", type=Path, default=Path("."), help=OUT_DIR_HELP)
    for name in DELEGATED:
        commands.add_parser(name, help=f"its own options: python -m scaling_axes {name} --help")
    return parser


def run_main(argv: list[str]) -> None:
    if argv and argv[0] in DELEGATED:
        module, function = DELEGATED[argv[0]]
        getattr(importlib.import_module(module), function)(argv[1:])
        return
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command != "run" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "list":
        from scaling_axes.harness.experiment.listing import listed

        named = listed() or [(e.name, e.description) for e in all_experiments()]  # from their text: no torch
        print("\n".join(f"{name:45s} {description}" for name, description in named))
    elif args.command == "plan":
        plan(args.scale, args.gpu, args.mfu, args.devices)
    elif args.command == "power":
        power(args.scale, args.draft, args.out_dir)
    elif args.command == "simulate":
        simulate(args.scale, args.draws, args.out_dir)
    elif args.command == "cost":
        cost(args.scale, args.measure, args.experiments, args.budget_hours)
    elif args.command == "all":
        run_all(args.scale, args.report)
    elif args.command == "report":
        report(args.scale, args.out_dir)
    else:
        from scaling_axes.harness.experiment.command import main

        by_name = {e.name: e for e in all_experiments()}
        if args.experiment not in by_name:
            parser.error(f"no experiment {args.experiment!r}; experiments: {', '.join(by_name)}")
        main(by_name[args.experiment], rest)


ONE_LINE = (SuiteError, KeyError, ValueError, OSError, FloatingPointError)  # what the suite raises for what a user
# gave it (a name, a file, a setting, a learning rate that makes the loss non-finite), each message naming the fix,
# and Lightning's MisconfigurationException (`one_line`); anything else is a bug: its traceback shows


def one_line(error: BaseException) -> bool:
    """Whether `error` is a user's to fix, said in one line (Lightning's class only where Lightning was imported:
    a command that never imported it cannot have raised it)."""
    lightning = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return isinstance(error, ONE_LINE) or (
        lightning is not None and isinstance(error, lightning.MisconfigurationException)
    )


def cli(argv: list[str] | None = None) -> None:
    """The command line: the suite's errors as one line on stderr, exit status 2; `--debug` (anywhere) shows the
    traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        run_main([a for a in argv if a != "--debug"])
    except SystemExit as stop:
        if debug or not isinstance(stop.code, str):
            raise  # argparse's usage errors (already exit 2) and clean exits
        _fail(stop.code)
    except Exception as error:
        resources = out_of_resources(error)
        if debug or not (resources or one_line(error)):
            raise
        _fail(resources or (error.args[0] if isinstance(error, KeyError) and error.args else str(error)))
    except KeyboardInterrupt:
        if debug:
            raise
        _fail("interrupted: what was being written was left aside, not in place; rerun the same command to go on")


def _fail(message: str) -> None:
    print(f"error: {' '.join(str(message).split())} (--debug shows the traceback)", file=sys.stderr)
    raise SystemExit(2)
