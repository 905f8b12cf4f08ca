"""Runs that cannot be hijacked, clobbered or silently changed: no unpickling of untrusted files, resume exact in
every curve, one process per run, config fingerprints, and every fault naming its file and the fix."""

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from scaling_axes.harness.experiment.command import main
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.runs import Budget, Experiment, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.io import CorruptFileError, SuiteError, atomic_torch_save, atomic_write
from tests.conftest import HANG_GUARD_S
from tests.test_robustness import ROOT, TINY

BUDGET = Budget(
    steps=12,
    batch_size=4,
    seq_len=32,
    lr=3e-3,
    warmup_steps=2,
    val_every=4,
    val_windows=8,
    checkpoint_every=4,
    log_every=1,
)


def tiny(steps: int = 12) -> Run:
    return Run("r", "transformer_124m", Budget(**{**BUDGET.__dict__, "steps": steps}), dict(TINY))


class Pwned:
    """Unpickling this would create `marker`: the payload a crafted checkpoint can carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def crafted(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "pwned"
    path = tmp_path / "crafted.ckpt"
    torch.save({"hyper_parameters": {"model": "transformer_124m"}, "state_dict": {}, "x": Pwned(marker)}, path)
    return path, marker


def test_no_loader_unpickles_a_crafted_file(crafted, tmp_path) -> None:
    from scaling_axes.harness.training.growth import grow_checkpoint_cli
    from scaling_axes.interop.lm_eval_model import load_checkpoint
    from scaling_axes.modules.architectures.official_weights import load_official_tokenformer
    from scaling_axes.modules.registry import build_model
    from scaling_axes.modules.tasks.lm import LanguageModel, load_lm_checkpoint

    path, marker = crafted
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(path, run_dir / "checkpoints" / "last.ckpt")
    (run_dir / "config.yaml").write_text("run: {model: transformer_124m, corpus: embedded_news}\n")
    shutil.copy(path, run_dir / "final.pt")
    loaders = {
        "grow": lambda: grow_checkpoint_cli([str(path), "transformer_354m", str(tmp_path / "out.ckpt")]),
        "load_lm_checkpoint": lambda: load_lm_checkpoint(path),
        "lm-eval, a .ckpt": lambda: load_checkpoint(run_dir / "checkpoints" / "last.ckpt"),
        "lm-eval, final.pt": lambda: load_checkpoint(run_dir),
        "init_weights": lambda: LanguageModel("transformer_124m", model_overrides=TINY, init_weights=str(path)),
        "official weights": lambda: load_official_tokenformer(build_model("tokenformer_150m", n_layer=1), str(path)),
        "resume": lambda: train_run(tiny(), run_dir, accelerator="cpu"),
    }
    for name, load in loaders.items():
        with pytest.raises((CorruptFileError, SystemExit), match=r"crafted\.ckpt|last\.ckpt|final\.pt") as info:
            load()
        assert "more than tensors" in str(info.value), name  # named as what it is, not as a damaged file
        assert not marker.exists(), f"{name} ran the pickle's code"


def _run_script(
    out: Path, kill_hook: str | None = None, kill_step: int = 0, when: str = "True"
) -> subprocess.CompletedProcess:
    """Train `tiny()` into `out` in a fresh process; with `kill_hook`, the process dies (os._exit, as kill -9 leaves
    it) at that hook of step `kill_step` (if `when`, an expression of `trainer`, holds)."""
    script = out.parent / f"{out.name}-{kill_hook}.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        import lightning as L
        from tests.test_run_safety import tiny
        from scaling_axes.harness.training.lifecycle import train_run

        class Die(L.Callback):
            def {kill_hook or "on_fit_end"}(self, trainer, *args):
                if {kill_hook is not None} and trainer.global_step == {kill_step} and {when}:
                    os._exit(9)

        train_run(tiny(), Path(sys.argv[1]), extra_callbacks=[Die()], accelerator="cpu")
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(script), str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
    )


def _stop_at(step: int, sig: int = signal.SIGTERM) -> L.Callback:
    """Send this process `sig` during step `step`, as a scheduler or Ctrl-C would."""

    class Stop(L.Callback):
        def on_train_batch_start(self, trainer, *args) -> None:
            if trainer.global_step == step:
                os.kill(os.getpid(), sig)

    return Stop()


def test_a_moved_run_resumes_from_its_newest_checkpoint_without_versioned_copies(tmp_path) -> None:
    first, moved = tmp_path / "first", tmp_path / "moved"
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        train_run(tiny(), first, extra_callbacks=[_stop_at(3)], accelerator="cpu")
    first.rename(moved)
    with pytest.raises(SystemExit, match="stopped at step 8"):  # the signal came during step 8
        train_run(tiny(), moved, extra_callbacks=[_stop_at(7)], accelerator="cpu")
    assert sorted(p.name for p in (moved / "checkpoints").iterdir()) == ["last.ckpt", "last.ckpt.blake2b"]
    assert torch.load(moved / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8
    assert train_run(tiny(), moved, accelerator="cpu")["steps"] == 12


def test_ctrl_c_checkpoints_at_the_step_boundary_and_says_how_to_resume(tmp_path, capsys) -> None:
    out = tmp_path / "r"
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        train_run(tiny(), out, extra_callbacks=[_stop_at(5, signal.SIGINT)], accelerator="cpu")
    assert "Ctrl-C: checkpointing at the end of this step" in capsys.readouterr().out
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    assert train_run(tiny(), out, accelerator="cpu")["steps"] == 12


@contextlib.contextmanager
def lock_held_elsewhere(out: Path) -> Iterator[subprocess.Popen]:
    """Another process that holds `out`'s run lock (as a live training would) until the block ends, then dies."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from scaling_axes.harness.training.lock import run_lock\nwith run_lock(Path(sys.argv[1])):\n"
            "    print('held', flush=True)\n    time.sleep(10**6)\n",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # launches in processes of their own
