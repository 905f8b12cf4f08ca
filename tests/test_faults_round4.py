"""Issue 68's round of fault cases (the fourth), one test each, seen failing before its fix: nothing lost to a
wrong argument, a signal or another writer. The next round adds its cases here."""

import subprocess
import sys

import pytest

from tests.test_export import finished  # noqa: F401 (the module-scoped finished run the export cases read)


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
    with pytest.raises(SuiteError, match=r"holds more than an export \(notes.txt\)"):
        export(run_dir, tmp_path / "mine", replace=True)
    assert (tmp_path / "mine" / "notes.txt").exists()
    export(run_dir, tmp_path / "hf")
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # a SIGINT while the tokenizer is written

    monkeypatch.setattr(export_module, "save_tokenizer", killed)
    with pytest.raises(KeyboardInterrupt):
        export(run_dir, tmp_path / "hf", replace=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before  # the good export kept whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "mine"]  # nothing left aside
    monkeypatch.undo()
    (tmp_path / "race").mkdir()
    real_publish = export_module.publish

    def raced(aside, out, replace):  # another export fills OUT between the check and the move
        (out / "config.json").write_text("{}")
        real_publish(aside, out, replace)

    monkeypatch.setattr(export_module, "publish", raced)
    with pytest.raises(SuiteError, match="written by another export meanwhile"):
        export(run_dir, tmp_path / "race")
    assert [p.name for p in (tmp_path / "race").iterdir()] == ["config.json"]


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
