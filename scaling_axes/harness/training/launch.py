"""A run's launch, resolved once: the Trainer settings Lightning accepts (checked once per command, on a throwaway
Trainer), the precision that will run, the world size, micro-batch and accumulation, whether the model compiles,
and the fingerprint of everything that changes the result. `Launch` is the one object a run's life
(`lifecycle.train`) works on."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from scaling_axes.harness.runs import Experiment, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.io import SuiteError
from scaling_axes.modules.tasks.acceleration import default_precision, on_cuda

# the run's loggers (`loggers.build_loggers`): named and checked here, where the launch's options are
LOGGERS = ("csv", "tensorboard", "wandb")
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # logger -> the module its extra installs


def parse_loggers(text: str) -> list[str]:
    """`--logger`'s value: comma-separated names of LOGGERS; csv is always among them."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if unknown := [name for name in names if name not in LOGGERS]:
        raise SuiteError(f"unknown logger {', '.join(unknown)}: choose from {', '.join(LOGGERS)} (comma-separated)")
    return ["csv", *(name for name in names if name != "csv")]


def check_loggers(names: Sequence[str]) -> None:
    """Stop before any compute if a logger's optional extra is not installed."""
    for name in names:
        if name in EXTRAS and importlib.util.find_spec(EXTRAS[name]) is None:
            raise SuiteError(f"--logger {name} needs its extra: pip install 'scaling-axes[{name}]'")


@dataclasses.dataclass(frozen=True)
class Launch:
    """One run as it will train: where (`out`), with which settings (`options`: Lightning's and the suite's, the
    precision that runs made explicit, what config.yaml records), on how many processes in which micro-batches, and
    the fingerprint its directory must hold. Where an experiment launches it: the experiment and scale (a run
    declared identically elsewhere shares that one's directory), the source it grows from, whether a directory
    started otherwise is moved aside, and its passes over its data where they exceed the experiment's limit."""

    run: Run
    out: Path
    options: dict[str, Any]
    world_size: int
    micro_batch: int
    accumulation: int
    compile: bool | None
    fingerprint: dict[str, Any]
    experiment: Experiment | None = None
    scale: Scale | None = None
    source: tuple[Run, Path] | None = None  # (the run it grows from, its final weights, verified)
    force_new: bool = False
    data_epochs: float | None = None  # set where the run passes over its data more often than allowed
    labels: dict[str, str] = dataclasses.field(default_factory=dict)  # what the loggers name it by (experiment, scale)

    @property
    def trainer_options(self) -> dict[str, Any]:
        """The Trainer's settings as Lightning takes them (the suite's own options left out)."""
        return trainer_settings(self.options, self.world_size)

    @property
    def loggers(self) -> tuple[str, ...]:
        return tuple(self.options.get("loggers") or ("csv",))


def resolve(run: Run, out: Path, options: dict[str, Any], checked: bool = False, **where: Any) -> Launch:
    """`run`'s launch into `out` with the Trainer `options` (`checked`: already through `check_options`, once per
    command); `where`: the `Launch` fields an experiment sets. A global batch the devices cannot split stops here."""
    options = options if checked else check_options(options)
    processes = world_size(options)
    micro, accumulation = _accumulation(run, processes)
    compiled, fields = compile_by_default(run, options.get("compile")), fingerprint_fields(run, options)
    return Launch(run, Path(out), options, processes, micro, accumulation, compiled, fields, **where)


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """The launch options with the precision that will run: every refusal Lightning's settings cause (accelerator,
    devices, precision, strategy) and the loggers' extras, before anything is written."""
    resolved = resolve_options(options)
    return {**resolved, "precision": check_trainer_settings(resolved, asked=options)}


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
        count = _cuda_devices() if on_cuda(str(options.get("accelerator", "auto"))) else 1
    else:
        count = int(devices)
    return max(1, count) * int(options.get("num_nodes") or 1)


def _cuda_devices() -> int:
    import torch  # here: planning a launch on the CPU imports no torch

    return torch.cuda.device_count()


LAUNCH_FIELDS = ("world_size", "accelerator", "strategy", "compile", "kernels", "code")  # where and how it ran,
# declared
NAMES = ("run.name", "run.grow_from")  # what a run and its source are called: a run found under another name (one
# that another experiment declares identically, see `identity`) holds the same numbers


