"""The shared runner: every `experiments/<paper>_<table>.py` declares an `Experiment` and calls `main`.

    python -m experiments.<name> --scale smoke|small|paper [--run RUN] [--report] [--list] [--dry-run]

A run trains into ``runs/<experiment>/<scale>/<run>/``: Lightning checkpoints, ``metrics.csv`` (CSVLogger),
``config.yaml`` (the resolved config) and ``done.json`` (final metrics). A run with ``done.json`` is never trained
again; an interrupted one resumes from ``checkpoints/last.ckpt``. ``--run RUN`` trains exactly one run (what a
cluster job launches under torchrun or srun); without it every missing run is trained in order.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from experiments.results import RESULTS_DIR, SCALES, Row, write_report, write_rows
from modules import get_config
from modules.acceleration import default_precision, on_cuda
from modules.atomic import CorruptFileError, atomic_torch_save, atomic_write, load_torch, read_json
from modules.flops import formula_params, train_flops_per_token

RUNS_DIR = Path("runs")
GPUS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "l40s": 362.0}  # dense bf16 TFLOP/s per device (vendor peak)


@dataclasses.dataclass(frozen=True)
class Budget:
    """Training budget: `steps` optimizer steps of `batch_size` sequences (global) of `seq_len` tokens."""

    steps: int
    batch_size: int
    seq_len: int
    lr: float = 6e-4
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    val_every: int | None = None  # optimizer steps between validations (None: only at the end)
    val_at_start: bool = False  # also validate the initial weights (step 0), as the MoT original did
    val_windows: int | None = None  # validation windows per evaluation (None: the whole split)
    micro_batch: int | None = None  # sequences per device and forward pass (None: batch_size / devices)
    checkpoint_every: int = 1000
    log_every: int | None = None  # optimizer steps between logged training losses (None: steps / 10, at most 50)

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.seq_len

    def micro_batch_on(self, devices: int) -> int:
        """Sequences per device and forward pass on `devices` devices: `micro_batch`, else the global batch split."""
        return self.micro_batch or max(1, self.batch_size // devices)


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run: a model preset (+ overrides), a corpus, a budget, optionally grown from another run."""

    name: str
    model: str
    budget: Budget
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    corpus: str = "embedded_news"
    tokenizer: str | None = None
    grow_from: str | None = None  # a run of the same experiment whose final weights are grown into this model
    grow_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # see experiments.grow.grow_model
    lm: dict[str, Any] = dataclasses.field(default_factory=dict)  # further LanguageModel arguments
    data: dict[str, Any] = dataclasses.field(default_factory=dict)  # further TextDataModule arguments
    seed: int = 1234  # initialisation; the data order has its own seed in the DataModule
    lr_sweep: bool = False  # a learning-rate sweep point: a non-finite loss ends it as diverged, not the experiment

    @property
    def config(self):
        return get_config(self.model, **self.overrides)

    @property
    def is_image(self) -> bool:
        """A ViT run: trained by `modules.classifier` on `datamodules.imagenet` (`data` and `lm` go to those)."""
        from modules.vit_tokenformer import ViTConfig

        return isinstance(self.config, ViTConfig)

    def train_flops(self) -> int:
        """Training FLOPs of this run alone: 3 x forward matmul FLOPs per token x tokens."""
        return train_flops_per_token(self.config, self.budget.seq_len) * self.budget.tokens


@dataclasses.dataclass(frozen=True)
class Growth:
    """A run starts from `weights`, grown from `source`'s final weights at `source_weights`."""

    weights: Path
    source: Run
    source_weights: Path


@dataclasses.dataclass(frozen=True)
class Experiment:
    """`runs(scale)` lists the runs; `report(scale, results)` turns finished runs (name -> done.json) into rows."""

    name: str
    description: str
    runs: Callable[[str], list[Run]]
    report: Callable[[str, dict[str, dict]], list[Row]]
    figure: Callable[[str, dict[str, dict], Path], None] | None = None
    plan_note: Callable[[str], str] | None = None  # printed by --list and --dry-run: how budgets were derived
    run_group: str | None = None  # experiments with the same group share their runs (trained once)


