"""Integrity that cannot be switched off (issue 38's seven cases): every file the suite trusts is verified against
the checksum written with it, a missing checksum is a failure, a resume trusts the checkpoint's own record of its
settings, finished runs are verified where they are used, a refused launch writes nothing, and the curves after any
kill equal an uninterrupted run's."""

import csv
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from scaling_axes.harness.experiment.finished import FinishedRuns
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.experiment.table import rebuild
from scaling_axes.harness.runs import Experiment, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.growth import source_weights
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.interop.lm_eval_model import load_checkpoint
from scaling_axes.io import CorruptFileError, checksum_file
from tests.test_run_safety import _run_script, _stop_at, tiny

TIMING = (
    "train_time_curve",
    "train_seconds",
    "step_ms",
    "tokens_per_sec",
    "mfu",
    "wall_seconds_last_session",
    "started_at",
    "ended_at",
)


def _experiment(*runs: Run) -> Experiment:
    return Experiment("safety", "test", lambda scale: list(runs), lambda scale, results: [])


def _flip(path: Path, count: int = 1) -> None:
    data = bytearray(path.read_bytes())
    for i in range(count):
        data[len(data) // 2 + i] ^= 0xFF
    path.write_bytes(bytes(data))


def _interrupted(out: Path, step: int = 5) -> None:
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(step)], accelerator="cpu")


def test_a_damaged_config_yaml_is_named_and_the_checkpoint_keeps_the_fingerprint(tmp_path) -> None:
    """Case 1: a config.yaml cut to valid YAML no longer passes as the run's settings, with or without a change of
    precision; with config.yaml and its checksum both gone, the checkpoint's own record still refuses the change."""
    out = tmp_path / "r"
    _interrupted(out)
    config = out / "config.yaml"
    config.write_text(config.read_text()[:200].rsplit("\n", 1)[0] + "\n")
    changed = r"last\.ckpt was written by a run with other settings \(precision: '32-true' -> 'bf16-mixed'\)"
    with pytest.raises(SystemExit, match=changed):
        train_run(tiny(), out, accelerator="cpu", precision="bf16-mixed")
    with pytest.raises(CorruptFileError, match=rf"{config} does not match the checksum written with it"):
        train_run(tiny(), out, accelerator="cpu")
    config.unlink()
    checksum_file(config).unlink()
    with pytest.raises(SystemExit, match=changed):
        train_run(tiny(), out, accelerator="cpu", precision="bf16-mixed")
    assert train_run(tiny(), out, accelerator="cpu")["steps"] == 12  # its own settings: resumed


def test_final_weights_are_verified_wherever_a_finished_run_is_used(tmp_path, capsys) -> None:
    """Case 2: four flipped bytes of the final weights stop evaluation, the "finished earlier" path, growth from it,
    and are named by --report, which reports the rest."""
    runs = (tiny(4), Run("other", "transformer_124m", tiny(4).budget, tiny(4).overrides, seed=7))
    experiment = _experiment(*runs)
    for run in runs:
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(run)
    out = tmp_path / "safety" / "smoke" / "r"
    _flip(out / "final.safetensors", 4)
    match = rf"{out / 'final.safetensors'} does not match the checksum written with it"
    with pytest.raises(CorruptFileError, match=match):
        load_checkpoint(out)
    with pytest.raises(CorruptFileError, match=match):
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(runs[0])
    with pytest.raises(CorruptFileError, match=match):
        source_weights(out, Run("grown", "transformer_124m", tiny(4).budget, {}, grow_from="r"))
    capsys.readouterr()
    results = FinishedRuns(experiment, SMOKE, tmp_path).results()
    assert list(results) == ["other"] and "skipping run r in the report" in capsys.readouterr().out