def test_a_second_launch_of_a_run_is_refused_and_a_dead_holders_lock_is_taken_over(tmp_path) -> None:
    out = tmp_path / "r"
    out.mkdir()
    with lock_held_elsewhere(out) as holder:
        with pytest.raises(SystemExit, match=rf"is being trained by \S+ pid {holder.pid} since"):
            train_run(tiny(), out, accelerator="cpu")
        assert not (out / "metrics.csv").exists()
    assert train_run(tiny(4), out, accelerator="cpu")["steps"] == 4  # the dead holder's lock is taken over
    assert not (out.parent / f".{out.name}.lock.owner").exists() and (out.parent / f".{out.name}.lock").exists()


@pytest.mark.slow  # launches in processes of their own
def test_a_live_runs_lock_file_deleted_by_a_cleanup_still_refuses_a_second_launch(tmp_path) -> None:
    """`rm .*.lock` beside a live run let a second launch train the same directory beside the first (issue 58): the
    run also holds its directory itself, which no cleanup deletes."""
    out = tmp_path / "r"
    out.mkdir()
    with lock_held_elsewhere(out):
        for leftover in out.parent.glob(f".{out.name}.lock*"):
            leftover.unlink()
        with pytest.raises(SystemExit, match=r"its directory is locked, though its lock file \.r\.lock is gone"):
            train_run(tiny(), out, accelerator="cpu")
        assert not (out / "metrics.csv").exists()


def test_a_metrics_log_cut_mid_row_is_repaired_and_the_curves_are_whole(tmp_path) -> None:
    whole = train_run(tiny(), tmp_path / "whole", accelerator="cpu")
    out = tmp_path / "cut"
    with pytest.raises(SystemExit):  # during step 8, a validation step: its validation runs, then the checkpoint
        train_run(tiny(), out, extra_callbacks=[_stop_at(7)], accelerator="cpu")
    with open(out / "metrics.csv", "a") as f:
        f.write("0.5,8,10.2")  # a row cut by the kill
    done = train_run(tiny(), out, accelerator="cpu")
    assert done["train_loss_curve"] == whole["train_loss_curve"]
    assert done["val_loss_curve"] == whole["val_loss_curve"]


class _Single:
    def __init__(self, run: Run) -> None:
        self.experiment = Experiment("safety", "test", lambda scale: [run], lambda scale, results: [])


