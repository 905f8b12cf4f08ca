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
