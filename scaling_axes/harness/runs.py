"""Runs and where they live: `Budget`, `Run`, `Experiment`, and a run directory's bookkeeping (its fingerprint,
config.yaml and done.json).

A run trains into ``runs/<experiment>/<scale>/<run>/`` under the output root (the working directory, or
``--out-dir``): Lightning checkpoints, ``metrics.csv`` (CSVLogger), ``config.yaml`` (the resolved config) and
``done.json`` (final metrics). A run with ``done.json`` is never trained again; an interrupted one resumes from
``checkpoints/last.ckpt``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from scaling_axes.datamodules.corpora import train_tokens
from scaling_axes.harness.results import Row
from scaling_axes.harness.scales import Scale, get_scale
from scaling_axes.harness.sweeps import STABLE_INFIX, SWEEP_INFIX, Sweep, is_rate, parse_point, stable_run, sweep_point
from scaling_axes.io import CorruptFileError, atomic_write, verify_checksum
from scaling_axes.modules import get_config
from scaling_axes.modules.architectures.vit_tokenformer import ViTConfig
from scaling_axes.modules.flops import train_flops_per_token
from scaling_axes.modules.tasks.acceleration import default_precision, on_cuda

RUNS_DIR = Path("runs")


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


def within_epochs(budget: Budget, corpus: str, tokenizer: str | None, epochs: float) -> Budget:
    """`budget` cut to at most `epochs` passes over `corpus`'s training tokens: fewer steps, with the warmup,
    validation and checkpoint intervals in proportion; unchanged when it fits, or when `corpus` is on disk but not
    yet prepared (its size is unknown until then; the epoch guard checks the run once it is)."""
    try:
        tokens, _ = train_tokens(corpus, tokenizer)
    except FileNotFoundError:
        return budget
    steps = min(budget.steps, int(epochs * tokens / (budget.batch_size * budget.seq_len)))
    if steps == budget.steps:
        return budget
    if steps < 10:
        raise ValueError(f"{corpus} ({tokens:,} tokens) holds fewer than 10 steps of {budget.batch_size} x "
                         f"{budget.seq_len} in {epochs:g} epochs; use a smaller batch or a bigger corpus")  # fmt: skip

    def scaled(interval: int | None) -> int | None:
        return None if interval is None else max(1, interval * steps // budget.steps)

    return dataclasses.replace(budget, steps=steps, warmup_steps=scaled(budget.warmup_steps) or 0,
                               val_every=scaled(budget.val_every), checkpoint_every=scaled(budget.checkpoint_every),
                               log_every=scaled(budget.log_every))  # fmt: skip


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
    grow_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # see scaling_axes.harness.grow.grow_model
    lm: dict[str, Any] = dataclasses.field(default_factory=dict)  # further LanguageModel arguments
    trainer: dict[str, Any] = dataclasses.field(default_factory=dict)  # Trainer settings (gradient_clip_val: 1.0)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)  # further TextDataModule arguments
    seed: int = 1234  # initialisation, and the data order unless `data` names a seed of its own
    lr_sweep: bool = False  # a learning-rate sweep point: a non-finite loss ends it as diverged, not the experiment
    sweep: Sweep | None = None  # trained at the rate this sweep chooses, not budget.lr (`harness.sweeps`)
    on_request: bool = False  # trained only when named (`--run`): another reading of the paper, not the default

    @property
    def config(self):
        return get_config(self.model, **self.overrides)

    @property
    def classifies_images(self) -> bool:
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
    """`runs(scale)` lists the runs (fitted to their corpora by the harness, see `fitted`); `report(scale, results)`
    turns finished runs (name -> done.json) into rows."""

    name: str
    description: str
    runs: Callable[[Scale], list[Run]]
    report: Callable[[Scale, dict[str, dict]], list[Row]]
    figure: Callable[[Scale, dict[str, dict], Path], None] | None = None
    plan_note: Callable[[Scale], str] | None = None  # printed by --list and --dry-run: how budgets were derived
    run_group: str | None = None  # experiments with the same group share their runs (trained once)
    max_epochs: float = 1.0  # passes over a run's training data allowed wherever passes are checked (the paper's own
    # repeats where it repeats data); more measures memorisation and needs --allow-repeats
    seeds: Callable[[Scale], int | None] | None = None  # seeds its claims need at a scale (None: the scale's)
    on_request: bool = False  # where claims are judged, trained by `run <name>` only and `all` reports it (a
    # diagnosis, no paper's table)

    def seeds_at(self, scale: Scale) -> int:
        """The seeds trained by default: the experiment's own at this scale, else the scale's."""
        return (self.seeds and self.seeds(scale)) or scale.seeds

    def __post_init__(self) -> None:
        if not getattr(self.runs, "fitted", False):
            object.__setattr__(self, "runs", fitted(self.runs))


def fitted(declare: Callable[[Scale], list[Run]]) -> Callable[[Scale | str], list[Run]]:
    """An experiment's declaration of its runs as the harness trains them: the scale parsed, and at a scale that
    `fits_budgets` each budget fitted to its corpus (`fit_to_corpora`), here and nowhere else. Decorate the module's
    `runs` with it where its report reads the runs again, so that both see the same budgets."""

    @functools.wraps(declare)
    def runs(scale: Scale | str) -> list[Run]:
        scale = get_scale(scale)
        declared = declare(scale)
        return fit_to_corpora(declared, scale.min_epoch_limit) if scale.fits_budgets else declared

    runs.fitted = True
    return runs


def fit_to_corpora(runs: list[Run], epochs: float) -> list[Run]:
    """Each language-model run's budget cut to `epochs` passes over its corpus (`within_epochs`); runs of a growth
    chain are left as their experiment fitted them, since the chain's passes add up (`progressive.scale_spec`)."""
    chained = {run.name for run in runs if run.grow_from} | {run.grow_from for run in runs if run.grow_from}
    return [run if run.name in chained or run.classifies_images else
            dataclasses.replace(run, budget=within_epochs(run.budget, run.corpus, run.tokenizer, epochs))
            for run in runs]  # fmt: skip