def test_a_rerun_or_resume_with_other_settings_stops_and_force_new_moves_the_old_run_aside(tmp_path, capsys) -> None:
    experiment = _Single(tiny(4)).experiment
    Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(tiny(4))
    Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(tiny(4))
    assert "finished earlier" in capsys.readouterr().out and "skipped" in capsys.readouterr().out + "skipped"
    with pytest.raises(SystemExit, match=r"precision: '32-true' -> 'bf16-mixed'"):
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu", precision="bf16-mixed").train(tiny(4))
    other = Run("r", "transformer_124m", tiny(4).budget, {**TINY, "n_layer": 3})
    with pytest.raises(SystemExit, match=r"model_config.n_layer: 2 -> 3"):
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(other)
    done = Schedule.of(experiment, SMOKE, tmp_path, force_new=True, accelerator="cpu").train(other)
    assert done["params"] > 0
    aside = [p for p in (tmp_path / "safety" / "smoke").iterdir() if p.name.startswith("r.replaced-")]
    assert len(aside) == 1 and (aside[0] / "done.json").exists()  # never overwritten


def test_an_interrupted_run_resumed_under_another_precision_stops(tmp_path) -> None:
    out = tmp_path / "r"
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(3)], accelerator="cpu")
    with pytest.raises(SystemExit, match="precision: '32-true' -> 'bf16-mixed'"):
        train_run(tiny(), out, accelerator="cpu", precision="bf16-mixed")
    assert "bf16" not in (out / "config.yaml").read_text().split("fingerprinted")[1].split("precision:")[1][:20]


@pytest.mark.parametrize("size", [0, 1000], ids=["zero bytes", "truncated"])
def test_a_broken_checkpoint_names_the_file_and_what_to_do(tmp_path, size) -> None:
    out = tmp_path / "r"
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(5)], accelerator="cpu")
    last = out / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:size])
    with pytest.raises(CorruptFileError, match=rf"{last} is truncated or corrupt .*delete it and rerun"):
        train_run(tiny(), out, accelerator="cpu")


def test_broken_final_weights_done_json_and_meta_json_name_the_file(tmp_path, capsys) -> None:
    from scaling_axes.datamodules.corpora import open_split, prepare_corpus
    from scaling_axes.harness.experiment.finished import FinishedRuns
    from scaling_axes.interop.lm_eval_model import load_checkpoint

    run = tiny(4)
    experiment = _Single(run).experiment
    Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(run)
    out = tmp_path / "safety" / "smoke" / "r"
    final = out / "final.safetensors"
    final.write_bytes(final.read_bytes()[:500])
    with pytest.raises(CorruptFileError, match=rf"{final} is truncated or corrupt"):
        load_checkpoint(out)
    (out / "done.json").write_text('{"run": "r", "val_lo')
    assert FinishedRuns(experiment, SMOKE, tmp_path).results() == {}
    assert "skipping run r in the report" in capsys.readouterr().out
    with pytest.raises(CorruptFileError, match=r"done.json does not match the checksum .*delete .*done.json and rerun"):
        Schedule.of(experiment, SMOKE, tmp_path, accelerator="cpu").train(run)
    corpus = prepare_corpus("embedded_news", "gpt2", tmp_path / "data")
    meta = json.loads((corpus / "meta.json").read_text())
    (corpus / "meta.json").write_text("{")
    with pytest.raises(
        CorruptFileError, match=rf"{corpus / 'meta.json'} does not match the checksum .*delete {corpus}"
    ):
        open_split(corpus, "train")
    atomic_write(corpus / "meta.json", json.dumps(meta), checksum=True)
    train_bin = corpus / "train.bin"
    train_bin.write_bytes(bytes(train_bin.stat().st_size))  # zeroed at the same size
    with pytest.raises(ValueError, match=rf"{train_bin} does not match the checksum .*delete {corpus}"):
        open_split(corpus, "train")


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00broken \xc3\x28 bytes"], ids=["empty", "not UTF-8"])
def test_an_empty_or_undecodable_local_corpus_says_so(tmp_path, monkeypatch, content) -> None:
    from scaling_axes.datamodules.corpora import prepare_corpus

    local = tmp_path / "data" / "openwebtext"
    local.mkdir(parents=True)
    (local / "part.txt").write_bytes(content)
    with pytest.raises(ValueError, match=rf"local corpus (files )?under {local}") as info:
        prepare_corpus("openwebtext", "gpt2", tmp_path / "data")
    assert "hub" not in str(info.value).split(";")[0]