def run_dir(experiment: Experiment, scale: str, run: Run, runs_dir: Path = RUNS_DIR) -> Path:
    return Path(runs_dir) / (experiment.run_group or experiment.name) / scale / run.name


def find_run(experiment: Experiment, scale: str, name: str) -> Run:
    runs = {r.name: r for r in experiment.runs(scale)}
    if name not in runs:
        raise KeyError(f"experiment {experiment.name} has no run {name!r} at scale {scale}; runs: {', '.join(runs)}")
    return runs[name]


def load_results(experiment: Experiment, scale: str, runs_dir: Path = RUNS_DIR) -> dict[str, dict]:
    """name -> done.json of the finished runs; a broken done.json is skipped with a line saying why."""
    results = {}
    for run in experiment.runs(scale):
        done = run_dir(experiment, scale, run, runs_dir) / "done.json"
        if done.exists():
            try:
                results[run.name] = read_done(done)
            except CorruptFileError as error:
                print(f"skipping run {run.name} in the report: {error}")
    return results


def read_done(done: Path) -> dict:
    return read_json(done, f"delete it and rerun the run's command to finish it again from {done.parent}")


def report(experiment: Experiment, scale: str, runs_dir: Path = RUNS_DIR, results_dir: Path | None = None) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (and its figure) from finished runs, then REPORT.md."""
    results_dir = Path(results_dir or RESULTS_DIR)
    results = load_results(experiment, scale, runs_dir)
    path = write_rows(experiment.name, scale, experiment.report(scale, results), results_dir)
    if experiment.figure is not None:
        experiment.figure(scale, results, path.with_suffix(".png"))
    write_report(results_dir)
    return path


def memory_estimate(config: Any, micro_batch: int, seq_len: int, precision: str | None) -> float:
    """Peak training memory per device in bytes, roughly: 16 bytes per parameter (fp32 weights, gradients, Adam's
    two moments) plus activations kept for backward, about 34 x residual width values per token and layer (the
    Korthikanti et al. count with flash attention) in the compute precision, plus the fp32 logits and their gradient."""
    params = sum(formula_params(config).values())
    width = getattr(config, "residual_size", None) or getattr(config, "d_model", None) or config.embed_dim
    layers = getattr(config, "n_layer", None) or config.depth
    outputs = getattr(config, "vocab_size", None) or config.num_classes
    tokens = micro_batch * seq_len
    activation_bytes = 2 if precision and ("16" in precision) else 4
    return 16 * params + 34 * width * layers * tokens * activation_bytes + 8 * tokens * outputs


def dry_run(
    experiment: Experiment,
    scale: str,
    mfu: float,
    peak_tflops: float,
    devices: int,
    precision: str | None = "bf16-mixed",
) -> list[dict]:
    """Per run: parameters, FLOPs per token, total training FLOPs, peak memory per device for its micro-batch, and
    time and GPU-hours at `mfu` of `devices` x `peak_tflops`."""
    plan = []
    for run in experiment.runs(scale):
        config, budget = run.config, run.budget
        per_token = train_flops_per_token(config, budget.seq_len)
        flops = per_token * budget.tokens  # = run.train_flops()
        seconds = flops / (mfu * peak_tflops * 1e12 * devices)
        micro = budget.micro_batch_on(devices)
        plan.append(
            {
                "run": run.name,
                "model": run.model,
                "params": sum(formula_params(config).values()),
                "train_flops_per_token": per_token,
                "tokens": budget.tokens,
                "steps": budget.steps,
                "train_flops": flops,
                "micro_batch": micro,
                "memory_gib": memory_estimate(config, micro, budget.seq_len, precision) / 2**30,
                "hours": seconds / 3600,
                "gpu_hours": seconds * devices / 3600,
            }
        )
    return plan


def print_plan(plan: list[dict], mfu: float, peak: float, devices: int, gpu: str = "") -> None:
    width = max([len(p["run"]) for p in plan] + [3])
    print(f"{'run':{width}s} {'params':>15s} {'FLOPs/token':>12s} {'tokens':>10s} {'steps':>9s} {'FLOPs':>10s} "
          f"{'micro':>5s} {'GiB/dev':>8s} {'hours':>9s} {'GPU-h':>10s}")  # fmt: skip
    for p in plan:
        print(
            f"{p['run']:{width}s} {p['params']:>15,d} {p['train_flops_per_token']:>12.3e} {p['tokens']:>10.3e} "
            f"{p['steps']:>9,d} {p['train_flops']:>10.3e} {p['micro_batch']:>5d} {p['memory_gib']:>8.1f} "
            f"{p['hours']:>9.2f} {p['gpu_hours']:>10.1f}"
        )
    print(f"(time at {mfu:.0%} MFU of {devices} x {gpu or 'a device of'} {peak:g} TFLOP/s; training FLOPs = 3 x "
          "forward matmul FLOPs; memory: 16 B/parameter + activations, an estimate)")  # fmt: skip


def train(experiment: Experiment, scale: str, run: Run, runs_dir: Path = RUNS_DIR, force_new: bool = False,
          **trainer_options: Any) -> dict:  # fmt: skip
    """Train `run` to its budget (resuming if interrupted) and return its done.json contents. A run directory started
    with other settings stops this (see `check_fingerprint`) unless `force_new` moves it aside."""
    from experiments.training import train_run

    out = run_dir(experiment, scale, run, runs_dir)
    trainer_options = resolve_options(trainer_options)
    fields = fingerprint_fields(run, trainer_options)
    if force_new:
        move_aside(out)
    check_fingerprint(out, fields)
    if (out / "done.json").exists():
        print(f"run {run.name}: finished earlier ({out / 'done.json'}); skipped")
        return read_done(out / "done.json")
    growth = None
    if run.grow_from is not None:
        source = find_run(experiment, scale, run.grow_from)
        source_dir = run_dir(experiment, scale, source, runs_dir)
        if not (source_dir / "done.json").exists():
            train(experiment, scale, source, runs_dir, **trainer_options)
        run, growth = grown_run(source, source_dir, run, out)
    try:
        return train_run(run, out, growth, fingerprinted=fields, **trainer_options)
    except FloatingPointError as error:
        if not run.lr_sweep:
            raise
        return diverged(run, out, error)


def diverged(run: Run, out: Path, error: FloatingPointError) -> dict:
    """A sweep point whose loss went non-finite is finished: done.json says so (val_loss null) and keeps the error."""
    done = {"run": run.name, "model": run.model, "val_loss": None, "diverged": str(error),
            "train_flops": run.train_flops()}  # fmt: skip
    atomic_write(out / "done.json", json.dumps(done, indent=2))
    print(f"run {run.name} diverged (a learning-rate sweep point; recorded, the experiment goes on): {error}")
    return done


def grown_run(source: Run, source_dir: Path, run: Run, out: Path) -> tuple[Run, Growth]:
    """Grow `source`'s final weights into `run`'s model. Growth may set config fields (tau pins, Net2Net's eps):
    the returned run carries them as overrides, and both are kept in `out` so that a resumed run agrees."""

    from experiments.grow import grow_model
    from modules.lm import load_weights
    from modules.registry import build_from_config, preset_overrides

    weights, overrides = out / "init_grown.pt", out / "init_grown_overrides.json"
    if not overrides.exists():
        model = build_from_config(source.config)
        final = source_dir / "final.pt"
        load_weights(model, load_torch(final, f"delete {source_dir / 'done.json'} and rerun to retrain {source.name}"),
                     str(final))  # fmt: skip
        grown = grow_model(model, run.config, seed=run.seed, **run.grow_options)
        atomic_torch_save(grown.state_dict(), weights)
        atomic_write(overrides, json.dumps(preset_overrides(run.model, grown.config)))
    grown = dataclasses.replace(run, overrides=json.loads(overrides.read_text()))
    return grown, Growth(weights, source, source_dir / "final.pt")


def resolve_options(options: dict[str, Any]) -> dict[str, Any]:
    """Trainer options with the precision made explicit (bf16-mixed on a CUDA GPU, else 32-true), as recorded."""
    options = dict(options)
    if options.get("precision") is None:
        options["precision"] = default_precision(str(options.get("accelerator") or "auto"))
    return options


def world_size(options: dict[str, Any]) -> int:
    """Processes of a run: `devices` as Lightning takes it (an int, -1 or "auto" for all, a list or "0,1") x nodes."""
    devices = options.get("devices", "auto")
    if isinstance(devices, str) and "," in devices:
        devices = [d for d in devices.split(",") if d.strip()]
    if isinstance(devices, (list, tuple)):
        count = len(devices)
    elif devices in (None, "auto", -1, "-1"):
        count = torch.cuda.device_count() if on_cuda(str(options.get("accelerator", "auto"))) else 1
    else:
        count = int(devices)
    return max(1, count) * int(options.get("num_nodes") or 1)


def fingerprint_fields(run: Run, options: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes a run's result: the run (preset, corpus, tokenizer, data and LanguageModel options,
    budget, seed, growth; its overrides through the resolved model config, so two experiments that share a run may
    spell them differently), the precision and the world layout (processes and micro-batch, which set the
    accumulation and so the arithmetic)."""
    processes = world_size(options)
    declared = {k: v for k, v in dataclasses.asdict(run).items() if k not in ("overrides", "lr_sweep")}
    return json.loads(json.dumps({
        "run": declared, "model_config": dataclasses.asdict(run.config),
        "precision": str(options.get("precision")), "world_size": processes,
        "micro_batch": run.budget.micro_batch_on(processes)}, default=str))  # fmt: skip


def fingerprint(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def check_fingerprint(out: Path, fields: dict[str, Any]) -> None:
    """Stop if `out` holds a run started with other settings, naming each field that differs."""
    config = out / "config.yaml"
    if not config.exists():
        return
    recorded = (yaml.safe_load(config.read_text()) or {}).get("fingerprinted")
    if recorded is None or fingerprint(recorded) == fingerprint(fields):
        return  # (a run from before fingerprints: not checked)
    changes = [f"{key}: {old!r} -> {new!r}" for key, old, new in _differences(recorded, fields)]
    raise SystemExit(
        f"{out} holds a run started with other settings ({'; '.join(changes[:10])}). Rerun with its settings to "
        "resume or keep it, or pass --force-new to move it aside and start over"
    )


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new), key=str)
                for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")]  # fmt: skip
    return [] if old == new else [(prefix.rstrip("."), old, new)]