SEED_SUFFIX = "_seed"  # a run's repeat at its k-th seed is `<run>_seed<k>` (k >= 2; the run itself is seed 1)


SEED_RULE = "one sweep per model and budget: seed 1's"


def seed_run(run: Run, k: int) -> Run:
    """`run` at its k-th seed: initialisation and data order shifted by k - 1 (a data seed of its own too, as the
    MoT runs pin theirs), grown from its source's k-th seed, at the rate seed 1's sweep chose (a sweep of its own
    would train on seed k - 1, a claim's seed)."""
    if k == 1:
        return run
    grow_from = None if run.grow_from is None else f"{run.grow_from}{SEED_SUFFIX}{k}"
    data = {**run.data, "seed": run.data["seed"] + k - 1} if "seed" in run.data else run.data
    sweep = run.sweep and dataclasses.replace(run.sweep, anchor=run.name, rule=SEED_RULE, check=False, scale=1.0)
    return dataclasses.replace(run, name=f"{run.name}{SEED_SUFFIX}{k}", seed=run.seed + k - 1, grow_from=grow_from,
                               data=data, sweep=sweep)  # fmt: skip


def with_seeds(runs: list[Run], seeds: int) -> list[Run]:
    """`runs` at seeds 1..`seeds`, seed by seed (a grown run after its source at the same seed)."""
    return [seed_run(run, k) for k in range(1, seeds + 1) for run in runs]


def default_runs(experiment: Experiment, scale: Scale) -> list[Run]:
    """The runs an experiment trains when none is named: all but those trained `on_request`."""
    return [run for run in experiment.runs(scale) if not run.on_request]


def run_dir(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR) -> Path:
    return Path(runs_dir) / (experiment.run_group or experiment.name) / scale.name / run.name


def find_run(experiment: Experiment, scale: Scale, name: str) -> Run:
    runs = {r.name: r for r in experiment.runs(scale)}
    swept, _, point = name.rpartition(SWEEP_INFIX)
    if swept in runs and runs[swept].sweep and (lr_draw := parse_point(point)) is not None:
        return sweep_point(runs[swept], *lr_draw)
    settled, _, rest = name.rpartition(STABLE_INFIX)  # <run>_stable_lr<x>(_seed<k>): claim seeds below a sweep
    lr, _, k = rest.partition(SEED_SUFFIX) if settled in runs and runs[settled].sweep else ("", "", "")
    if is_rate(lr) and (not k or (k.isdigit() and int(k) >= 2)):
        return seed_run(stable_run(runs[settled], float(lr)), int(k or 1))
    base, _, k = name.rpartition(SEED_SUFFIX)
    if name not in runs and base in runs and k.isdigit() and int(k) >= 2:
        return seed_run(runs[base], int(k))
    if name not in runs:
        raise KeyError(f"experiment {experiment.name} has no run {name!r} at scale {scale}; runs: {', '.join(runs)} "
                       f"(and each at seed k >= 2 as <run>{SEED_SUFFIX}<k>; a swept run's claim seeds below its "
                       f"sweep's choice as <run>{STABLE_INFIX}<lr>)")  # fmt: skip
    return runs[name]


# torch.compile costs tens of seconds per model and saved 24 ms a step on an H100 (Transformer-405M, 118 -> 94 ms,
# issue 23): it pays off from a few thousand steps; most of the ~70 s per short run seen at small scale (issue 22)
# was likely compiling (inferred, not timed)
COMPILE_MIN_STEPS = 2000


def compile_by_default(run: Run, compile: bool | None) -> bool | None:
    """`compile` as asked; unasked (None), a run shorter than COMPILE_MIN_STEPS trains eager, a longer one compiles on
    a CUDA GPU."""
    return False if compile is None and run.budget.steps < COMPILE_MIN_STEPS else compile


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