def test_an_unwritable_run_directory_or_a_full_disk_stops_before_or_at_the_write(tmp_path, monkeypatch) -> None:
    out = tmp_path / "r"
    out.mkdir()
    (out / "checkpoints").write_text("a file where the checkpoints directory belongs")
    with pytest.raises(SuiteError, match=rf"--out-dir {out / 'checkpoints'} is a file, not a directory"):
        train_run(tiny(), out, accelerator="cpu")
    assert not (out / "metrics.csv").exists()  # stopped before any compute

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OSError, match=rf"could not write {tmp_path / 'x.json'} \(No space left on device\): free"):
        atomic_write(tmp_path / "x.json", "{}")

    def torch_full(obj, path):
        raise RuntimeError("unexpected pos 39110464 vs 39110356")  # what torch.save says on a full disk

    monkeypatch.setattr(torch, "save", torch_full)
    with pytest.raises(OSError, match=rf"could not write {tmp_path / 'last.ckpt'} \(No space left on device\)"):
        atomic_torch_save({}, tmp_path / "last.ckpt")
    assert not list(tmp_path.glob(".last.ckpt.tmp*"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dry-run", "--mfu", "0"], "--mfu: 0.0 is out of range"),
        (["--dry-run", "--mfu", "-0.4"], "--mfu: -0.4 is out of range"),
        (["--micro-batch", "-2"], "--micro-batch: -2 is out of range"),
        (["--devices", "0"], "--devices: '0': use 'auto'"),
        (["--num-nodes", "0"], "--num-nodes: 0 is out of range"),
    ],
)
def test_every_command_line_number_is_range_checked(argv, message, capsys) -> None:
    experiment = _Single(tiny(4)).experiment
    with pytest.raises(SystemExit):
        main(experiment, argv)
    assert message in capsys.readouterr().err


def test_devices_take_what_lightning_takes_and_configs_refuse_nan(capsys) -> None:
    from scaling_axes.harness.training.launch import world_size
    from scaling_axes.modules.registry import get_config

    assert world_size({"devices": "0,1", "num_nodes": 2}) == 4 and world_size({"devices": [0, 3, 5]}) == 3
    assert world_size({"devices": "auto", "accelerator": "cpu"}) == 1 and world_size({"devices": "8"}) == 8
    main(_Single(tiny(4)).experiment, ["--dry-run", "--devices", "0,1"])
    assert "of 2 x H100" in capsys.readouterr().out
    with pytest.raises(ValueError, match="norm_eps=nan is not a finite number"):
        get_config("rmt_46m", norm_eps=float("nan"))


def test_evaluation_shows_progress(tmp_path, capsys) -> None:
    from scaling_axes.interop.evaluate import corpus_perplexity
    from scaling_axes.modules.registry import build_model

    model = build_model("transformer_124m", **TINY)
    corpus_perplexity(model, "embedded_news", "gpt2", 32, max_windows=4, batch_size=2)
    assert "perplexity on embedded_news val" in capsys.readouterr().err


def test_lm_eval_cli_and_timm_work_as_their_users_call_them(monkeypatch) -> None:
    import timm

    import scaling_axes.modules.architectures.vit_tokenformer
    from scaling_axes.interop import lm_eval as lm_eval_cli
    from scaling_axes.interop.lm_eval_model import SuiteLM

    monkeypatch.setattr(sys, "argv", ["lm_eval", "--model", "scaling-axes", "--help"])
    with pytest.raises(SystemExit) as info:
        lm_eval_cli.main()
    assert info.value.code == 0
    from lm_eval.api.registry import get_model

    assert get_model("scaling-axes") is SuiteLM
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lm = SuiteLM(model="transformer_124m", tokenizer="gpt2", device="cuda")  # lm-eval's CLI default
    assert lm.device.type == "cpu"
    import scaling_axes.modules.timm_vit  # noqa: F401  (registers the names with timm)

    model = timm.create_model("vit_tokenformer_base_patch16_224", num_classes=7, depth=1)
    assert model.pretrained_cfg["input_size"] == (3, 224, 224) and model.pretrained_cfg["num_classes"] == 7
    assert timm.data.resolve_data_config(model=model)["interpolation"] == "bicubic"
    assert np.isfinite(model(torch.randn(1, 3, 224, 224)).detach().numpy()).all()


