"""One GPU lease, one command: ``python -m scaling_axes gpu-check OUT`` (``make gpu-check OUT=...``).

Everything the suite runs differently on a CUDA GPU, measured and exercised in one call that fits one lease of a
bare machine (at most 9 minutes, at most 8 files in OUT). Each part runs in a process of its own under a time box
(`PARTS`, `--timeout part=seconds`), so that a part that hangs, crashes or runs long leaves its error and the others
still run:

  kernels.csv   bench-kernels: fused vs eager vs compiled Pattention and RMT sublayers, forward + backward
  training.csv  bench-training: every family, eager / compiled / fused, with the nanoGPT-style step
  paths.csv     every CUDA code path through the real runner, each with its final loss: each architecture's language
                model and the ViT under bf16-mixed + compile + kernels auto, Tokenformer and Net2Net growth, the
                lm-eval adapter on a local task, a run stopped by SIGTERM and resumed against an uninterrupted one,
                and Lightning's DDP with one process against one device
  profile.txt   torch.profiler's top kernels of the training step furthest from its target (where one is missed)
  summary.md    the GPU, driver, torch, triton and commit; each target `met` or `NOT met` by how much; each part
  log.txt       everything the parts printed

`--tiny` runs the same parts on the CPU at toy sizes (Triton interpreted, dynamo off), so that the command is proven
before a lease is spent on it; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from scaling_axes.harness.scales import in_range
from scaling_axes.io import atomic_write


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    seconds: int  # its time box on the GPU (the 9 minutes of a lease, less the machine's start)
    tiny_took: int  # seconds it took at --tiny on 2 CPU cores (a Xeon at AVX-512, alone)
    writes: str  # the file of OUT it writes

    @property
    def tiny_seconds(self) -> int:
        """Its time box at --tiny: a hang guard, never a judge of speed (a slower or busier CPU proves it too)."""
        return TINY_MARGIN * self.tiny_took


TINY_MARGIN = 10  # an AVX2 EPYC took paths past 150 s (issue 55), 3x this Xeon; a loaded machine slower again
PARTS = (
    Part("kernels", 120, 10, "kernels.csv"),
    Part("training", 200, 78, "training.csv"),
    Part("paths", 150, 50, "paths.csv"),
    Part("profile", 40, 6, "profile.txt"),
)
FILES = ("summary.md", "log.txt", *(part.writes for part in PARTS))  # what OUT holds: at most 8 files
MAX_FILES = 8


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scaling_axes gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder the files go to (created; files already there replaced)")
    parser.add_argument(
        "--tiny", action="store_true", help="toy sizes on the CPU: proves the command, measures nothing"
    )
    parser.add_argument(
        "--timeout",
        action="append",
        default=[],
        metavar="PART=SECONDS",
        type=_time_box,
        help=f"a part's time box (defaults: {', '.join(f'{p.name}={p.seconds}' for p in PARTS)}; at --tiny "
        f"{', '.join(f'{p.name}={p.tiny_seconds}' for p in PARTS)})",
    )
    parser.add_argument(
        "--after",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="an earlier call's folder (a lease that ran out; repeatable, a later folder's rows over an earlier's): "
        "what it measured is kept, the rest measured",
    )
    parser.add_argument("--part", choices=[p.name for p in PARTS], help=argparse.SUPPRESS)  # one part, in-process
    args = parser.parse_args(argv)
    for earlier in args.after:
        if not any((earlier / part.writes).exists() for part in PARTS):
            parser.error(f"--after {earlier}: no earlier call's files there ({', '.join(FILES[2:])})")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part:
        run_part(args.part, args.out, args.tiny, args.after)
        return
    boxes = {part.name: part.tiny_seconds if args.tiny else part.seconds for part in PARTS} | dict(args.timeout)
    outcomes = {part.name: launch(part, args.out, boxes[part.name], args.tiny, args.after) for part in PARTS}
    path = write_summary(args.out, outcomes, args.tiny, args.after)
    print(path.read_text())


def _time_box(text: str) -> tuple[str, int]:
    name, _, seconds = text.partition("=")
    if name not in {p.name for p in PARTS}:
        raise argparse.ArgumentTypeError(f"{name!r} is no part; the parts: {', '.join(p.name for p in PARTS)}")
    return name, in_range(int, 1)(seconds)


def launch(part: Part, out: Path, seconds: int, tiny: bool, after: Sequence[Path] = ()) -> str:
    """Run `part` in a process of its own for at most `seconds`, appending what it prints to log.txt; its outcome
    in words ("finished in N s", "timed out after N s", "failed (exit N): last line")."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if tiny:
        env.update(TRITON_INTERPRET="1", TORCHDYNAMO_DISABLE="1")
    command = [
        sys.executable,
        "-m",
        "scaling_axes",
        "gpu-check",
        str(out),
        "--part",
        part.name,
        *(["--tiny"] if tiny else []),
        *(arg for earlier in after for arg in ("--after", str(earlier))),
    ]
    started = time.monotonic()
    with open(out / "log.txt", "a") as log:
        log.write(f"\n===== {part.name} (time box {seconds} s)\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its compile workers too
            process.wait()
            return f"timed out after {seconds} s"
    took = time.monotonic() - started
    if code:
        return f"failed (exit {code}) after {took:.0f} s: {_last_line(out / 'log.txt')}"
    return f"finished in {took:.0f} s"


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(nothing printed)"


def run_part(name: str, out: Path, tiny: bool, after: Sequence[Path] = ()) -> None:
    """One part, in this process, keeping what the earlier calls `after` measured."""
    from scaling_axes.benchmarks import gpu_paths, kernels, training
    from scaling_axes.benchmarks.common import kept_rows

    if tiny:
        kernels.use_toy_sizes()
        training.use_toy_sizes()
        gpu_paths.use_toy_sizes()
    repeats = ["--repeats", "1" if tiny else "20"]
    keep = {
        f: [arg for earlier in after for arg in ("--keep", str(earlier / f))] for f in ("kernels.csv", "training.csv")
    }
    parts: dict[str, Callable[[], object]] = {
        "kernels": lambda: kernels.main(["--out", str(out / "kernels.csv"), *repeats, *keep["kernels.csv"]]),
        "training": lambda: training.main(["--out", str(out / "training.csv"), *repeats, *keep["training.csv"]]),
        "paths": lambda: gpu_paths.main(
            out / "paths.csv", kept_rows([a / "paths.csv" for a in after], gpu_paths.row_key)
        ),
        "profile": lambda: training.profile_missed(out / "training.csv", out / "profile.txt"),
    }
    parts[name]()


def write_summary(out: Path, outcomes: dict[str, str], tiny: bool, after: Sequence[Path] = ()) -> Path:
    """summary.md: where it ran, each target met or not and by how much, each part's outcome, each code path."""
    from scaling_axes.benchmarks import kernels, training_targets
    from scaling_axes.io import read_rows

    kernel_rows = [
        {**r, "median_ms": float(r["median_ms"]) if r.get("median_ms") else None}
        for r in read_rows(out / "kernels.csv")
    ]
    training_rows, paths = training_targets.numeric(read_rows(out / "training.csv")), read_rows(out / "paths.csv")
    targets = [*kernels.targets(kernel_rows), *training_targets.targets(training_rows), _paths_target(paths)]
    title = "# GPU check" + (" (--tiny: toy sizes on the CPU; the numbers mean nothing)" if tiny else "")
    lines = [
        title,
        "",
        *_where(kernel_rows or training_rows),
        "",
        "## Targets",
        "",
        *(f"- {t}" for t in targets),
        "",
        "## Parts",
        "",
        *(f"- {name}: {outcome}" for name, outcome in outcomes.items()),
        *(
            [f"- kept from {', '.join(map(str, after))} (earlier calls), not measured again: {_kept(after)}"]
            if after
            else []
        ),
        "",
        "## Code paths",
        "",
        *map(_path_line, paths),
        "",
        "## A powered small-scale run",
        "",
        *powered_small_scale(),
        "",
    ]
    atomic_write(out / "summary.md", "\n".join(lines))
    extra = sorted(p.name for p in out.iterdir() if p.name not in FILES)
    if len(FILES) > MAX_FILES or extra:
        raise SystemExit(f"{out} holds files the lease does not return: {', '.join(extra)}")
    return out / "summary.md"


def _kept(after: Sequence[Path]) -> str:
    """How many rows the parts keep from the earlier calls `after`, each counted once by its part's key."""
    from scaling_axes.benchmarks import gpu_paths, kernels, training
    from scaling_axes.benchmarks.common import kept_rows

    keys = {"kernels.csv": kernels.row_key, "training.csv": training.row_key, "paths.csv": gpu_paths.row_key}
    return ", ".join(f"{len(kept_rows([a / f for a in after], key))} rows of {f}" for f, key in keys.items())


def powered_small_scale() -> list[str]:
    """What the plan's seeds would take at small scale, per paper: the cpu scale's plan being registered (the
    pending one where there is one, as `power --scale cpu` reads it), sized on its pilot (each in-family claim's
    seeds for power 0.8), its arms priced on one H100 at the measured MFU with their evaluations
    (`power_table.costs`), so that a lease says what a powered small-scale run costs before one is asked for."""
    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.claims.plan import read_plan, registering_path
    from scaling_axes.harness.experiment.power_table import costs, draft, paper_costs
    from scaling_axes.harness.scales import CPU
    from scaling_axes.harness.training.hardware import MEASURED_MFU

    try:
        plan, experiments = read_plan(registering_path(CPU), draft=True), {e.name: e for e in all_experiments()}
        found = draft(plan, experiments, CPU)
        totals = paper_costs(plan, found, costs(found.experiments, experiments, CPU))
    except (OSError, ValueError, KeyError) as error:  # the pilot or the plan missing: said, the summary still written
        return [f"- not priced: {type(error).__name__}: {error}"[:300]]
    return [
        f"- {name}: {_price(t)}, the {'/'.join(Path(plan.path).parts[-2:])} plan's seeds at {MEASURED_MFU:.1%} MFU"
        for name, t in totals.items()
    ]


def _price(total: dict) -> str:
    paper = total["paper_gpu_hours"]
    low, high = total["tokens_per_parameter"]
    at_paper = "not priced: its runs are named otherwise there" if math.isnan(paper) else f"{paper:.4g}"
    return (
        f"{total['small_gpu_hours']:.3g} H100-hours at small scale ({total['small_eval_gpu_hours']:.2g} of them "
        f"evaluating {total['small_eval_tokens']:.3g} tokens; training {low:.3g}-{high:.3g} tokens per non-embedding "
        f"parameter; paper scale: {at_paper})"
    )


def _path_line(path: dict) -> str:
    loss = f", final loss {float(path['val_loss']):.4f}" if path.get("val_loss") else ""
    more = "".join(f"; {path[key]}" for key in ("detail", "error") if path.get(key))
    return f"- {path['path']}: {path['status']}{loss}{more}"


def _paths_target(paths: list[dict]) -> str:
    failed = [p["path"] for p in paths if p["status"] != "ok"]
    if not paths:
        return "every CUDA code path finishes with a finite loss: NOT met (no path ran)"
    verdict = "met" if not failed else f"NOT met ({len(failed)} of {len(paths)}: {', '.join(failed)})"
    return f"every CUDA code path finishes with a finite loss: {verdict}"


def _where(rows: list[dict]) -> list[str]:
    """The machine and the versions: from the parts' rows (the GPU) and from here (nothing here touches CUDA)."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    driver = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
        if _has_nvidia_smi()
        else "none"
    )
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
        ).stdout.strip()
        or "unknown"
    )
    gpu = next((r.get("gpu") for r in rows if r.get("gpu")), "unknown (no part reported one)")
    return [
        f"- GPU: {gpu}; driver {driver or 'unknown'}",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"triton {triton_version}, Python {platform.python_version()}",
        f"- commit {commit}",
    ]


def _has_nvidia_smi() -> bool:
    return any(Path(p, "nvidia-smi").exists() for p in os.environ.get("PATH", "").split(os.pathsep))
