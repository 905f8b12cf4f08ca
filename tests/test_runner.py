"""The runner: resume to the same result, growth between runs, the CLI, and the results format."""

import csv
import dataclasses
import json

import lightning as L
import pytest
import torch
from safetensors.torch import load_file

from scaling_axes.experiments.tokenformer import fig3_progressive_scaling as fig3
from scaling_axes.experiments.tokenformer import table3_params_flops as table3
from scaling_axes.experiments.tokenformer import table8_variants as table8
from scaling_axes.harness.experiment.command import main
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.results import COLUMNS, Row, write_rows
from scaling_axes.harness.runs import Budget, Experiment, Run, find_run
from scaling_axes.harness.scales import PAPER, SMALL, SMOKE
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.modules.registry import build_from_config
from tests.conftest import HANG_GUARD_S
from tests.test_robustness import assert_resumed_from

TINY = {"n_layer": 2, "d_model": 32, "n_head": 4, "max_seq_len": 32}
BUDGET = Budget(steps=12, batch_size=4, seq_len=32, lr=3e-3, warmup_steps=2, val_windows=8, checkpoint_every=5)


def _run(name="r", **kwargs):
    tokens = {"qkv_tokens": 8, "proj_tokens": 8, "ffn_tokens": 32}
    return Run(name, "tokenformer_124m", BUDGET, {**TINY, **tokens}, **kwargs)


class Crash(L.Callback):
    """Dies like a killed job: after the step-10 checkpoint, before the end."""

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 8:
            raise RuntimeError("simulated crash")


def test_interrupted_run_resumes_to_the_same_final_loss(tmp_path):
    straight = train_run(_run(), tmp_path / "straight", accelerator="cpu")
    again = train_run(_run(), tmp_path / "again", accelerator="cpu")
    assert again["val_loss"] == straight["val_loss"]  # runs are deterministic on the CPU
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_run(_run(), tmp_path / "resumed", extra_callbacks=[Crash()], accelerator="cpu")
    assert (tmp_path / "resumed" / "checkpoints" / "last.ckpt").exists()
    assert not (tmp_path / "resumed" / "done.json").exists()
    checkpoint = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    resumed = train_run(_run(), tmp_path / "resumed", accelerator="cpu")
    assert_resumed_from(tmp_path / "resumed", checkpoint)
    assert resumed["val_loss"] == straight["val_loss"]
    assert resumed["tokens"] == straight["tokens"] == 12 * 4 * 32
    with open(tmp_path / "resumed" / "metrics.csv") as f:
        steps = {int(r["step"]) for r in csv.DictReader(f)}
    assert {1, 11} <= steps  # the history from before the crash is kept
    assert json.loads((tmp_path / "resumed" / "done.json").read_text())["steps"] == 12


@pytest.mark.parametrize("family", ["tokenformer", "transformer"])
def test_grown_run_starts_from_the_grown_weights(tmp_path, family):
    if family == "tokenformer":
        source = _run("small")
        big = Run(
            "big",
            "tokenformer_354m",
            BUDGET,
            {**TINY, "qkv_tokens": 16, "proj_tokens": 16, "ffn_tokens": 64},
            grow_from="small",
            grow_options={"pin_tau": True},
        )  # fmt: skip  (exact, so comparable below)
        expected = {"tau_qkv_tokens": 8, "tau_proj_tokens": 8, "tau_ffn_tokens": 32}
    else:
        source = Run("small", "transformer_354m", BUDGET, TINY)
        big = Run("big", "transformer_757m", BUDGET, {**TINY, "d_model": 48}, grow_from="small")
        expected = {"norm_eps": 1e-5 * 32 / 48}
    experiment = Experiment("exp", "", lambda scale: [source, big], lambda scale, results: [])
    Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(big)
    small_dir, big_dir = tmp_path / "exp" / "smoke" / "small", tmp_path / "exp" / "smoke" / "big"
    assert (small_dir / "done.json").exists() and (big_dir / "done.json").exists()
    overrides = json.loads((big_dir / "init_grown_overrides.json").read_text())
    assert expected.items() <= overrides.items()  # growth's own config changes are what the grown run trains
    small_model = build_from_config(source.config)
    grown_model = build_from_config(dataclasses.replace(big, overrides=overrides).config)
    small_model.load_state_dict(load_file(small_dir / "final.safetensors"))
    grown_model.load_state_dict(load_file(big_dir / "init_grown.safetensors"))
    idx = torch.randint(0, 50000, (1, 16))
    torch.testing.assert_close(grown_model(idx), small_model(idx), rtol=1e-5, atol=1e-5)