LAUNCH_FIELDS = ("world_size", "accelerator", "strategy", "compile")  # where and how it ran, not what was declared
NAMES = ("run.name", "run.grow_from")  # what a run and its source are called: a run found under another name (one
# that another experiment declares identically, see `identity`) holds the same numbers


def fingerprint_fields(run: Run, options: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes a run's result: the run (preset, corpus, tokenizer, data and LanguageModel options,
    budget, seed, growth; its overrides through the resolved model config, so two experiments that share a run may
    spell them differently), the precision, the world layout (processes and micro-batch, which set the accumulation
    and so the arithmetic), and the device type, the strategy ("auto" as what Lightning makes of it) and whether the
    model is compiled: each changes the rounding, so a resume under another would not continue the same run."""
    processes = world_size(options)
    declared = {k: v for k, v in dataclasses.asdict(run).items()
                if k not in ("overrides", "lr_sweep", "on_request", "sweep")}  # fmt: skip
    accelerator = str(options.get("accelerator") or "auto")
    cuda = on_cuda(accelerator)
    strategy = str(options.get("strategy") or "auto")
    compiled = compile_by_default(run, options.get("compile"))
    return json.loads(json.dumps({
        "run": declared, "model_config": dataclasses.asdict(run.config),
        "precision": str(options.get("precision")), "world_size": processes,
        "micro_batch": run.budget.micro_batch_on(processes),
        "accelerator": "cuda" if cuda else "cpu" if accelerator == "auto" else accelerator,
        "strategy": ("ddp" if processes > 1 else "single_device") if strategy == "auto" else strategy,
        "compile": cuda if compiled is None else bool(compiled)}, default=str))  # fmt: skip


def identity(experiment: Experiment, scale: Scale, run: Run, options: dict[str, Any]) -> str:
    """What makes two declared runs one: their fingerprint without the names (`NAMES`), a grown run's with its
    source's identity in place of the source's name. Two experiments that declare the same run share it."""
    fields = fingerprint_fields(run, options)
    del fields["run"]["name"], fields["run"]["grow_from"]
    if run.grow_from:
        fields["source"] = identity(experiment, scale, find_run(experiment, scale, run.grow_from), options)
    return fingerprint(fields)


def fingerprint(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def read_config(out: Path) -> dict:
    """`out`'s config.yaml, verified against its checksum, or an error naming it and the fix when it is damaged,
    edited or not the mapping the suite writes."""
    path, fix = out / "config.yaml", "restore it, or pass --force-new to move the run aside and start over"
    verify_checksum(path, fix)
    try:
        config = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        first = str(error).splitlines()[0]
        raise CorruptFileError(f"{path} is not readable YAML ({first}); {fix}") from error
    if not isinstance(config, dict) or not isinstance(config.get("fingerprinted", {}), dict):
        raise CorruptFileError(f"{path} is not a run's config.yaml (no mapping of its settings); {fix}")
    return config


def fingerprint_changes(out: Path, fields: dict[str, Any]) -> list[str]:
    """The fields (`field: old -> new`) in which the run in `out` was started with other settings than `fields`;
    fields it did not record (it predates them) are not compared, nor is a run from before fingerprints, nor one that
    never reached a checkpoint (a launch stopped before training, by its data or its cluster: nothing of it is
    kept, so its config.yaml is replaced)."""
    if not (out / "config.yaml").exists() or not ((out / "checkpoints" / "last.ckpt").exists()
                                                   or (out / "done.json").exists()):  # fmt: skip
        return []
    recorded = read_config(out).get("fingerprinted") or {}
    return recorded_differences(recorded, fields)


def check_fingerprint(out: Path, fields: dict[str, Any]) -> None:
    """Stop if `out` holds a run started with other settings, naming each field that differs."""
    if changes := fingerprint_changes(out, fields):
        raise SystemExit(
            f"{out} holds a run started with other settings ({'; '.join(changes[:10])}). Rerun with its settings "
            "to resume or keep it, or pass --force-new to move it aside and start over"
        )


def recorded_differences(recorded: dict, now: dict) -> list[str]:
    """`field: recorded -> now` for each recorded field that differs now, names aside (`NAMES`)."""
    differences = _differences(recorded, {key: now.get(key) for key in recorded})
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in differences if key not in NAMES]


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new), key=str)
                for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")]  # fmt: skip
    return [] if old == new else [(prefix.rstrip("."), old, new)]


def move_aside(out: Path, changes: list[str]) -> Path | None:
    """--force-new: the old run directory (started with other settings: `changes`) is renamed, never overwritten;
    the run starts over in a fresh one."""
    if not out.exists():
        return None
    aside = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    out.rename(aside)
    print(f"moved the earlier run {out} ({'; '.join(changes[:3])}) aside to {aside}; starting over")
    return aside


CHECKOUT = Path(__file__).parent.parent


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
    atomic_write(out / "config.yaml", yaml.safe_dump(config, sort_keys=False), checksum=True)
