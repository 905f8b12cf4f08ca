"""The one command a GPU lease runs (`gpu-check`), proven on the CPU at toy sizes before a lease is spent on it:
every part in a process of its own under its time box, a part that runs long or fails leaving its error while the
others run, at most 8 files, a summary with the versions, every target's line and every code path's status."""

import subprocess
import sys
from pathlib import Path

import pytest

from scaling_axes.benchmarks import gpu_check, training, training_targets
from tests.conftest import HANG_GUARD_S


@pytest.mark.slow  # the whole command end to end on the CPU: two minutes
def test_the_command_runs_end_to_end_on_the_cpu_and_a_part_past_its_time_box_leaves_its_error(tmp_path):
    out = tmp_path / "out"
    (out).mkdir()
    command = [sys.executable, "-m", "scaling_axes", "gpu-check", str(out), "--tiny", "--timeout", "training=2"]
    boxes = sum(part.tiny_seconds for part in gpu_check.PARTS if part.name != "training")  # the CPU's, not the GPU's
    finished = subprocess.run(command, capture_output=True, text=True, timeout=boxes + HANG_GUARD_S)
    assert finished.returncode == 0, finished.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= gpu_check.MAX_FILES and set(files) <= set(gpu_check.FILES)
    summary = (out / "summary.md").read_text()
    assert "- training: timed out after 2 s" in summary  # killed at its box; the parts after it still ran
    assert "- kernels: finished in" in summary and "- paths: finished in" in summary
    assert "- profile: finished in" in summary and "was not written" in (out / "profile.txt").read_text()
    assert "every CUDA code path finishes with a finite loss: met" in summary
    assert "FFN Pattention vs eager" in summary  # the kernel benchmark's target lines, judged from its CSV
    assert "- torch " in summary and "triton" in summary and "- commit " in summary
    powered = summary.partition("## A powered small-scale run")[2]  # the power table's cost per paper
    assert all(f"- {paper}: " in powered and "H100-hours at small scale" in powered for paper in ("mot", "rmt"))
    paths = (out / "paths.csv").read_text()
    for name in (
        "transformer_language_model",
        "tokenformer_language_model",
        "rmt_language_model",
        "mot_language_model",
        "vit_tokenformer",
        "tokenformer_growth",
        "net2net_growth",
        "lm_eval_adapter",
        "kill_and_resume",
        "ddp_one_process",
    ):
        assert f"\n{name},ok," in paths
    assert "bit for bit equal" in paths  # the resumed run's final weights (on the CPU: exactly)
    assert "===== kernels" in (out / "log.txt").read_text()


def test_a_failing_code_path_is_a_row_with_its_error_and_the_others_still_run(tmp_path, monkeypatch):
    from scaling_axes.benchmarks import gpu_paths

    def broken(root):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpu_paths, "paths", lambda: {"broken": broken, "fine": lambda root: {"val_loss": 1.5}})
    monkeypatch.setattr(gpu_check, "powered_small_scale", list)  # priced in the end-to-end test
    gpu_paths.main(tmp_path / "paths.csv")
    rows = (tmp_path / "paths.csv").read_text().splitlines()
    assert rows[1].startswith("broken,failed,") and "RuntimeError: CUDA error: an illegal memory" in rows[1]
    assert rows[2].startswith("fine,ok,1.5,")
    summary = gpu_check.write_summary(tmp_path, {"paths": "finished in 1 s"}, tiny=True).read_text()
    assert "every CUDA code path finishes with a finite loss: NOT met (1 of 2: broken)" in summary


def test_a_file_the_lease_would_not_return_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "powered_small_scale", list)  # priced in the end-to-end test
    (tmp_path / "stray.bin").write_bytes(b"x")
    with pytest.raises(SystemExit, match=r"holds files the lease does not return: stray\.bin"):
        gpu_check.write_summary(tmp_path, {}, tiny=True)
    assert len(gpu_check.FILES) <= gpu_check.MAX_FILES


def test_the_profile_takes_the_training_target_furthest_from_being_met():
    rows = [
        {
            "family": "rmt_paper",
            "architecture": "rmt",
            "variant": "fused",
            "vs_transformer_best": 1.3,
            "step_ms": 13.0,
            "mfu": None,
        },
        {
            "family": "tokenformer_150m",
            "architecture": "tokenformer",
            "variant": "compiled_fused",
            "mfu": 0.18,
            "step_ms": 9.0,
            "vs_transformer_best": None,
        },
    ]
    missed = [each for each in training_targets.judged(rows) if not each.met]
    worst = max(missed, key=lambda each: each.shortfall)
    assert worst.case == ("tokenformer_150m", "tokenformer", "compiled_fused")  # 45/18 = 2.5x off, the RMT 1.13x
    assert worst.line == "tokenformer at Tokenformer-150M shapes, best MFU 18.0% (target >= 45%): NOT met"


def test_tiny_time_boxes_are_the_cpus_and_only_the_part_asked_is_cut_short(tmp_path, monkeypatch):
    """--tiny boxes each part at TINY_MARGIN x what it took on 2 cores, not at its GPU box (paths' 150 s on an H100
    cut the CPU proof short on a slower CPU); --timeout shortens only the part it names."""
    boxes = {}
    monkeypatch.setattr(
        gpu_check, "launch", lambda part, out, seconds, tiny, after: boxes.setdefault(part.name, seconds)
    )
    monkeypatch.setattr(gpu_check, "write_summary", lambda out, outcomes, tiny, after: tmp_path / "summary.md")
    (tmp_path / "summary.md").write_text("")
    gpu_check.main([str(tmp_path), "--tiny", "--timeout", "training=2"])
    assert boxes == {part.name: 2 if part.name == "training" else 10 * part.tiny_took for part in gpu_check.PARTS}
    assert boxes["paths"] > 3 * 150  # past the GPU's box, past the slower CPU's 150 s, three times over
    boxes.clear()
    gpu_check.main([str(tmp_path)])
    assert boxes == {part.name: part.seconds for part in gpu_check.PARTS}