def test_data_re_prepared_under_a_finished_run_makes_it_stale_and_stops_growth_from_it(tmp_path, monkeypatch) -> None:
    """Issue 58, case 6: the prepared tokens replaced and meta.json's checksums updated, as a re-prepared corpus has
    them. The run's config.json records the digest of the data it trained on: the report marks it stale, growth
    from it stops, both naming what changed and the fix."""
    import shutil

    from scaling_axes.datamodules.corpora import corpus_dir
    from scaling_axes.datamodules.sources import tokenizer_of
    from scaling_axes.io import atomic_write

    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "embedded_news", tmp_path / "data" / "embedded_news")
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "data"))
    run = tiny(4)
    experiment = _experiment(run)
    Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(run)
    out = tmp_path / "safety" / "smoke" / "r"
    assert "stale" not in FinishedRuns(experiment, SMOKE, tmp_path).results()["r"]
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "elsewhere"))  # a --report where nothing is prepared yet
    assert "stale" not in FinishedRuns(experiment, SMOKE, tmp_path).results()["r"]  # (it said "digest None")
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "data"))
    prepared = corpus_dir(tmp_path / "data", run.corpus, tokenizer_of(run.corpus, run.tokenizer))
    meta = json.loads((prepared / "meta.json").read_text())
    meta["splits"]["train"]["blake2b"] = "0" * 32  # other tokens, their checksum recorded as a preparation would
    atomic_write(prepared / "meta.json", json.dumps(meta), checksum=True)
    stale = FinishedRuns(experiment, SMOKE, tmp_path).results()["r"]["stale"]
    assert "its data changed since it trained" in stale and "--force-new" in stale
    with pytest.raises(CorruptFileError, match="which grown grows from: its data changed since it trained"):
        source_weights(out, Run("grown", "transformer_124m", tiny(4).budget, {}, grow_from="r"))


def test_a_deleted_checksum_file_does_not_turn_verification_off(tmp_path) -> None:
    """Case 3: without `last.ckpt.blake2b` a checkpoint is not resumed, flipped or not; a meta.json without its
    checksum file, or one whose splits carry no checksums, is not read."""
    from scaling_axes.datamodules.corpora import open_split, prepare_corpus

    out = tmp_path / "r"
    _interrupted(out)
    last = out / "checkpoints" / "last.ckpt"
    checksum_file(last).unlink()
    for flipped in (False, True):
        if flipped:
            _flip(last)
        with pytest.raises(CorruptFileError, match=rf"{last} has no checksum file \(last\.ckpt\.blake2b\)"):
            train_run(tiny(), out, accelerator="cpu")
    corpus = prepare_corpus("embedded_news", "bytes", tmp_path / "data")
    meta = corpus / "meta.json"
    checksum_file(meta).unlink()
    with pytest.raises(CorruptFileError, match=rf"{meta} has no checksum file"):
        open_split(corpus, "train")
    from scaling_axes.io import atomic_write

    stripped = json.loads(meta.read_text())
    for split in stripped["splits"].values():
        del split["blake2b"]
    atomic_write(meta, json.dumps(stripped), checksum=True)  # as an older suite's, checksummed or not
    with pytest.raises(CorruptFileError, match="splits without token counts or checksums"):
        open_split(corpus, "train")


def test_a_done_json_of_nothing_is_named_and_the_report_reports_the_rest(tmp_path, capsys) -> None:
    """Case 4: `{}` in done.json stops the run's command with the file named, and --report goes on without it."""
    runs = (tiny(4), Run("other", "transformer_124m", tiny(4).budget, tiny(4).overrides, seed=7))
    experiment = _experiment(*runs)
    for run in runs:
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(run)
    done = tmp_path / "safety" / "smoke" / "r" / "done.json"
    done.write_text("{}")
    with pytest.raises(CorruptFileError, match=rf"{done} does not match the checksum written with it"):
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(runs[0])
    capsys.readouterr()
    rebuild(experiment, SMOKE, tmp_path, tmp_path / "results")
    assert f"skipping run r in the report: {done}" in capsys.readouterr().out
    assert (tmp_path / "results" / "smoke" / "safety.csv").exists()


def test_a_refused_launch_records_nothing(tmp_path) -> None:
    """Case 5: three devices cannot split a batch of 4; refused before the run directory holds anything, so the next
    plain launch is not "started with other settings"."""
    run = tiny(4)
    with pytest.raises(ValueError, match="global batch 4 of run r is not a multiple of micro-batch"):
        Schedule.of(_experiment(run), SMOKE, tmp_path, accelerator="cpu", devices=3).train(run)
    out = tmp_path / "safety" / "smoke" / "r"
    assert not out.exists() or not any(out.iterdir())
    assert Schedule.of(_experiment(run), SMOKE, tmp_path, accelerator="cpu").train(run)["steps"] == 4


