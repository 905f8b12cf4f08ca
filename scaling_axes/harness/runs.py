"""What an experiment declares: `Budget`, `Run`, `Experiment`; a run's repeats at further seeds (named by
`names`), its budget fitted to its corpus and its passes over it, and where it lives.

A run trains into ``runs/<experiment>/<scale>/<run>/`` under the output root (the working directory, or
``--out-dir``): Lightning checkpoints, ``metrics.csv``, ``config.yaml`` (the resolved config), the final weights and
``done.json`` (`training.lifecycle`). A run with ``done.json`` is never trained again; an interrupted one resumes
from ``checkpoints/last.ckpt``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scaling_axes.datamodules.corpora import train_tokens
from scaling_axes.harness.names import (
    SEED_SUFFIX,
    STABLE_INFIX,
    parse_seed,
    parse_stable,
    parse_sweep,
    rate,
    seed_name,
    sweep_name,
)
from scaling_axes.harness.results import Row
from scaling_axes.harness.scales import Scale, get_scale
from scaling_axes.harness.sweeps import Sweep, at_scale_sweep, declared_rates, stable_run, sweep_point, tuned
from scaling_axes.modules import get_config
from scaling_axes.modules.configs.vit_tokenformer_config import ViTConfig
from scaling_axes.modules.flops import train_flops_per_token

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
        raise ValueError(
            f"{corpus} ({tokens:,} tokens) holds fewer than 10 steps of {budget.batch_size} x "
            f"{budget.seq_len} in {epochs:g} epochs; use a smaller batch or a bigger corpus"
        )

    def scaled(interval: int | None) -> int | None:
        return None if interval is None else max(1, interval * steps // budget.steps)

    return dataclasses.replace(
        budget,
        steps=steps,
        warmup_steps=-(-budget.warmup_steps * steps // budget.steps),  # up: never a smaller share of the run
        val_every=scaled(budget.val_every),
        checkpoint_every=scaled(budget.checkpoint_every),
        log_every=scaled(budget.log_every),
    )


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
    grow_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # see `training.growth.grow_model`
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


def passes(run: Run) -> tuple[float, str]:
    """(passes `run` makes over its training split, what the data and the ask are, in words)."""
    return _image_passes(run) if run.classifies_images else _text_passes(run)


def _text_passes(run: Run) -> tuple[float, str]:
    tokens, how = train_tokens(run.corpus, run.tokenizer)
    asked = run.budget.tokens
    return asked / tokens, f"{run.corpus} ({tokens:,} training tokens, {how}; the run asks {asked:,})"


def _image_passes(run: Run) -> tuple[float, str]:
    from scaling_axes.datamodules.image_counts import EMBEDDED_TRAIN_IMAGES, IMAGENET_TRAIN_IMAGES

    embedded = run.data.get("source", "embedded") == "embedded"
    images = EMBEDDED_TRAIN_IMAGES if embedded else IMAGENET_TRAIN_IMAGES
    seen = run.budget.steps * run.budget.batch_size
    name = "the embedded digits" if embedded else "ImageNet-1k"
    return seen / images, f"{name} ({images:,} training images; the run asks {seen:,})"


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
    comparisons: Callable[[Scale], list[Any]] | None = None  # its claims' arms, each one recipe (`Comparison`)
    small_plan_minutes: float = 20.0  # what its small plan may take on one H100 at the measured MFU, sweeps included:
    # a quarter hour's order; a comparison's grows with its arms, by its recipe's rule

    def seeds_at(self, scale: Scale) -> int:
        """The seeds trained by default: the experiment's own at this scale, else the scale's."""
        return (self.seeds and self.seeds(scale)) or scale.seeds

    def __post_init__(self) -> None:
        if not getattr(self.runs, "fitted", False):
            object.__setattr__(self, "runs", fitted(self.runs))


def fitted(declare: Callable[[Scale], list[Run]]) -> Callable[[Scale | str], list[Run]]:
    """An experiment's declaration of its runs as the harness trains them: the scale parsed, at a scale that
    `fits_budgets` each budget fitted to its corpus (`fit_to_corpora`), and each sweep held to the scale's cap
    (`at_scale`), here and nowhere else. Decorate the module's `runs` with it where its report reads the runs
    again, so that both see the same budgets."""

    @functools.wraps(declare)
    def runs(scale: Scale | str) -> list[Run]:
        scale = get_scale(scale)
        declared = [at_scale(run, scale) for run in declare(scale)]
        return fit_to_corpora(declared, scale.min_epoch_limit) if scale.fits_budgets else declared

    runs.fitted = True
    return runs


def at_scale(run: Run, scale: Scale) -> Run:
    """`run` with its sweep as the scale's sweeps go (`sweeps.at_scale_sweep`)."""
    if run.sweep is None:
        return run
    return dataclasses.replace(run, sweep=at_scale_sweep(run.sweep, scale.sweep_cap))


