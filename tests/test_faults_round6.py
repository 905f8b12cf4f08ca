"""Issue 81's round of fault cases (the sixth), one test each, seen failing before its fix: commands write only
where their results live; an earlier export aside is never lost; every plan a run trained under is kept; a verdict
comes from the raw values alone; a plan is checked before it is believed; malformed manifests, markers and
per-seed files are one line naming the file."""

import contextlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from scaling_axes.cli import cli
from tests.test_export import finished  # noqa: F401 (the module-scoped finished run the export cases read)
from tests.test_faults_round4 import ROOT
from tests.test_faults_round5 import _rewritten, _seed_rows, killed_between_renames, snapshot

MARKER = ".scaling_axes_aside"
TABLE4 = "rmt_table3_4_resources"  # Table 4's paper-protocol claim: planned, its seeds trained
TABLE4_ROW = "rmt_305m_vs_transformer_rmt_405m"


def _command(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The command line run from `cwd` in this process (issue 82: no interpreter of its own to start): `cli`, with its
    one-line errors and exit status, as a subprocess would see them."""
    out, err, code = io.StringIO(), io.StringIO(), 0
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli(list(args))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _one_line(done: subprocess.CompletedProcess) -> str:
    errors = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return errors[0]


def _cpu_copy(tmp_path: Path) -> Path:
    """A folder holding a copy of the committed cpu results (and the pilot under it), as a checkout does."""
    shutil.copytree(ROOT / "results" / "cpu", tmp_path / "results" / "cpu")
    return tmp_path


# 1. Commands write only where their results live


@pytest.mark.parametrize(
    "args", [("report", "--scale", "cpu"), ("report",), ("power", "--scale", "cpu"), ("simulate", "--scale", "cpu")]
)
def test_a_command_run_in_a_folder_without_results_refuses_and_writes_nothing(args, tmp_path):
    """Case 1: `report --scale cpu` in an empty folder wrote a made-up report ("6 insufficient") judged on nothing,
    exit 0; `power` printed "0.00 CPU-hours". Each now refuses in one line naming the folder, with nothing written."""
    line = _one_line(_command(tmp_path, *args))
    assert f"under {tmp_path.resolve()}: run from the checkout, or name it with --out-dir" in line
    assert list(tmp_path.iterdir()) == []


def test_a_report_the_suite_did_not_write_is_never_overwritten(tmp_path):
    """Case 1: `report --scale cpu` overwrote a user's own results/REPORT.md and results/cpu/REPORT.md. The suite's
    reports open with its marker line; any other file at that path is refused by name, and nothing is written."""
    root = _cpu_copy(tmp_path)
    for mine in (root / "results" / "REPORT.md", root / "results" / "cpu" / "REPORT.md"):
        saved = mine.read_bytes() if mine.exists() else None
        mine.write_text("# My own notes on these results\n")
        before = snapshot(root)
        line = _one_line(_command(root, "report", "--scale", "cpu"))
        assert f"{mine.relative_to(root)} is not a report this suite wrote" in line
        assert snapshot(root) == before
        mine.unlink() if saved is None else mine.write_bytes(saved)
    done = _command(tmp_path, "report", "--scale", "cpu")  # the suite's own reports: rewritten, same bytes
    assert done.returncode == 0, done.stderr[-2000:]
    assert (root / "results" / "cpu" / "REPORT.md").read_bytes() == (ROOT / "results/cpu/REPORT.md").read_bytes()


def test_out_dir_names_where_the_results_are(tmp_path):
    """Case 1: from elsewhere, `--out-dir` names the folder whose results are judged; nothing is written where the
    command runs."""
    root, elsewhere = _cpu_copy(tmp_path / "checkout"), tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _command(elsewhere, "report", "--scale", "cpu", "--out-dir", str(root))
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(elsewhere.iterdir()) == [] and (root / "results" / "REPORT.md").exists()


# 2. Asides that are never lost


@pytest.mark.slow  # an export SIGKILLed in a process of its own
def test_an_earlier_export_aside_is_kept_when_out_was_made_again_by_hand(finished, tmp_path, capsys):  # noqa: F811
    """Case 2: a SIGKILL between `--replace`'s renames left the earlier export aside; the user made OUT again by
    hand, and the next export deleted the earlier one (15 files). It is now kept, and the line names where."""
    from scaling_axes.interop.export import export

    _, run_dir = finished
    hf = tmp_path / "hf"
    earlier = killed_between_renames(run_dir, hf)
    hf.mkdir()  # made again by hand
    capsys.readouterr()
    export(run_dir, tmp_path / "hf2")
    export(run_dir, hf)  # the empty OUT takes the new export
    said = capsys.readouterr().out
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".hf.replaced")]
    assert len(aside) == 1 and snapshot(aside[0] / "previous") == earlier
    assert f"kept aside: {aside[0] / 'previous'}" in said


# 3. Every plan a run trained under, kept


def test_a_resume_under_another_plan_stops_naming_both_and_every_plan_is_kept(tmp_path):
    """Case 3: a plan edited while a claim run was interrupted left no trace: the resume went on, and config.yaml and
    done.json named only the new digest, so `plan_changed` never fired. A resume under another plan now stops naming
    both; allowed on, both are recorded, and the per-seed file's `plan` row carries both, so the row is
    `plan_changed`."""
    from scaling_axes.harness.claims.blocks import PLAN_CHANGED
    from scaling_axes.harness.training.lifecycle import train_run
    from tests.test_run_safety import _stop_at, tiny

    out = tmp_path / "r"
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        train_run(tiny(6), out, extra_callbacks=[_stop_at(3)], labels={"plan": "aaaa"}, accelerator="cpu")
    with pytest.raises(SystemExit, match="trained under analysis plan aaaa, and the plan now is bbbb"):
        train_run(tiny(6), out, labels={"plan": "bbbb"}, accelerator="cpu")
    done = train_run(tiny(6), out, labels={"plan": "bbbb"}, accelerator="cpu", other_plan=True)
    assert done["plans"] == ["aaaa", "bbbb"]
    assert yaml.safe_load((out / "config.yaml").read_text())["plans"] == ["aaaa", "bbbb"]
    assert json.loads((out / "done.json").read_text())["plans"] == ["aaaa", "bbbb"]
    assert _blocked_by({"r": done}, "bbbb")[1].startswith(f"{PLAN_CHANGED}: r trained under plan aaaa")


def _blocked_by(results: dict, digest: str) -> tuple[str, str]:
    """What `blocks.blocked` says of a row on run `r` whose per-seed `plan` row is written from `results`."""
    from scaling_axes.harness.claims.blocks import blocked
    from scaling_axes.harness.claims.observed import Experiment, Observed
    from scaling_axes.harness.experiment.seeds import run_rows
    from scaling_axes.harness.stability import Thresholds

    (written,) = [r for r in run_rows(results, []) if r["kind"] == "plan"]
    seed = int(written["seed"])
    row = Observed("x", "t/r", 0, "s", "nats/token", ("r",), {seed: 0.1}, {}, "", {})
    plan = type("Plan", (), {"digest": digest})()
    ex = Experiment("x", [], [], [row], {"r": {seed: {}}}, {"r": {seed: written["value"]}})
    return blocked(row, ex, [seed], plan, Thresholds())


# 4. Verdicts from raw values alone


def _edited_seeds(root: Path, edit) -> Path:
    from scaling_axes.io import atomic_write

    path = root / "results" / "cpu" / "seeds" / f"{TABLE4}.csv"
    atomic_write(path, _rewritten([edit(r) for r in _seed_rows(path)]), checksum=True)  # digest written to match
    return path


def test_a_margin_edited_with_its_digest_is_refused_naming_the_row_and_both_values(tmp_path):
    """Case 3: a per-seed file's margins edited (+0.5 each) and its digest recomputed flipped Table 4's primary
    claim from claim_fails to claim_holds, though the arm values in the same file contradict it. Margins are now
    recomputed from the arms' values; one that disagrees refuses the file, naming the row and both values."""
    root = _cpu_copy(tmp_path)

    def shifted(r: dict) -> dict:
        return {**r, "value": f"{float(r['value']) + 0.5:.9g}"} if r["kind"] == "claim" else r

    _edited_seeds(root, shifted)
    before = snapshot(root)
    line = _one_line(_command(root, "report", "--scale", "cpu"))
    assert f"claim {TABLE4_ROW} seed 4's margin is 0.382967234 in the file but -0.11703276 from" in line
    assert snapshot(root) == before


def test_an_arm_value_that_is_not_its_runs_own_is_refused(tmp_path):
    """Case 3, the arms' values too: moved to agree with an edited margin, they disagree with the run's own row."""
    root = _cpu_copy(tmp_path)

    def moved(r: dict) -> dict:
        if r["kind"] == "arm" and r["run"] == "rmt_305m":
            return {**r, "value": f"{float(r['value']) - 0.5:.9g}"}
        return {**r, "value": f"{float(r['value']) + 0.5:.9g}"} if r["kind"] == "claim" else r

    _edited_seeds(root, moved)
    line = _one_line(_command(root, "report", "--scale", "cpu"))
    assert (
        "arm rmt_305m seed 4 val_loss is 3.56186771 under claim" in line and "but 4.06186771 as the run's own" in line
    )


def test_a_stored_held_status_is_never_a_verdict(tmp_path):
    """Case 3: setting an evidence row's `held` to claim_holds made that the row's verdict, beside an interval wholly
    below zero. A stored status is read only as a reason a row is not tested; a verdict there refuses the file."""
    root = _cpu_copy(tmp_path)

    def holds(r: dict) -> dict:
        return {**r, "value": "claim_holds"} if r["kind"] == "evidence" and r["metric"] == "held" else r

    _edited_seeds(root, holds)
    line = _one_line(_command(root, "report", "--scale", "cpu"))
    assert "held is 'claim_holds'; a stored status only says why a row is not tested" in line


# 5. A plan checked before it is believed


def _plan(tmp_path: Path, monkeypatch, edit) -> Path:
    """The committed cpu plan, edited by `edit` (its parsed YAML), as the plan `plan_path` gives."""
    from scaling_axes import cli
    from scaling_axes.harness.claims import plan as plan_module
    from scaling_axes.harness.experiment import plan_checks

    data = yaml.safe_load(plan_module.plan_path("cpu").read_text())
    edit(data)
    path = tmp_path / "plans" / "cpu.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for module in (plan_module, plan_checks, cli):
        monkeypatch.setattr(module, "plan_path", lambda scale: path)
    _no_pending(monkeypatch, tmp_path)
    return path


def _no_pending(monkeypatch, tmp_path: Path) -> None:
    """No registration pending: `power` reads the plan in force, as it does once the pending one is in force."""
    from scaling_axes.harness.claims import plan as plan_module

    monkeypatch.setattr(plan_module, "pending_path", lambda scale: tmp_path / "no-pending.yaml")


def _first_claim(data: dict) -> dict:
    return data["papers"]["rmt"][0]


PLAN_FAULTS = {
    "unknown experiment": (
        lambda d: _first_claim(d).update(experiment="rmt_fig2_scaling_lawz"),
        "claim rmt_fig2_equal_flops.experiment: 'rmt_fig2_scaling_lawz' is no experiment of the suite",
    ),
    "unknown row": (
        lambda d: _first_claim(d)["rows"].append("fig2/rmt_999m_vs_transformers"),
        "claim rmt_fig2_equal_flops.rows: 'fig2/rmt_999m_vs_transformers' is in no table of rmt_fig2_scaling_laws",
    ),
    "alpha 0": (lambda d: d.update(alpha=0), "cpu.yaml: alpha: 0 is outside (0, 0.5]"),
    "alpha text": (lambda d: d.update(alpha="0.025"), "cpu.yaml: alpha: a number, not '0.025'"),
    "power 1": (lambda d: d.update(power=1), "cpu.yaml: power: 1 is outside (0, 1)"),
    "sigma_confidence 1": (lambda d: d.update(sigma_confidence=1.0), "sigma_confidence: 1.0 is outside [0.5, 1)"),
    "claim twice": (
        lambda d: d["papers"]["rmt"].append(dict(_first_claim(d), rows=["fig2/rmt_46m_vs_transformers_again"])),
        "claim id 'rmt_fig2_equal_flops' is given twice",
    ),
    "no pilot": (lambda d: d.update(pilot="results/cpu/pilotx"), "pilot 'results/cpu/pilotx' is no folder under"),
}


@pytest.mark.parametrize("fault", PLAN_FAULTS)
@pytest.mark.parametrize("command", ["report", "power", "simulate"])
def test_a_plan_is_checked_before_it_is_believed(fault, command, tmp_path, monkeypatch):
    """Case 4: a claim naming an experiment or row the suite does not have ended quietly `insufficient`; `alpha: 0`
    sized every claim at 0% power; a missing pilot folder went unnoticed. Each is one line at load, naming the file
    and the field, for report, power and simulate alike."""
    from scaling_axes.cli import run_main
    from scaling_axes.io import SuiteError

    edit, said = PLAN_FAULTS[fault]
    _plan(tmp_path, monkeypatch, edit)
    root = _cpu_copy(tmp_path / "checkout")
    before = snapshot(root)
    with pytest.raises(SuiteError) as refused:
        run_main([command, "--scale", "cpu", "--out-dir", str(root), *(["--draws", "100"] * (command == "simulate"))])
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(root) == before


@pytest.mark.parametrize("missing", ["table", "per-seed file"])
def test_a_missing_pilot_table_is_refused(missing, tmp_path, monkeypatch):
    """Case 4: a missing pilot table went unnoticed: `report` exited 0 without the pilot's intervals, and `power`
    printed "0.00 CPU-hours". The pilot's table and per-seed file of each in-family claim's experiment must be there."""
    _no_pending(monkeypatch, tmp_path)
    root = _cpu_copy(tmp_path)
    pilot = root / "results" / "cpu" / "pilot83"
    (pilot / ("" if missing == "table" else "seeds") / f"{TABLE4}.csv").unlink()
    for command in ("report", "power"):
        line = _one_line(_command(root, command, "--scale", "cpu"))
        assert f"pilot results/cpu/pilot83 lacks {TABLE4}'s table or per-seed file" in line


@pytest.mark.parametrize("target", ["/dev/zero", "outside", "large"])
def test_a_plan_that_is_no_committed_file_is_refused_before_it_is_read(target, tmp_path):
    """Case 4: a plan file linked to /dev/zero was read until memory ran out ("train a smaller micro-batch"). A
    plan must be a regular file of bounded size, never a link out of the checkout."""
    from scaling_axes.harness.claims.plan import PlanError, read_plan

    path = tmp_path / "cpu.yaml"
    if target == "large":
        path.write_text("# " + "x" * (1 << 21))
        said = "2,097,154 bytes, over the 1,048,576 a plan may have"
    else:
        outside = Path(target) if target == "/dev/zero" else tmp_path / "outside.yaml"
        if target == "outside":
            outside.write_text("scale: cpu\n")
        path.symlink_to(outside)
        said = "a link out of the checkout"
    with pytest.raises(PlanError, match=said):
        read_plan(path)


# 6. Malformed manifests, markers and per-seed files


@pytest.mark.parametrize(
    "files", [None, [], "README.md", {"a": 1}, "deep"], ids=["null", "list", "string", "digest-number", "deep"]
)
def test_a_malformed_manifest_is_one_line_naming_it(files, finished, tmp_path):  # noqa: F811
    """Case 5: an export manifest whose `files` was null, a list or a string, or nested 200,000 deep, printed a
    TypeError or RecursionError traceback (a string was even read as a set of names). Now one line naming it."""
    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError

    _, run_dir = finished
    hf = tmp_path / "hf"
    export(run_dir, hf)
    manifest = hf / "scaling_axes_export.json"
    text = '{"files": ' + "[" * 200_000 + "]" * 200_000 + "}" if files == "deep" else json.dumps({"files": files})
    manifest.write_text(text)
    before = snapshot(tmp_path)
    with pytest.raises(SuiteError, match=f"{manifest}: .*it is not what an export wrote") as refused:
        export(run_dir, hf, replace=True)
    assert "\n" not in str(refused.value) and snapshot(tmp_path) == before


@pytest.mark.parametrize("pid", [None, 2**70, [1], "abc", -1], ids=["null", "huge", "list", "text", "negative"])
def test_a_malformed_marker_beside_out_is_one_line_naming_it_and_how_to_clear_it(pid, finished, tmp_path):  # noqa: F811
    """Case 5: a marker beside OUT whose pid was null, 2^70 or a list printed a traceback; "abc" gave a line naming
    no file; every export to that folder failed until someone found it. Now one line naming the marker and how to
    clear it; cleared, the export goes on."""
    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError

    _, run_dir = finished
    stale = tmp_path / ".hf.exportzzz"
    stale.mkdir()
    (stale / MARKER).write_text(json.dumps({"pid": pid, "out": "hf", "kind": "export"}))
    with pytest.raises(SuiteError, match=f"{stale / MARKER}: its pid .* is not a process id") as refused:
        export(run_dir, tmp_path / "hf")
    assert f"remove {stale} once you have checked it holds nothing of yours" in str(refused.value)
    assert not (tmp_path / "hf").exists()
    shutil.rmtree(stale)
    export(run_dir, tmp_path / "hf")


@pytest.mark.parametrize("encoding", ["bom", "crlf"])
def test_a_per_seed_file_with_a_byte_order_mark_is_named_as_such_and_crlf_reads_the_same(encoding, tmp_path):
    """Case 5: a per-seed file starting with a byte-order mark was refused as "line 2: not a whole row". A BOM is now
    named as such; a file with CRLF line ends reads as the same rows (the same verdicts)."""
    from scaling_axes.io import atomic_write

    root = _cpu_copy(tmp_path)
    path = root / "results" / "cpu" / "seeds" / f"{TABLE4}.csv"
    text = path.read_text()
    atomic_write(path, "\ufeff" + text if encoding == "bom" else text.replace("\n", "\r\n"), checksum=True)
    done = _command(root, "report", "--scale", "cpu")
    if encoding == "bom":
        assert "starts with a byte-order mark, which the suite never writes" in _one_line(done)
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        table = f"results/cpu/{TABLE4}.csv"
        assert (root / table).read_bytes() == (ROOT / table).read_bytes()


def test_a_report_written_before_the_marker_is_still_the_suites(tmp_path):
    """Case 1's other side: a report the suite wrote before its reports carried the marker (an earlier smoke run's)
    opens with the suite's own lines and is rebuilt, not refused; it then carries the marker."""
    from scaling_axes.harness.experiment.report_files import MARKER

    root = _cpu_copy(tmp_path)
    report = root / "results" / "cpu" / "REPORT.md"
    report.write_text(report.read_text().split("\n", 1)[1])  # as written before the marker
    done = _command(root, "report", "--scale", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    assert report.read_text().startswith(MARKER + "\n# Results at cpu scale\n")
