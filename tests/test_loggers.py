"""Loggers beside metrics.csv: TensorBoard holds the same losses, W&B (offline) writes under the run directory and a
restarted run continues its W&B run; a logger whose extra is missing stops the command before any compute."""

import csv
import importlib.util
import logging
import time

import pytest
import torch

from scaling_axes.harness.training.launch import check_loggers, parse_loggers
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.harness.training.loggers import build_loggers, quiet_lightning_logs, wandb_history_rows
from scaling_axes.harness.training.metrics_csv import metric_rows
from scaling_axes.io import SuiteError
from tests.conftest import HANG_GUARD_S
from tests.test_run_safety import _stop_at, tiny

ALL = ["csv", "tensorboard", "wandb"]
LABELS = {"experiment": "logger_test", "scale": "smoke"}


@pytest.fixture
def offline_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def _csv_losses(path) -> dict[int, float]:
    with open(path) as f:
        return {int(row["step"]): float(row["train/loss"]) for row in csv.DictReader(f) if row.get("train/loss")}


def _tensorboard_losses(directory) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory))
    events.Reload()
    return {event.step: event.value for event in events.Scalars("train/loss")}  # a repeated step: its last value


def test_tensorboard_and_wandb_follow_a_run_through_a_restart(tmp_path, offline_wandb, caplog) -> None:
    caplog.set_level(logging.INFO)
    out = tmp_path / "r"
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        train_run(tiny(), out, extra_callbacks=[_stop_at(5)], accelerator="cpu", loggers=ALL, labels=LABELS)
    run_id = (out / "wandb_id").read_text()
    train_run(tiny(), out, accelerator="cpu", loggers=ALL, labels=LABELS)
    assert (out / "wandb_id").read_text() == run_id
    assert "weights_only" not in caplog.text  # every save is of the whole state, and says so
    sessions = sorted(path.name for path in (out / "wandb").glob("offline-run-*"))
    assert len(sessions) >= 1 and all(name.endswith(f"-{run_id}") for name in sessions)  # one W&B run, resumed
    assert (out / "wandb" / sessions[-1] / f"run-{run_id}.wandb").stat().st_size > 0
    other = tmp_path / "other"  # the next run in this process: a W&B run of its own
    train_run(tiny(steps=2), other, accelerator="cpu", loggers=ALL, labels=LABELS)
    assert (
        [path.name.rsplit("-", 1)[1] for path in (other / "wandb").glob("offline-run-*")]
        == [(other / "wandb_id").read_text()]
        != [run_id]
    )
    logged, tensorboard = _csv_losses(out / "metrics.csv"), _tensorboard_losses(out / "tensorboard")
    assert len(logged) >= 10 and sorted(tensorboard) == sorted(logged)
    assert torch.allclose(torch.tensor([tensorboard[s] for s in logged]), torch.tensor(list(logged.values())))