def fit_to_corpora(runs: list[Run], epochs: float) -> list[Run]:
    """Each language-model run's budget cut to `epochs` passes over its corpus (`within_epochs`); runs of a growth
    chain are left as their experiment fitted them, since the chain's passes add up (`progressive.scale_spec`)."""
    chained = {run.name for run in runs if run.grow_from} | {run.grow_from for run in runs if run.grow_from}
    return [
        run
        if run.name in chained or run.classifies_images
        else dataclasses.replace(run, budget=within_epochs(run.budget, run.corpus, run.tokenizer, epochs))
        for run in runs
    ]


SEED_RULE = "one sweep per model and budget: seed 1's"


def seed_run(run: Run, k: int) -> Run:
    """`run` at its k-th seed: initialisation and data order shifted by k - 1 (a data seed of its own too, as the
    MoT runs pin theirs), grown from its source's k-th seed, at the rate seed 1's sweep chose (a sweep of its own
    would train on seed k - 1, a claim's seed)."""
    if k == 1:
        return run
    grow_from = None if run.grow_from is None else seed_name(run.grow_from, k)
    data = {**run.data, "seed": run.data["seed"] + k - 1} if "seed" in run.data else run.data
    sweep = run.sweep and dataclasses.replace(run.sweep, anchor=run.name, rule=SEED_RULE, check=False, scale=1.0)
    return dataclasses.replace(
        run, name=seed_name(run.name, k), seed=run.seed + k - 1, grow_from=grow_from, data=data, sweep=sweep
    )


def at_plan_rate(run: Run, lr: float | None) -> Run:
    """`run` at a rate fixed before its seeds train (a plan's; None: the rate it declares), its sweep dropped: no
    seed of it tunes anything."""
    return dataclasses.replace(run if lr is None else tuned(run, rate(lr)), sweep=None)


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
    swept = parse_sweep(name)
    if swept and swept[0] in runs and runs[swept[0]].sweep:
        check_sweep_point(experiment, scale, runs[swept[0]], *swept[1:])
        return sweep_point(runs[swept[0]], *swept[1:])
    settled = parse_stable(name)
    if settled and settled[0] in runs and runs[settled[0]].sweep:
        return seed_run(stable_run(runs[settled[0]], settled[1]), settled[2])
    base, k = parse_seed(name)
    if name not in runs and base in runs and k >= 2:
        return seed_run(runs[base], k)
    if name not in runs:
        raise KeyError(
            f"experiment {experiment.name} has no run {name!r} at scale {scale}; runs: {', '.join(runs)} "
            f"(and each at seed k >= 2 as <run>{SEED_SUFFIX}<k>; a swept run's claim seeds below its "
            f"sweep's choice as <run>{STABLE_INFIX}<lr>)"
        )
    return runs[name]


def check_sweep_point(experiment: Experiment, scale: Scale, run: Run, lr: float, draw: int) -> None:
    """Refuse a point `run`'s sweep cannot train (a name typed by hand, a directory planted): it would steer the
    sweep off its declared grid, or stop it (a rate of 0)."""
    rates = declared_rates(run.sweep, lambda anchor: find_run(experiment, scale, anchor).sweep)
    if rate(lr) not in rates or not 1 <= draw <= run.sweep.draws:
        allowed = ", ".join(f"{each:g}" for each in sorted(rates))
        raise KeyError(
            f"{sweep_name(run.name, lr, draw)} is not a point of {run.name}'s sweep: its rates are {allowed} "
            f"(draws 1-{run.sweep.draws}); the sweep names its points itself, train the run by its own name"
        )


def growth_chain(run: Run, by_name: dict[str, Run]) -> list[Run]:
    """`run` and every run it was grown from, newest first."""
    runs = [run]
    while runs[-1].grow_from:
        runs.append(by_name[runs[-1].grow_from])
    return runs