def test_unknown_run_is_named():
    with pytest.raises(KeyError, match=r"no run 'tokenformer_9b_full'.*tokenformer_124m_full"):
        find_run(fig3.EXPERIMENT, SMOKE, "tokenformer_9b_full")


def test_list_and_dry_run_at_paper_scale(capsys):
    main(fig3.EXPERIMENT, ["--scale", "paper", "--list"])
    listing = capsys.readouterr().out
    assert "tokenformer_757m_30b" in listing and "grown from tokenformer_354m_30b" in listing
    main(fig3.EXPERIMENT, ["--scale", "paper", "--dry-run", "--devices", "8"])
    plan = capsys.readouterr().out
    assert "354,190,848" in plan and "600,000" in plan  # 354M params; section 4.1's 6e5 steps


def test_report_before_any_run_marks_rows_not_run(tmp_path):
    rows = fig3.EXPERIMENT.report(PAPER, {})
    ppl = [r for r in rows if r.metric == "val_ppl"]
    assert ppl and all(r.status == "not_run" for r in ppl)
    tokenformer_1_4b = next(r for r in ppl if r.row == "tokenformer_1_4b_30b")
    assert tokenformer_1_4b.paper == 11.77


def test_results_csv_has_the_design_columns_and_report_md(tmp_path):
    write_rows(
        "demo",
        SMOKE,
        [Row(table="t", row="r", metric="m", paper=1.0, ours=2.0, status="differs", note="a, b")],
        tmp_path,
    )
    with open(tmp_path / "smoke" / "demo.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS and rows[0]["note"] == "a, b" and rows[0]["scale"] == "smoke"
    assert "demo" not in write_report(tmp_path).read_text()  # smoke's results stay in results/smoke/
    assert "- [demo](demo.csv): 1 differs" in write_report(tmp_path, scale=SMOKE).read_text()
    with pytest.raises(ValueError, match="status='ok'"):
        Row(table="t", row="r", metric="m", paper=1.0, ours=2.0, status="ok")


def test_table3_shows_the_erratum_and_table8_matches_the_published_configs():
    rows = table3.report(SMOKE, {})
    erratum = [r for r in rows if r.status == "differs"]
    components = [r for r in erratum if r.metric.endswith(("_qkv", "_out"))]
    assert components and all(r.ours == 2 * r.paper for r in components)  # the missing x2 (issue #12)
    totals = {r.metric for r in erratum} - {r.metric for r in components}
    assert totals == {"params_non_embedding_n", "forward_flops_per_token_2n_plus_attention", "max_change_from_tau"}
    variants = table8.report(SMOKE, {})
    off = [(r.row, r.metric) for r in variants if r.status not in ("match", "analytic")]
    # the "1.5B" label is 5.8% below the released 1,587,219,456; the tied 24 x 2048 Transformer is 6.3% below "1.4B"
    assert off == [("tokenformer_1_5b", "params"), ("transformer_1_4b", "params")]
    exact = next(r for r in variants if r.metric == "params_exact")
    assert exact.ours == exact.paper == 151_881_216


def test_lightning_cli_trains_any_preset(tmp_path, monkeypatch):
    from scaling_axes.harness.training.lightning_cli import cli_main

    monkeypatch.setattr("sys.argv", ["scaling-axes"])  # pytest's own arguments are not the CLI's
    overrides = json.dumps({**TINY, "qkv_tokens": 8, "proj_tokens": 8, "ffn_tokens": 32})
    cli = cli_main(
        [
            "fit",
            "--model.model",
            "tokenformer_124m",
            "--model.model_overrides",
            overrides,
            "--data.seq_len",
            "16",
            "--data.batch_size",
            "2",
            "--trainer.fast_dev_run",
            "2",
            "--trainer.accelerator",
            "cpu",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert cli.trainer.global_step == 2
    assert cli.model.model.config.qkv_tokens == 8


def test_command_line_entry_points_start(capsys):
    """`python -m scaling_axes` starts as a process of its own (its imports, its exit status); the other commands, in
    this one (a process each was 10-17 s of imports)."""
    import subprocess
    import sys

    from scaling_axes.cli import cli

    result = subprocess.run(
        [sys.executable, "-m", "scaling_axes", "list"], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert result.returncode == 0 and "tokenformer_table8_variants" in result.stdout, result.stderr
    with pytest.raises(SystemExit) as grow_help:
        cli(["grow", "--help"])
    assert grow_help.value.code == 0
    cli(["run", "tokenformer_table8_variants", "--list"])
    assert "tokenformer" in capsys.readouterr().out


def test_fig6_and_fig7_plans_at_paper_scale(capsys):
    from scaling_axes.experiments.tokenformer import fig6_enwik8_continual as fig6
    from scaling_axes.experiments.tokenformer import fig7_net2net_scaling as fig7

    main(fig6.EXPERIMENT, ["--scale", "paper", "--dry-run"])
    plan = capsys.readouterr().out
    for params in ("354,190,848", "353,822,720", "753,796,608", "757,226,496"):  # both families, within 1%
        assert params in plan
    assert "60,000" in plan  # section 4.1's 6e4 steps of pre-training
    assert "2,204 steps x 12 x 1024 = 1.02 epochs of enwik8" in plan  # Fig. 6's steps, taken as one epoch
    runs = {r.name: r for r in fig6.runs(PAPER)}
    assert runs["tokenformer_757m_enwik8_random_keys"].grow_options["new_keys"] == "random"
    assert runs["tokenformer_757m_enwik8_pinned_tau"].grow_options["pin_tau"] is True
    assert runs["tokenformer_757m_enwik8"].grow_options["pin_tau"] is False  # tau follows n, as the paper
    assert runs["transformer_757m_enwik8_net2net"].budget.lr == 6e-4
    assert runs["transformer_757m_enwik8_net2net"].budget.min_lr_ratio == 1.0  # constant lr
    chains = {r.name: r.grow_from for r in fig7.runs(PAPER)}
    assert chains["transformer_1_4b_30b"] == "transformer_757m_30b"
    assert chains["tokenformer_757m_30b"] == "tokenformer_354m_300b"


def test_fig7_reports_the_families_parameter_match_counted_on_the_models():
    from scaling_axes.experiments.tokenformer import fig7_net2net_scaling as fig7
    from scaling_axes.modules import build_model

    def count(name):
        with torch.device("meta"):
            return sum(p.numel() for p in build_model(name).parameters())

    rows = {r.row: r for r in fig7.EXPERIMENT.report(PAPER, {}) if r.metric == "params_vs_tokenformer"}
    assert set(rows) == {f"transformer_{size}" for size in ("124m", "354m", "757m", "1_4b")}
    for size in ("124m", "354m", "757m", "1_4b"):
        expected = count(f"transformer_{size}") / count(f"tokenformer_{size}") - 1
        assert rows[f"transformer_{size}"].ours == pytest.approx(expected, abs=1e-12)
    assert rows["transformer_1_4b"].ours == pytest.approx(-0.0631, abs=1e-4)  # tied, as App. D/E: not matched


def test_tokenformer_tables_carry_the_param_and_image_size_columns():
    from scaling_axes.experiments.tokenformer import table1_zeroshot as table1
    from scaling_axes.experiments.tokenformer import table2_imagenet as table2

    sizes = {r.row: r for r in table2.report(PAPER, {}) if r.metric == "image_size"}
    assert len(sizes) == 6 and all(r.ours == r.paper == 224 and r.status == "match" for r in sizes.values())
    labels = {r.row: r.paper for r in table1.report(SMOKE, {}) if r.metric == "params"}
    assert len(labels) == 13 and labels["pythia_160m"] == 160e6 and labels["tokenformer_1_5b"] == 1.5e9


def test_fig6_batch_512_reading_is_an_erratum_row_and_runs_only_on_request(capsys):
    """App. E's one pass vs 2,204 steps x 512 x 1,024 tokens (~43 passes of enwik8): an erratum row; the batch-512
    runs exist at paper scale, are listed, found by --run, and left out of what a plain run or a plan trains."""
    from scaling_axes.experiments.tokenformer import fig6_enwik8_continual as fig6
    from scaling_axes.harness.experiment.plan import dry_run
    from scaling_axes.harness.runs import default_runs

    row = fig6.erratum_row(PAPER)
    assert row.status == "differs" and row.paper == 1 and 40 < row.ours < 47
    assert row in fig6.report(PAPER, {})
    requested = {r.name for r in fig6.runs(PAPER) if r.on_request}
    assert requested == {"tokenformer_757m_enwik8_batch512", "transformer_757m_enwik8_net2net_batch512"}
    assert requested.isdisjoint(r.name for r in default_runs(fig6.EXPERIMENT, PAPER))
    assert requested.isdisjoint(p["run"] for p in dry_run(fig6.EXPERIMENT, PAPER, 0.4, 989.0, 8))
    assert find_run(fig6.EXPERIMENT, PAPER, "tokenformer_757m_enwik8_batch512").budget.batch_size == 512
    main(fig6.EXPERIMENT, ["--scale", "paper", "--list"])
    assert "tokenformer_757m_enwik8_batch512" in capsys.readouterr().out
    assert not any(r.on_request for r in fig6.runs(SMALL))


def test_the_harness_benchmark_times_the_suites_own_arithmetic(tmp_path):
    """The bare loop the suite's step is timed against trains the same model on the same batches with the same
    optimiser, schedule and clipping: after a few steps both reach the same weights (so the ratio compares the
    same work)."""
    import dataclasses

    from scaling_axes.benchmarks.harness import CASE, bare_loop, suite_step_ms
    from scaling_axes.experiments.cross_architecture.setup import make_run
    from scaling_axes.harness.scales import CPU

    run = make_run(CPU, *CASE)
    run = dataclasses.replace(
        run, budget=dataclasses.replace(run.budget, steps=6, warmup_steps=2, val_every=None, val_windows=2)
    )
    bare_ms, model = bare_loop(run, "cpu")
    assert suite_step_ms(run, tmp_path, "cpu") > 0 and bare_ms > 0
    final = load_file(tmp_path / "final.safetensors")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, final[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_finished_smoke_run_keeps_what_export_and_report_read_and_no_optimiser_state(tmp_path):
    """Issue 82: a finished smoke run's last.ckpt (its optimiser state, three times its weights: 5 of the 6.4 GB a
    smoke run's runs/ held) is removed once done.json is written; the run is still finished (a rerun reads it), and
    exports from its final weights. Another scale keeps it."""
    from scaling_axes.interop.export import export
    from tests.test_run_safety import tiny

    run = tiny(4)
    experiment = Experiment("export", "test", lambda scale: [run], lambda scale, results: [])
    schedule = Schedule.of(experiment, SMOKE, tmp_path / "runs", accelerator="cpu")
    done = schedule.train(run)
    out = tmp_path / "runs" / "export" / "smoke" / "r"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == []
    again = schedule.train(run)  # read from done.json, not trained again
    assert (out / "final.safetensors").exists() and again["val_loss"] == done["val_loss"]
    assert again["train_time_curve"] == json.loads(json.dumps(done["train_time_curve"]))
    export(out, tmp_path / "hf")
    assert (tmp_path / "hf" / "model.safetensors").exists() or any((tmp_path / "hf").glob("*.safetensors"))
    assert SMALL.keeps_final_checkpoint and PAPER.keeps_final_checkpoint


def test_a_smoke_sweep_draws_once_and_its_points_keep_their_record_not_their_weights(tmp_path):
    """Issue 82: smoke's sweeps choose no rate a claim reads. Each trains the two middle rates of its grid, one draw
    each, no extension past an edge (`Scale.sweep_cap`, applied where the runs are declared), and each point keeps its
    done.json, which the sweep reads, without final weights; the run the sweep chose for keeps its own and exports.
    Export and growth refuse a point by name. Other scales sweep as declared and keep every point's weights."""
    from scaling_axes.harness.sweeps import SWEEP_DRAWS, Sweep
    from scaling_axes.harness.training.rundir import read_done
    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError
    from tests.test_run_safety import tiny

    swept = dataclasses.replace(tiny(2), lr_sweep=True, sweep=Sweep((3e-4, 1e-3, 3e-3, 1e-2)))
    experiment = Experiment("swept", "test", lambda scale: [swept], lambda scale, results: [])
    assert [(r.sweep.grid, r.sweep.draws, r.sweep.extensions) for r in experiment.runs(SMOKE)] == [((1e-3, 3e-3), 1, 0)]
    assert [r.sweep for r in experiment.runs(SMALL)] == [swept.sweep] and swept.sweep.draws == SWEEP_DRAWS
    assert SMALL.keeps_sweep_weights
    schedule = Schedule.of(experiment, SMOKE, tmp_path / "runs", accelerator="cpu")
    chosen = schedule.at_chosen_rate(experiment.runs(SMOKE)[0])
    schedule.train(chosen)
    folder = tmp_path / "runs" / "swept" / "smoke"
    points = sorted(p for p in folder.iterdir() if "_sweep_" in p.name and p.is_dir())
    assert [p.name for p in points] == ["r_sweep_lr0.001", "r_sweep_lr0.003"]  # at an edge, not extended
    for point in points:
        assert read_done(point / "done.json")["weights_kept"] is False
        assert not (point / "final.safetensors").exists()
        with pytest.raises(SuiteError, match="keeps no sweep point's weights"):
            export(point, tmp_path / "point_hf")
    assert (folder / "r" / "final.safetensors").exists() and "weights_kept" not in read_done(folder / "r" / "done.json")
    export(folder / "r", tmp_path / "hf")


@pytest.mark.parametrize("every, saved", [(2, [2, 4]), (4, [4])])
def test_a_run_writes_each_checkpoint_once_and_its_end_state_last(monkeypatch, tmp_path, every, saved):
    """Issue 82: the state at a run's end is written once, by the trainer after fit (the epoch counted finished),
    not also by the step checkpoint a moment before; a checkpoint along the run is written at its step. A smoke run
    (`Scale.keeps_final_checkpoint` false) writes none at its end: it lasts seconds and keeps none."""
    from scaling_axes.harness.training.callbacks import AtomicCheckpointIO
    from tests.test_run_safety import tiny

    steps = []
    save = AtomicCheckpointIO.save_checkpoint
    monkeypatch.setattr(
        AtomicCheckpointIO,
        "save_checkpoint",
        lambda self, checkpoint, path, **kwargs: (
            steps.append(checkpoint["global_step"]) or save(self, checkpoint, path)
        ),
    )
    run = tiny(4)
    run = dataclasses.replace(run, budget=dataclasses.replace(run.budget, checkpoint_every=every, val_every=None))
    train_run(run, tmp_path / "r", accelerator="cpu")
    assert steps == saved and (tmp_path / "r" / "checkpoints" / "last.ckpt").exists()
    steps.clear()
    experiment = Experiment("ends", "test", lambda scale: [run], lambda scale, results: [])
    Schedule.of(experiment, SMOKE, tmp_path / "runs", accelerator="cpu").train(run)
    assert steps == saved[:-1] and not list((tmp_path / "runs").rglob("last.ckpt"))


def test_where_a_scale_judges_on_whole_splits_the_final_figures_read_every_window(tmp_path):
    """Issue 83: the curve reads a fixed subset (`Budget.val_windows`); at a scale with `whole_final_evaluation` the
    final validation and test read every window, as a hand-made loop over the splits computes with the final weights."""
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from scaling_axes.datamodules.text import FixedWindows
    from scaling_axes.harness.training.tasks import task_of
    from tests.test_run_safety import tiny

    run = tiny(4)
    run = dataclasses.replace(run, budget=dataclasses.replace(run.budget, val_windows=2, val_every=2))
    judging = dataclasses.replace(SMOKE, whole_final_evaluation=True, keeps_sweep_weights=True)
    experiment = Experiment("whole", "test", lambda scale: [run], lambda scale, results: [])
    done = Schedule.of(experiment, judging, tmp_path / "runs", accelerator="cpu").train(run)
    folder = tmp_path / "runs" / "whole" / "smoke" / "r"
    model = task_of(run).module(run, folder / "final.safetensors", False).model.eval()
    data = task_of(run).data(run, 4)
    data.prepare_data()
    data.setup("validate")

    def mean_loss(split: str, windows: int | None) -> float:
        losses, count = 0.0, 0
        with torch.no_grad():
            for x, y in DataLoader(FixedWindows(data.directory, split, run.budget.seq_len, windows), batch_size=4):
                logits = model(x)
                losses += F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction="sum").item()
                count += y.numel()
        return losses / count

    assert len(FixedWindows(data.directory, "val", run.budget.seq_len)) > 2  # more than the curve reads
    assert done["val_loss"] == pytest.approx(mean_loss("val", None), abs=2e-5)
    assert done["test_loss"] == pytest.approx(mean_loss("test", None), abs=2e-5)
    assert done["val_loss"] != pytest.approx(mean_loss("val", 2), abs=2e-5)
    # each test window's own loss, in the split's order (the bootstrap's), from the same weights
    windows = FixedWindows(data.directory, "test", run.budget.seq_len)
    assert len(done["test_window_losses"]) == len(windows)
    with torch.no_grad():
        for i in (0, len(windows) // 2, len(windows) - 1):
            x, y = windows[i]
            own = F.cross_entropy(model(x[None]).flatten(0, 1).double(), y).item()
            assert done["test_window_losses"][i] == pytest.approx(own, abs=2e-5)


def test_a_run_records_when_it_was_first_launched_and_when_it_ended(tmp_path, monkeypatch):
    """Issue 83: the per-seed rows carry each run's start and end (a registration must precede its runs); a resumed
    run keeps its first launch's start."""
    import time

    from scaling_axes.harness.training.settings import first_started, read_config
    from tests.test_run_safety import tiny

    before = time.time()
    done = train_run(tiny(2), tmp_path / "r", accelerator="cpu")
    assert before <= done["started_at"] <= done["ended_at"] <= time.time()
    assert read_config(tmp_path / "r")["started"] == done["started_at"]
    monkeypatch.setattr(time, "time", lambda: before + 1e6)  # a later launch of the same run keeps the first start
    assert first_started(tmp_path / "r") == done["started_at"]
    assert first_started(tmp_path / "elsewhere") == before + 1e6