def test_a_time_box_names_a_part(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["out", "--timeout", "everything=10"])
    assert "'everything' is no part; the parts: kernels, training, paths, profile" in capsys.readouterr().err


def test_a_rerun_after_a_lease_that_ran_out_keeps_what_it_measured_and_measures_the_rest(tmp_path, monkeypatch):
    """`gpu-check --after DIR`: a path that finished ok there is not run again, one that failed is; a training row
    measured there is kept (its MFU from its TFLOP/s where that run knew no peak: Lightning has none for "NVIDIA
    H200"), the others measured; a folder with no earlier call's files is refused in one line."""
    from scaling_axes.benchmarks import gpu_paths
    from scaling_axes.benchmarks.common import kept_rows

    def must_not_run(root):
        raise AssertionError("a kept path ran again")

    monkeypatch.setattr(gpu_paths, "paths", lambda: {"kept": must_not_run, "failed": lambda root: {"val_loss": 2.5}})
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    gpu_paths.write_csv(
        earlier / "paths.csv",
        gpu_paths.COLUMNS,
        [{"path": "kept", "status": "ok", "val_loss": 1.5}, {"path": "failed", "status": "failed", "error": "E"}],
    )
    gpu_paths.main(tmp_path / "paths.csv", kept_rows([earlier / "paths.csv", tmp_path / "none.csv"], gpu_paths.row_key))
    lines = (tmp_path / "paths.csv").read_text().splitlines()
    assert lines[1] == "kept,ok,1.5,,," and lines[2].startswith("failed,ok,2.5,")
    later = tmp_path / "later"  # a later call's folder: its row over the earlier's
    later.mkdir()
    gpu_paths.write_csv(later / "paths.csv", gpu_paths.COLUMNS, [{"path": "kept", "status": "ok", "val_loss": 1.25}])
    merged = kept_rows([earlier / "paths.csv", later / "paths.csv"], gpu_paths.row_key)
    assert {name: row["val_loss"] for name, row in merged.items()} == {"kept": "1.25"}
    assert gpu_check._kept([earlier, later]).endswith("0 rows of training.csv, 1 rows of paths.csv")  # once each
    launched = []
    monkeypatch.setattr(gpu_check, "launch", lambda part, out, seconds, tiny, after: launched.append(after) or "ran")
    monkeypatch.setattr(gpu_check, "write_summary", lambda out, outcomes, tiny, after: tmp_path / "summary.md")
    (tmp_path / "summary.md").write_text("")
    gpu_check.main([str(tmp_path / "out"), "--after", str(earlier), "--after", str(later)])
    assert launched == [[earlier, later]] * len(gpu_check.PARTS)

    case = training.Case("gpt2_124m", "nanogpt", "nanogpt_reference", {}, 2, 8, 0.0)
    measured = []
    monkeypatch.setattr(training, "DEVICE", "cpu")
    monkeypatch.setattr(training, "cases", lambda: [case])
    monkeypatch.setattr(training, "measure", lambda c, variant, repeats: measured.append(variant) or {"step_ms": 2.0})
    monkeypatch.setattr(training, "_peak", lambda: 400e12)
    row = {"gpu": "cpu", "family": "gpt2_124m", "architecture": "nanogpt", "variant": "eager", "step_ms": "4.0"}
    rows = training.bench(None, 1, [], kept={("cpu", "gpt2_124m", "nanogpt", "eager"): {**row, "tflops": "100.0"}})
    assert measured == ["compiled"] and [r["step_ms"] for r in rows] == [4.0, 2.0]
    assert rows[0]["mfu"] == 0.25 and rows[0]["mfu_peak_tflops"] == 400.0  # 100 of 400 TFLOP/s

    with pytest.raises(SystemExit):
        gpu_check.main([str(tmp_path / "out"), "--after", str(tmp_path / "out")])


def _h200_rows() -> tuple[list[dict], list[dict]]:
    """The committed H200 calls' kernel rows (first call) and training rows (second call: it holds the first's)."""
    from scaling_axes.io import read_rows

    results = Path(__file__).parents[1] / "results" / "gpu"
    kernel_rows = [
        {**r, "median_ms": float(r["median_ms"]) if r.get("median_ms") else None}
        for r in read_rows(results / "h200-call1" / "kernels.csv")
    ]
    training_rows = training_targets.numeric(read_rows(results / "h200-call2" / "training.csv"))
    training_targets.against_transformer(training_rows)
    return kernel_rows, training_rows


def test_the_docs_h200_targets_and_the_planners_mfu_are_what_the_committed_csvs_give():
    """docs/gpu-and-clusters.md's target lines are the suite's judgement of the committed CSVs, each one; the
    planner's MEASURED_MFU is the lowest best-variant MFU of the suite's presets there (nanoGPT's is no preset)."""
    from scaling_axes.benchmarks import kernels
    from scaling_axes.harness.training.hardware import MEASURED_MFU

    kernel_rows, training_rows = _h200_rows()
    lines = kernels.targets(kernel_rows) + training_targets.targets(training_rows)
    doc = (Path(__file__).parents[1] / "docs" / "gpu-and-clusters.md").read_text()
    assert len(lines) == 20 and [line for line in lines if f"- {line}\n" not in doc] == []
    best = {}
    for r in training_rows:
        if r["architecture"] != "nanogpt" and r["mfu"]:
            key = (r["family"], r["architecture"])
            best[key] = max(best.get(key, 0.0), r["mfu"])
    assert MEASURED_MFU == round(min(best.values()), 3)
