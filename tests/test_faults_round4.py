"""Issue 68's round of fault cases (the fourth), one test each, seen failing before its fix: nothing lost to a
wrong argument, a signal or another writer. The next round adds its cases here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_export import finished  # noqa: F401 (the module-scoped finished run the export cases read)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("option", ["--run-name", "--out-dir"])
def test_an_empty_run_name_or_out_dir_is_refused_by_name(option, tmp_path):
    """Case 2: `--run-name ''` trained the whole experiment and exited 0; `--out-dir ''` meant the working
    directory. Both now stop in argparse's one line naming the option."""
    command = [sys.executable, "-m", "scaling_axes", "run", "rmt_table10_variants", "--scale", "smoke", option, ""]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and f"argument {option}: is empty" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_export_deletes_nothing_it_did_not_write_and_appears_whole_or_not_at_all(finished, tmp_path, monkeypatch):  # noqa: F811
    """Issue 68, cases 1, 4 and 6: OUT holding the run it exports (with --replace it deleted every run of the
    experiment) and a folder holding more than an export are refused, the run intact; an export that fails while it
    writes leaves OUT as it was and nothing aside; one that finds OUT written meanwhile says so, leaving the winner."""
    import scaling_axes.interop.export as export_module
    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError

    _, run_dir = finished
    for out in (run_dir.parent, run_dir.parent.parent.parent):  # the experiment's scale folder, the runs root
        with pytest.raises(SuiteError, match="holds the run directory"):
            export(run_dir, out, replace=True)
    assert (run_dir / "done.json").exists() and (run_dir / "final.safetensors").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a researcher's own file")
    with pytest.raises(SuiteError, match="holds no export manifest"):
        export(run_dir, tmp_path / "mine", replace=True)
    assert (tmp_path / "mine" / "notes.txt").exists()
    export(run_dir, tmp_path / "hf")
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # a SIGINT while the tokenizer is written

    monkeypatch.setattr(export_module, "save_tokenizer", killed)
    with pytest.raises(SystemExit, match="hf is as it was"):
        export(run_dir, tmp_path / "hf", replace=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before  # the good export kept whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "mine"]  # nothing left aside
    monkeypatch.undo()
    (tmp_path / "race").mkdir()
    real_save_tokenizer = export_module.save_tokenizer

    def raced(tokenizer, folder, window):  # another export fills OUT while this one writes
        (tmp_path / "race" / "config.json").write_text("{}")
        real_save_tokenizer(tokenizer, folder, window)

    monkeypatch.setattr(export_module, "save_tokenizer", raced)
    with pytest.raises(SuiteError, match="written by another export meanwhile"):
        export(run_dir, tmp_path / "race")
    assert [p.name for p in (tmp_path / "race").iterdir()] == ["config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "mine", "race"]  # nothing left aside


def test_a_sweep_point_off_the_declared_grid_is_refused_by_name_and_never_read(tmp_path):
    """Case 3: `--run-name transformer_125m_sweep_lr0.05` trained a point off the grid, which then moved the sweep's
    next point to 0.1667; a planted `_sweep_lr0` stopped every report with ZeroDivisionError. A point off the grid
    (or past the sweep's draws) is now refused by name, and a directory of one is never read."""
    from scaling_axes.experiments.cross_architecture.table import EXPERIMENT
    from scaling_axes.harness.experiment.finished import FinishedRuns
    from scaling_axes.harness.runs import find_run
    from scaling_axes.harness.scales import SMOKE
    from scaling_axes.harness.sweeps import declared_rates, rate
    from scaling_axes.harness.training.rundir import write_done

    run = find_run(EXPERIMENT, SMOKE, "transformer_125m")
    grid = [rate(lr) for lr in run.sweep.grid]
    assert find_run(EXPERIMENT, SMOKE, f"transformer_125m_sweep_lr{grid[1]:g}").budget.lr == grid[1]
    for name in (
        "transformer_125m_sweep_lr0.05",
        "transformer_125m_sweep_lr0",
        f"transformer_125m_sweep_lr{grid[0]:g}_draw9",
    ):
        with pytest.raises(KeyError, match=r"is not a point of transformer_125m's sweep: its rates are"):
            find_run(EXPERIMENT, SMOKE, name)
    assert set(grid) < declared_rates(run.sweep, lambda anchor: None) and 0.05 not in declared_rates(run.sweep, None)
    on_disk = FinishedRuns(EXPERIMENT, SMOKE, tmp_path)
    for planted in ("transformer_125m_sweep_lr0.05", "transformer_125m_sweep_lr0"):
        write_done(on_disk.run_dir(run).parent / planted, {"run": planted, "diverged": True})  # read without weights
    assert on_disk.sweep_points(run) == {}
    assert on_disk.tuning(run).next == grid[0]  # the sweep starts on its grid, as if nothing were there
    command = [sys.executable, "-m", "scaling_axes", "run", "cross_architecture", "--scale", "smoke"]
    done = subprocess.run(
        [*command, "--run-name", "transformer_125m_sweep_lr0.05", "--out-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "is not a point of transformer_125m's sweep" in done.stderr
    assert not (tmp_path / "out" / "runs").exists()


def test_a_link_planted_in_a_run_directory_stops_the_run_before_it_writes(tmp_path):
    """Case 5: with `hparams.yaml` replaced by a link to a file elsewhere, training overwrote that file (Lightning's
    CSV logger opens it plainly). A run now stops before its first write if anything in its directory is a link,
    naming it; the file it pointed to is untouched."""
    from scaling_axes.harness.training.lifecycle import train_run
    from scaling_axes.io import SuiteError
    from tests.test_run_safety import tiny

    victim, out = tmp_path / "someone_elses.yaml", tmp_path / "runs" / "r"
    victim.write_text("precious\n")
    (out / "checkpoints").mkdir(parents=True)
    (out / "hparams.yaml").symlink_to(victim)
    with pytest.raises(SuiteError, match=r"hparams.yaml is a link \(to .*someone_elses.yaml\).*remove the link"):
        train_run(tiny(2), out, accelerator="cpu")
    assert victim.read_text() == "precious\n" and sorted(p.name for p in out.iterdir()) == [
        "checkpoints",
        "hparams.yaml",
    ]


FILE_SIZE_LIMITED = """
import resource, sys, torch
from pathlib import Path
from scaling_axes.io import atomic_save_safetensors, atomic_torch_save

resource.setrlimit(resource.RLIMIT_FSIZE, (2**16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))  # ulimit -f 64
for save, name in ((atomic_save_safetensors, "w.safetensors"), (atomic_torch_save, "w.pt")):
    try:
        save({"w": torch.zeros(2**16)}, Path(sys.argv[1]) / name)
    except OSError as error:
        print(str(error))
"""


def test_the_resources_class_is_one_line_naming_what_ran_out_and_where(tmp_path):
    """Cases 8 and 9: an allocation failure (`ulimit -v`; a CUDA out-of-memory error is the same class) printed a
    traceback; a file-size limit (EFBIG) was reported as a full disk; a full disk while tokenizing and running out of
    file descriptors named no file. Each is now one line naming what ran out and where."""
    import errno

    import numpy as np
    import torch

    from scaling_axes.datamodules.corpora import _write_tokens
    from scaling_axes.io import out_of_resources

    with pytest.raises(RuntimeError) as allocation:
        torch.empty(2**60, dtype=torch.uint8)  # an exabyte: torch's own allocation failure, as under `ulimit -v`
    for error in (allocation.value, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")):
        assert out_of_resources(error).startswith("ran out of memory"), error  # (round 5: torch's ImportError)
    assert out_of_resources(RuntimeError("shape mismatch")) is None
    descriptors = OSError(errno.EMFILE, "Too many open files", "/data/wiki/train.bin")
    assert out_of_resources(descriptors) == (
        "ran out of file descriptors at /data/wiki/train.bin (Too many open files): raise the limit (ulimit -n), "
        "then rerun"
    )

    def full_disk():
        yield np.arange(10)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        _write_tokens(tmp_path / "train.bin", full_disk(), np.uint16)
    assert out_of_resources(raised.value) == (
        f"could not write at {tmp_path / 'train.bin'} (No space left on device): free space on its device, then rerun"
    )
    assert list(tmp_path.iterdir()) == []  # its temporary file gone
    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMITED, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("File too large" in line and "ulimit -f" in line for line in lines), done
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written left


def test_what_a_user_gave_wrong_is_one_line(tmp_path, monkeypatch, capsys):
    """Case 8: `grow` of an architecture that cannot grow (TypeError), `fit --ckpt_path evil.pt` (UnpicklingError:
    only `.ckpt` names were verified) and Ctrl-C printed tracebacks; case 9: SCALING_AXES_DATA set to a file gave
    `[Errno 17] File exists`, set empty it tokenized into the working directory; weights were written 0600."""
    import shlex
    import stat

    import torch

    from scaling_axes import cli
    from scaling_axes.harness.training.lightning_cli import verify_resumed
    from scaling_axes.io import SuiteError, default_data_root
    from scaling_axes.modules import build_model, get_config
    from scaling_axes.modules.registry import architecture_of
    from tests.test_run_safety import Pwned

    highway = get_config("highway_transformer_191m", n_layer=1, d_model=32, n_head=2)
    with pytest.raises(ValueError, match="TransformerVariant cannot grow; these can:"):
        architecture_of(highway).grow_model(
            build_model("highway_transformer_191m", n_layer=1, d_model=32, n_head=2), highway
        )
    marker, evil = tmp_path / "pwned", tmp_path / "evil.pt"
    torch.save({"x": Pwned(marker)}, evil)
    with pytest.raises(SuiteError, match=r"evil\.pt"):
        verify_resumed(str(evil))
    assert not marker.exists()
    (tmp_path / "afile").write_text("")
    for value, said in ((str(tmp_path / "afile"), "is a file"), ("", "is empty"), ("  ", "is empty")):
        monkeypatch.setenv("SCALING_AXES_DATA", value)
        with pytest.raises(SuiteError, match=f"SCALING_AXES_DATA {said}"):
            default_data_root()
    monkeypatch.delenv("SCALING_AXES_DATA")

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_main", interrupted)
    with pytest.raises(SystemExit) as stop:
        cli.cli(["list"])
    assert stop.value.code == 2 and capsys.readouterr().err.startswith("error: interrupted")
    for umask in (0o022, 0o002):  # weights as a plain open makes a file, whatever the umask (safetensors: 0600)
        path = tmp_path / f"final{umask:o}.safetensors"
        save = f"import torch, scaling_axes.io as io; io.atomic_save_safetensors({{'w': torch.ones(2)}}, {str(path)!r})"
        umasked = f"umask {umask:03o} && exec {sys.executable} -c {shlex.quote(save)}"
        assert subprocess.run(["bash", "-c", umasked], cwd=ROOT).returncode == 0
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, oct(umask)


@pytest.mark.slow  # exports under a signal and ulimit -f, a process each
def test_a_signal_or_a_file_size_limit_during_export_leaves_out_as_it_was_and_says_so(finished, tmp_path, monkeypatch):  # noqa: F811
    """Case 6: SIGTERM left config.json and weights without a tokenizer, silently, and the same command was then
    refused; a file-size limit left a SafetensorError traceback and a folder without weights. Now SIGTERM ends the
    export through its cleanup with one line, and a file-size limit is one line naming the limit; OUT is as it was
    and nothing is left beside it (an export killed outright leaves its folder aside, removed by the next one where
    it carries the export's marker: round 5)."""
    import os
    import signal

    import scaling_axes.interop.export as export_module
    from scaling_axes.interop.export import export

    _, run_dir = finished
    out = tmp_path / "hf"

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(export_module, "save_tokenizer", terminated)
    with pytest.raises(SystemExit, match=r"export interrupted: .*hf is as it was"):
        export(run_dir, out)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    export(run_dir, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    command = [sys.executable, "-m", "scaling_axes", "export", str(run_dir), str(tmp_path / "limited")]
    done = subprocess.run(
        ["bash", "-c", 'ulimit -f 64 && exec "$@"', "_", *command], capture_output=True, text=True, timeout=300
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "File too large" in done.stderr and "ulimit -f" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no OUT made, nothing aside


TRAIN_STAGE = """
import sys
from pathlib import Path

from scaling_axes.harness.training.lifecycle import train_run
from tests.test_run_safety import _stop_at, tiny

out, stage = Path(sys.argv[1]), sys.argv[2]
callbacks = [_stop_at(3)] if stage == "start" else []
allowed = {"other_kernels": True} if stage == "allow-kernels" else {"other_code": True} if stage == "allow-code" else {}
print(train_run(tiny(6), out, extra_callbacks=callbacks, accelerator="cpu", **allowed)["steps"])
"""


def train_stage(out: Path, stage: str, env: dict | None = None, code: Path = ROOT) -> subprocess.CompletedProcess:
    """One stage of a run in its own process, as a job and its requeue are (`start`: stopped at step 3 by SIGTERM;
    `resume`; `allow-kernels` / `allow-code`: resumed with that allowance), importing the suite from `code`."""
    env = {
        "SCALING_AXES_DATA": str(ROOT / "data"),
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join(map(str, (code, ROOT))),
    }
    command = [sys.executable, "-c", TRAIN_STAGE, str(out), stage]  # run outside ROOT, which -c would import first
    return subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # three training processes under two kernel sets
def test_a_resume_on_other_kernels_is_refused_naming_both_unless_allowed_and_recorded(tmp_path):
    """Case 7: a run stopped at step 3 under one CPU instruction set (ATEN_CPU_CAPABILITY) resumed on another with
    no word, and its weights matched neither uninterrupted run; the fingerprint recorded the device type only. The
    kernels (the GPU model, or the CPU's instruction set) are now in it: a resume on others stops in one line naming
    both, unless `--allow-other-kernels`, which the run's config.yaml records."""
    import torch
    import yaml

    here = torch.backends.cpu.get_cpu_capability()
    if here == "DEFAULT":
        pytest.skip("this CPU dispatches to ATen's default kernels only: there is no other set to resume on")
    out = tmp_path / "r"
    started = train_stage(out, "start", {"ATEN_CPU_CAPABILITY": "default"})
    assert "rerun the same command to resume" in started.stderr, started.stderr[-2000:]
    refused = train_stage(out, "resume")
    assert refused.returncode != 0 and f"kernels: 'cpu DEFAULT' -> 'cpu {here}'" in refused.stderr
    assert "--allow-other-kernels" in refused.stderr
    done = train_stage(out, "allow-kernels")
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "6", done.stderr[-2000:]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["trainer"]["other_kernels"] is True and config["fingerprinted"]["kernels"] == f"cpu {here}"


def test_held_every_torch_load_of_the_suite_is_weights_only():
    """Held in the round, kept: each `torch.load` call in the package passes `weights_only=True`, so no file it
    reads can run code (`io.load_torch` is where they go; a new call must say so too)."""
    import ast
    from pathlib import Path

    import scaling_axes

    calls = []
    for path in Path(scaling_axes.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
                calls.append((path.name, node.lineno, keywords.get("weights_only")))
    assert calls and all(weights_only == "True" for *_, weights_only in calls), calls


def test_held_a_final_weights_file_swapped_for_a_link_is_caught_by_its_digest(tmp_path):
    """Held in the round, kept: a run's final.safetensors replaced by a link to another run's weights is refused by
    everything that reads a finished run (its checksum and the digest config.json binds it to)."""
    from scaling_axes.harness.training.rundir import read_done
    from scaling_axes.io import CorruptFileError
    from tests.test_export import SHAPE, _finished_run

    _, mine = _finished_run(tmp_path / "a", "transformer_124m", SHAPE, "bytes")
    _, other = _finished_run(tmp_path / "b", "transformer_124m", {**SHAPE, "n_layer": 1}, "bytes")
    (mine / "final.safetensors").unlink()
    (mine / "final.safetensors").symlink_to(other / "final.safetensors")
    with pytest.raises(CorruptFileError, match=r"final\.safetensors"):
        read_done(mine / "done.json")