def move_aside(out: Path) -> Path | None:
    """--force-new: the old run directory is renamed, never overwritten; the run starts over in a fresh one."""
    if not out.exists():
        return None
    aside = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    out.rename(aside)
    print(f"moved the earlier run {out} aside to {aside}; starting over")
    return aside


def write_config(run: Run, out: Path, trainer_options: dict, fields: dict[str, Any] | None = None) -> None:
    fields = fields or fingerprint_fields(run, trainer_options)
    config = {
        "run": {k: v for k, v in dataclasses.asdict(run).items() if k != "budget"},
        "budget": dataclasses.asdict(run.budget),
        "model_config": dataclasses.asdict(run.config),
        "model_class": type(run.config).__name__,
        "trainer": trainer_options,
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "fingerprint": fingerprint(fields),
        "fingerprinted": fields,
    }
    atomic_write(out / "config.yaml", yaml.safe_dump(config, sort_keys=False))


def _in_range(kind: type, low: float, high: float = math.inf, low_open: bool = False) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within [low, high] (or (low, high] when `low_open`), or an error saying so."""

    def parse(text: str) -> Any:
        value = kind(text)
        if not (low < value if low_open else low <= value) or value > high or value != value:
            raise argparse.ArgumentTypeError(f"{value} is out of range {'(' if low_open else '['}{low:g}, {high:g}]")
        return value

    parse.__name__ = kind.__name__  # argparse says "invalid int value: 'two'"
    return parse


def _devices(text: str) -> str:
    """--devices as Lightning takes it: 'auto', a count (-1: all), or a comma list of device indices ('0,1')."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if text == "auto" or (len(parts) == 1 and parts[0].lstrip("-").isdigit() and int(parts[0]) >= -1 and
                          int(parts[0]) != 0) or (len(parts) > 1 and all(p.isdigit() for p in parts)):  # fmt: skip
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: use 'auto', a device count (-1 for all) or indices such as '0,1'")