def _rows(out: Path) -> list[dict]:
    """metrics.csv without its clock and speed columns."""
    with open(out / "metrics.csv", newline="") as f:
        return [
            {k: v for k, v in row.items() if not any(t in k for t in ("time", "per_sec", "mfu"))}
            for row in csv.DictReader(f)
        ]


def _done(out: Path) -> dict:
    return {k: v for k, v in json.loads((out / "done.json").read_text()).items() if k not in TIMING}


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("hook", "step", "when"),
    [  # a killed process and its rerun each, 13-22 s: make test kills mid-write, the rest run under `slow`
        pytest.param("on_train_batch_start", 2, "True", marks=SLOW),  # mid-run, before any checkpoint
        pytest.param("on_train_batch_start", 8, "True", marks=SLOW),  # just after the checkpoint of step 8
        ("on_save_checkpoint", 8, "True"),  # mid-write of that checkpoint
        pytest.param("on_validation_start", 8, "True", marks=SLOW),  # between the checkpoint and its validation
        pytest.param("on_validation_end", 12, "trainer.state.fn == 'validate'", marks=SLOW),  # before done.json
    ],
    ids=["step2", "after_checkpoint", "mid_write", "before_validation", "after_final_validation"],
)
def test_a_run_killed_at_any_point_resumes_to_the_uninterrupted_runs_curves_record_and_weights(
    tmp_path, hook, step, when, uninterrupted_run
) -> None:
    """Cases 6 and 7: killed (as kill -9) at each point and rerun, metrics.csv and done.json equal an uninterrupted
    run's, clock and speed aside (no row logged twice, counters continued, no extra final point: the curves Tables
    3-4, the MoT means and the equal-FLOP readings use), the final weights bitwise, and the steps before the
    checkpoint not trained again."""
    whole, cut = uninterrupted_run, tmp_path / "cut"
    assert _run_script(cut, hook, step, when).returncode == 9
    checkpoint = cut / "checkpoints" / "last.ckpt"
    resumed_from = torch.load(checkpoint, weights_only=True)["global_step"] if checkpoint.exists() else 0
    finish = _run_script(cut)
    assert finish.returncode == 0, finish.stdout[-2000:] + finish.stderr[-3000:]
    assert _rows(cut) == _rows(whole)
    assert _done(cut) == _done(whole)
    whole_weights, cut_weights = (load_file(d / "final.safetensors") for d in (whole, cut))
    assert all(torch.equal(cut_weights[k], v) for k, v in whole_weights.items())
    if 0 < resumed_from < 12:  # the resumed session's own progress lines: it went on from its checkpoint
        assert "step 1/12" not in finish.stdout and f"step {resumed_from + 1}/12" in finish.stdout


def test_a_deleted_done_json_is_written_again_as_it_was(tmp_path) -> None:
    """Case 7, as the suite's own message advises: done.json deleted, the rerun writes the same record."""
    out = tmp_path / "r"
    train_run(tiny(), out, accelerator="cpu")
    before = _done(out)
    rows = _rows(out)
    (out / "done.json").unlink()
    train_run(tiny(), out, accelerator="cpu")
    assert _done(out) == before and _rows(out) == rows


def test_rewriting_the_same_bytes_leaves_the_checksum_file_as_it_was(tmp_path) -> None:
    """Issue 83: a rebuild of unchanged results listed the same digest again in each checksum file, so two
    `report` calls did not give identical bytes. The same bytes keep it; other bytes still list the last ones."""
    from scaling_axes.io import atomic_write, checksum_file

    path = tmp_path / "table.csv"
    atomic_write(path, b"a\n", checksum=True)
    first = checksum_file(path).read_bytes()
    atomic_write(path, b"a\n", checksum=True)
    assert checksum_file(path).read_bytes() == first
    atomic_write(path, b"b\n", checksum=True)
    listed = json.loads(checksum_file(path).read_text())["blake2b"]
    assert len(listed) == 2 and listed[1] == json.loads(first)["blake2b"][0]