def _wait_for_history(path, written) -> None:
    """Until W&B's log at `path` holds a row that is `written`: its service process may still be writing when the
    run has finished in this one (seen when two test processes share the cores). Within the tests' hang guard."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not any(written(row) for row in wandb_history_rows(path)):
        assert time.monotonic() < deadline, f"W&B never wrote the row awaited to {path}"
        time.sleep(0.5)


def test_a_wandb_run_killed_before_writing_its_last_points_resumes_with_each_point_once(tmp_path, offline_wandb):
    """A kill -9 takes the points W&B had not yet written: the first session's log is cut until its last val/loss
    point is gone. The resumed session's log then holds it, and across both sessions every point of metrics.csv is
    there once with its value, `_step` going on from the first session's."""
    out = tmp_path / "r"
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        train_run(tiny(), out, extra_callbacks=[_stop_at(8)], accelerator="cpu", loggers=["wandb"], labels=LABELS)
    run_id = (out / "wandb_id").read_text()
    (first,) = out.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    lost = max(int(row["step"]) for row in metric_rows(out / "metrics.csv")[1] if row.get("val/loss"))
    _wait_for_history(first, lambda row: row.get("trainer/global_step") == lost and "val/loss" in row)
    data = first.read_bytes()
    while any(row.get("trainer/global_step") == lost and "val/loss" in row for row in wandb_history_rows(first)):
        data = data[:-16]  # cut mid-record, as a kill leaves it
        first.write_bytes(data)
    time.sleep(1.1)  # (W&B names a session's folder by the second it started)
    train_run(tiny(), out, accelerator="cpu", loggers=["wandb"], labels=LABELS)
    sessions = sorted(out.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(sessions) == 2 and sessions[0] == first
    rows = [row for session in sessions for row in wandb_history_rows(session)]
    steps = [row["_step"] for row in rows]
    assert steps == sorted(set(steps))  # the resumed session's _step goes on from the first's
    written = [
        (key, row["trainer/global_step"], value)
        for row in rows
        for key, value in row.items()
        if not key.startswith(("_", "trainer/"))
    ]
    logged = {
        (key, int(row["step"])): float(value)
        for row in metric_rows(out / "metrics.csv")[1]
        for key, value in row.items()
        if value and key != "step"
    }
    assert ("val/loss", lost) in logged and len(logged) > 20
    assert sorted((key, step) for key, step, _ in written) == sorted(logged)  # each point once
    for key, step, value in written:
        assert value == pytest.approx(logged[key, step], rel=1e-6), (key, step)


def test_each_logger_is_given_the_runs_name_config_labels_and_commit(tmp_path, offline_wandb) -> None:
    import wandb
    import yaml

    hyperparameters = {"run": "r", **LABELS, "seed": 3, "commit": "abc1234", "model_config": {"d_model": 32}}
    _, tensorboard, wandb_logger = build_loggers(ALL, tmp_path, hyperparameters)
    try:
        assert wandb_logger.experiment.id == (tmp_path / "wandb_id").read_text()
        assert wandb_logger.experiment.name == "r" and wandb_logger.experiment.group == "logger_test"
        assert set(wandb_logger.experiment.tags) == {
            "experiment=logger_test",
            "scale=smoke",
            "seed=3",
            "commit=abc1234",
        }
        assert wandb_logger.experiment.config["model_config"] == {"d_model": 32}
    finally:
        wandb.finish()
    tensorboard.save()
    recorded = yaml.safe_load((tmp_path / "tensorboard" / "hparams.yaml").read_text())
    assert {k: recorded[k] for k in hyperparameters} == hyperparameters


def test_tensorboards_hparams_tab_holds_each_run_with_its_final_metrics(tmp_path) -> None:
    import yaml
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    out = tmp_path / "r"
    done = train_run(tiny(steps=3), out, accelerator="cpu", loggers=["csv", "tensorboard"], labels=LABELS)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["run"].string_value == "r" and hparams["experiment"].string_value == "logger_test"
    assert hparams["model_config/d_model"].number_value == tiny().config.d_model
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert "final/val_loss" in {m.name.tag for m in experiment.metric_infos}
    assert events.Scalars("final/val_loss")[-1].value == pytest.approx(done["val_loss"])
    recorded = yaml.safe_load((out / "tensorboard" / "hparams.yaml").read_text())  # no python/tuple tags
    assert recorded["run"] == "r" and recorded["budget"]["steps"] == 3


def test_loggers_are_named_and_a_missing_extra_stops_before_any_compute(monkeypatch) -> None:
    assert parse_loggers("tensorboard") == ["csv", "tensorboard"]  # the CSV log is always written
    assert parse_loggers("wandb,csv,wandb") == ["csv", "wandb"]
    with pytest.raises(SuiteError, match="unknown logger mlflow: choose from csv, tensorboard, wandb"):
        parse_loggers("csv,mlflow")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    with pytest.raises(SuiteError, match=r"^--logger wandb needs its extra: pip install 'scaling-axes\[wandb\]'$"):
        check_loggers(["csv", "wandb"])
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.harness.runs import Experiment

    def no_runs(scale):
        raise AssertionError("the runs were asked for: the check came after compute started")

    with pytest.raises(SuiteError, match="needs its extra"):
        main(Experiment("e", "", no_runs, lambda scale, results: []), ["--logger", "wandb"])


def test_lightnings_tips_never_appear_and_accelerator_lines_once_per_process(caplog) -> None:
    quiet_lightning_logs()
    quiet_lightning_logs()  # idempotent
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with caplog.at_level(logging.INFO, logger="lightning.pytorch"):
        for _ in range(3):
            for line in ("💡 Tip: try installing something", "GPU available: False, used: False", "step 3  loss 1"):
                logger.info(line)
    said = [record.getMessage() for record in caplog.records]
    assert said.count("step 3  loss 1") == 3  # a run's own lines stay
    assert said.count("GPU available: False, used: False") <= 1 and "💡 Tip: try installing something" not in said


@pytest.mark.slow  # every command in a process of its own
def test_no_command_of_the_suite_prints_lightnings_tip(tmp_path) -> None:
    import subprocess
    import sys

    overrides = '{"n_layer": 1, "d_model": 16, "n_head": 2, "max_seq_len": 16, "vocab_size": 256}'
    fit = [
        sys.executable,
        "-m",
        "scaling_axes",
        "fit",
        "--model.model",
        "transformer_124m",
        "--model.model_overrides",
        overrides,
        "--data.tokenizer",
        "bytes",
        "--data.seq_len",
        "16",
        "--data.batch_size",
        "2",
        "--trainer.fast_dev_run",
        "1",
        "--trainer.accelerator",
        "cpu",
        "--trainer.default_root_dir",
        str(tmp_path),
    ]
    said = subprocess.run(fit, capture_output=True, text=True, cwd=tmp_path)
    assert said.returncode == 0, said.stderr[-1500:]
    assert "Tip" not in said.stdout + said.stderr and "litlogger" not in said.stdout + said.stderr