def main(experiment: Experiment, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m experiments.{experiment.name}", description=experiment.description
    )
    parser.add_argument("--scale", choices=SCALES, default="smoke")
    parser.add_argument("--run", help="train exactly this run")
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    parser.add_argument("--report", action="store_true", help="only rebuild the results table from finished runs")
    parser.add_argument("--dry-run", action="store_true", help="print parameters, FLOPs and time; train nothing")
    parser.add_argument("--runs-dir", type=Path, default=RUNS_DIR)
    parser.add_argument("--mfu", type=_in_range(float, 0, 1, low_open=True), default=0.4,
                        help="assumed MFU for --dry-run, in (0, 1]")  # fmt: skip
    parser.add_argument("--gpu", choices=sorted(GPUS), default="h100", help="the GPU --dry-run prices hours on")
    parser.add_argument("--peak-tflops", type=_in_range(float, 0, low_open=True),
                        help="per device, --dry-run (default: the --gpu's bf16 peak)")  # fmt: skip
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", type=_devices, default="auto",
                        help="devices per node as Lightning takes them: 'auto', a count (-1: all), '0,1'")  # fmt: skip
    parser.add_argument("--num-nodes", type=_in_range(int, 1), default=1)
    parser.add_argument("--precision", default=None, help="Lightning precision (default: bf16-mixed on a CUDA GPU, "
                        "32-true on the CPU)")  # fmt: skip
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (default: on a CUDA GPU)")  # fmt: skip
    parser.add_argument("--strategy", default="auto", help="ddp, fsdp (one FSDP2 unit per block), or any Lightning's")
    parser.add_argument("--force-new", action="store_true", help="move a run directory started with other "
                        "settings aside (never deleted) and start the run over")  # fmt: skip
    parser.add_argument("--micro-batch", type=_in_range(int, 1), help="sequences per device and pass; accumulation "
                        "keeps the global batch (the data are the same however the batch is split)")  # fmt: skip
    args = parser.parse_args(argv)

    if args.list:
        for run in experiment.runs(args.scale):
            grown = f" (grown from {run.grow_from})" if run.grow_from else ""
            print(f"{run.name:28s} {run.model:24s} {run.budget.tokens:>12.3e} tokens{grown}")
        return
    if args.dry_run:
        devices = world_size({"devices": args.devices, "num_nodes": args.num_nodes, "accelerator": "cpu"})
        peak = args.peak_tflops or GPUS[args.gpu]
        plan = dry_run(experiment, args.scale, args.mfu, peak, devices, args.precision or "bf16-mixed")
        print_plan(plan, args.mfu, peak, devices, args.gpu.upper())
        if experiment.plan_note:
            print(experiment.plan_note(args.scale))
        return
    if not args.report:
        trainer_options = {
            "accelerator": args.accelerator,
            "devices": args.devices,
            "num_nodes": args.num_nodes,
            "precision": args.precision,
            "strategy": args.strategy,
            "compile": args.compile,
        }
        runs = [find_run(experiment, args.scale, args.run)] if args.run else experiment.runs(args.scale)
        if args.micro_batch:
            runs = [
                dataclasses.replace(r, budget=dataclasses.replace(r.budget, micro_batch=args.micro_batch)) for r in runs
            ]
        for run in runs:
            train(experiment, args.scale, run, args.runs_dir, args.force_new, **trainer_options)
        if args.run:
            return  # one cluster job trains one run; --report gathers them
    path = report(experiment, args.scale, args.runs_dir)
    print(f"wrote {path}")