def fingerprint_fields(run: Run, options: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes a run's result: the run (preset, corpus, tokenizer, data and LanguageModel options,
    budget, seed, growth; its overrides through the resolved model config, so two experiments that share a run may
    spell them differently), the precision, the world layout (processes and micro-batch, which set the accumulation
    and so the arithmetic), and the device type, the strategy ("auto" as what Lightning makes of it) and whether the
    model is compiled: each changes the rounding, so a resume under another would not continue the same run."""
    processes = world_size(options)
    declared = {
        k: v for k, v in dataclasses.asdict(run).items() if k not in ("overrides", "lr_sweep", "on_request", "sweep")
    }
    accelerator = str(options.get("accelerator") or "auto")
    cuda = on_cuda(accelerator)
    strategy = str(options.get("strategy") or "auto")
    compiled = compile_by_default(run, options.get("compile"))
    return json.loads(
        json.dumps(
            {
                "run": declared,
                "model_config": dataclasses.asdict(run.config),
                "precision": str(options.get("precision")),
                "world_size": processes,
                "micro_batch": run.budget.micro_batch_on(processes),
                "accelerator": "cuda" if cuda else "cpu" if accelerator == "auto" else accelerator,
                "strategy": ("ddp" if processes > 1 else "single_device") if strategy == "auto" else strategy,
                "compile": cuda if compiled is None else bool(compiled),
                "kernels": kernels(cuda),
                "code": source_digest(),
            },
            default=str,
        )
    )


@functools.cache
def source_digest() -> str:
    """A digest of the suite's code as it runs: every .py file of the package, by path and bytes (a dirty tree's
    edits included), so that a resume under other code is seen whatever the commit says."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def kernels(cuda: bool) -> str:
    """Which kernels do the arithmetic: the GPU model, or the CPU instruction set ATen dispatches to
    (`ATEN_CPU_CAPABILITY`): another rounds differently, so a run resumed on it would not continue the same run."""
    import torch

    if cuda and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu {torch.backends.cpu.get_cpu_capability()}"


def fingerprint(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _accumulation(run: Run, world_size: int) -> tuple[int, int]:
    """(micro-batch, gradient accumulation) that keep the run's global batch on `world_size` devices."""
    budget = run.budget
    micro = budget.micro_batch_on(world_size)
    if budget.batch_size % (micro * world_size):
        raise ValueError(
            f"global batch {budget.batch_size} of run {run.name} is not a multiple of micro-batch {micro} x "
            f"{world_size} devices; set Budget.micro_batch to a divisor"
        )
    return micro, budget.batch_size // (micro * world_size)


SUITE_OPTIONS = (
    "compile",
    "loggers",
    "other_kernels",
    "other_code",
    "other_plan",
)  # launch options the suite takes, not the Trainer


def trainer_settings(options: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The launch's Trainer settings as Lightning takes them: unset ones left to it, "fsdp" as FSDP2 through
    `LanguageModel.configure_model` (one unit per block)."""
    from lightning.pytorch.strategies import ModelParallelStrategy  # here: planning a launch needs no Lightning

    options = {k: v for k, v in options.items() if v is not None and k not in SUITE_OPTIONS}
    if options.get("strategy") == "fsdp":
        options["strategy"] = ModelParallelStrategy(
            data_parallel_size=world_size, tensor_parallel_size=1, save_distributed_checkpoint=False
        )
    return options


def check_trainer_settings(options: dict[str, Any], asked: dict[str, Any] | None = None) -> str:
    """Stop before any compute if Lightning refuses the launch's accelerator, devices, precision or strategy (it
    checks them when a Trainer is built), naming the settings `asked` (the user's, before defaults); the precision
    Lightning will run (it replaces some it cannot: 16-mixed on the CPU runs as bf16-mixed)."""
    import lightning as L
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    check_loggers(options.get("loggers") or ())
    settings = trainer_settings(options, world_size(options))
    try:
        with _quiet_lightning():
            trainer = L.Trainer(
                **settings,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
            )
    except (MisconfigurationException, ValueError, TypeError, RuntimeError) as error:
        named = ", ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in (options if asked is None else asked).items()
            if k not in SUITE_OPTIONS and v not in (None, "auto") and (k, v) != ("num_nodes", 1)
        )
        first = (str(error).splitlines() or [""])[0]
        raise SuiteError(f"Lightning refuses these Trainer settings ({named or 'the defaults'}): {first}") from error
    return str(trainer.precision)


@contextlib.contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Lightning's "GPU available" lines once per run are enough: none for the settings check."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