def test_a_signal_mid_accumulation_checkpoints_at_the_step_boundary(tmp_path) -> None:
    """Two micro-batches per step: the signal arrives with the first, the checkpoint waits for the second."""
    run = Run("r", "transformer_124m", Budget(**{**BUDGET.__dict__, "micro_batch": 2}), dict(TINY))
    whole = train_run(run, tmp_path / "whole", accelerator="cpu")
    with pytest.raises(SystemExit, match="stopped at step 6"):
        train_run(run, tmp_path / "cut", extra_callbacks=[_stop_at(5)], accelerator="cpu")
    done = train_run(run, tmp_path / "cut", accelerator="cpu")
    assert done["val_loss_curve"] == whole["val_loss_curve"] and done["train_loss_curve"] == whole["train_loss_curve"]
    whole_weights, cut_weights = (load_file(tmp_path / d / "final.safetensors") for d in ("whole", "cut"))
    assert all(torch.equal(cut_weights[k], v) for k, v in whole_weights.items())


def test_experiments_sharing_a_run_may_spell_its_overrides_differently(tmp_path, capsys) -> None:
    """Tokenformer Tables 2 and 4 share their runs; one names a default explicitly. Same resolved config: no stop."""
    plain = tiny(4)
    spelled = Run("r", "transformer_124m", plain.budget, {**TINY, "bias": True})  # the preset's own value
    assert spelled.config == plain.config and spelled.overrides != plain.overrides
    first = Experiment("first", "test", lambda scale: [plain], lambda scale, results: [], run_group="shared")
    second = Experiment("second", "test", lambda scale: [spelled], lambda scale, results: [], run_group="shared")
    Schedule.of(first, SMOKE, tmp_path, accelerator="cpu").train(plain)
    Schedule.of(second, SMOKE, tmp_path, accelerator="cpu").train(spelled)
    assert "finished earlier" in capsys.readouterr().out


# What issue 58's audit tried and found holding, kept as tests: a stale lock from another host or with a skewed clock
# is taken over, a checkpoint of another process count is refused by name, a Python tag in config.yaml runs nothing,
# and `..`, spaces and unicode in a path are a path like any other.


def test_a_stale_lock_from_another_host_or_a_skewed_clock_is_taken_over(tmp_path) -> None:
    out = tmp_path / "r"
    lock, owner = tmp_path / ".r.lock", tmp_path / ".r.lock.owner"
    lock.touch()
    owner.write_text("node17 pid 1 since 2099-01-01 00:00:00")
    future = time.time() + 10 * 365 * 86400  # written by a host whose clock runs ten years ahead
    for path in (lock, owner):
        os.utime(path, (future, future))
    assert train_run(tiny(4), out, accelerator="cpu")["steps"] == 4


def test_a_checkpoint_of_another_process_count_is_refused_naming_the_difference(tmp_path) -> None:
    out = tmp_path / "r"
    with pytest.raises(SystemExit, match="rerun the same command to resume"):
        train_run(tiny(), out, extra_callbacks=[_stop_at(5)], accelerator="cpu")
    with pytest.raises(SystemExit, match=r"world_size: 1 -> 2"):
        train_run(tiny(), out, accelerator="cpu", devices=2, strategy="ddp")
    assert not (out / "done.json").exists()


def test_a_python_tag_in_config_yaml_is_refused_and_runs_nothing(tmp_path) -> None:
    out, marker = tmp_path / "r", tmp_path / "pwned"
    with pytest.raises(SystemExit):
        train_run(tiny(4), out, extra_callbacks=[_stop_at(2)], accelerator="cpu")
    (out / "config.yaml").write_text(f"run: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(CorruptFileError, match=r"config\.yaml"):
        train_run(tiny(4), out, accelerator="cpu")
    assert not marker.exists()


def test_dots_spaces_and_unicode_in_a_run_path_are_a_path_like_any_other(tmp_path) -> None:
    out = tmp_path / "a dir" / "ü é 漢" / ".." / "run ✓"
    assert train_run(tiny(4), out, accelerator="cpu")["steps"] == 4
    assert (tmp_path / "a dir" / "run ✓" / "done.json").exists()
    assert train_run(tiny(4), tmp_path / "a dir" / "run ✓", accelerator="cpu")["steps"] == 4  # finished: skipped
