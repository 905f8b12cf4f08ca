"""Nothing that changes a result is trusted unchecked (issue 49's audit): tokenizers and floors verified, a run's
weights bound to it, a Lightning checkpoint verified before `fit` resumes it, settings that cannot be verified
making a run stale, and each failure one line naming the file or value and what to do."""

import dataclasses
import json
import shutil

import pytest
import torch

from scaling_axes.harness.experiment.finished import staleness
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.identical import IDENTICAL
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.interop.lm_eval_model import load_checkpoint
from scaling_axes.io import CorruptFileError, checksum_file, read_verified_json
from tests.test_integrity import _experiment, _flip, _interrupted
from tests.test_run_safety import tiny


def test_another_runs_weights_copied_in_with_their_checksum_are_refused(tmp_path) -> None:
    from scaling_axes.harness.runs import Run
    from scaling_axes.harness.training.rundir import read_done

    runs = (tiny(3), Run("other", "transformer_124m", tiny(3).budget, tiny(3).overrides, seed=7))
    for run in runs:
        Schedule.of(_experiment(*runs), SMOKE, tmp_path, accelerator="cpu").train(run)
    mine, other = tmp_path / "safety" / "smoke" / "r", tmp_path / "safety" / "smoke" / "other"
    for name in ("final.safetensors", "final.safetensors.blake2b"):
        shutil.copy(other / name, mine / name)
    with pytest.raises(CorruptFileError, match="is not the weights r wrote"):
        read_done(mine / "done.json")
    with pytest.raises(CorruptFileError, match="is not the weights r wrote"):
        load_checkpoint(mine)
    for name in ("config.json", "config.json.blake2b"):  # its config.json too: then the fingerprint tells
        shutil.copy(other / name, mine / name)
    with pytest.raises(CorruptFileError, match="belongs to another run"):
        read_done(mine / "done.json")


def test_a_tokenizer_other_than_the_one_a_run_trained_with_is_refused(tmp_path, monkeypatch) -> None:
    """The run records its tokenizer's digest; scoring (eval, lm-eval, export read it through `load_checkpoint`) and
    growth refuse a file that changed since."""
    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.harness.runs import Run
    from scaling_axes.harness.training.growth import source_weights

    source = shutil.copy(load_tokenizer("neox").source, tmp_path / "tokenizer.json")
    run = Run(
        "r",
        "transformer_124m",
        tiny(3).budget,
        {**tiny(3).overrides, "vocab_size": 50304},
        data={"tokenizer_path": str(source)},
        tokenizer="neox",
    )
    Schedule.of(_experiment(run), SMOKE, tmp_path / "runs", accelerator="cpu").train(run)
    out = tmp_path / "runs" / "safety" / "smoke" / "r"
    assert json.loads((out / "config.json").read_text())["tokenizer_blake2b"]
    load_checkpoint(out)  # as trained: accepted
    text = json.loads(source.read_text())
    vocab = text["model"]["vocab"]
    first, second = list(vocab)[:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two ids swapped
    source.write_text(json.dumps(text))
    with pytest.raises(CorruptFileError, match=r"is not the one .* trained with"):
        load_checkpoint(out)
    grown = Run(
        "g",
        "transformer_124m",
        run.budget,
        {**run.overrides, "d_model": 48},
        grow_from="r",
        data=run.data,
        tokenizer="neox",
    )
    with pytest.raises(CorruptFileError, match=r"is not the one .* trained with"):
        source_weights(out, grown)


def test_a_corrupt_or_edited_tokenizer_file_is_named(tmp_path) -> None:
    from scaling_axes.datamodules.tokenizers import load_tokenizer, read_tokenizer

    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": {"vocab": ')
    with pytest.raises(CorruptFileError, match=rf"{broken} is not a readable tokenizer"):
        load_tokenizer("neox", str(broken))
    with pytest.raises(CorruptFileError, match="has no checksum file"):
        read_tokenizer(shutil.copy(load_tokenizer("neox").source, tmp_path / "trained.json"), trained=True)


def test_fit_verifies_a_checkpoint_before_resuming_it(tmp_path, monkeypatch) -> None:
    from scaling_axes.harness.training.lightning_cli import fit_main

    def lightning(args: list[str]) -> None:
        raise AssertionError(f"{args[-1]} reached Lightning unverified")

    # were the check gone: fail, not train
    monkeypatch.setattr("scaling_axes.harness.training.lightning_cli.cli_main", lightning)

    out = tmp_path / "r"
    _interrupted(out)
    last = out / "checkpoints" / "last.ckpt"
    _flip(last)
    with pytest.raises(CorruptFileError, match="does not match the checksum written with it"):
        fit_main(["--ckpt_path", str(last)])
    last.write_bytes(last.read_bytes()[:1000])  # truncated
    with pytest.raises(CorruptFileError, match=str(last)):
        fit_main([f"--ckpt_path={last}"])


def test_settings_whose_checksum_is_gone_make_a_run_stale(tmp_path) -> None:
    run = tiny(3)
    Schedule.of(_experiment(run), SMOKE, tmp_path, accelerator="cpu").train(run)
    out = tmp_path / "safety" / "smoke" / "r"
    assert staleness(run, out) is None
    checksum_file(out / "config.yaml").unlink()
    assert "cannot be verified" in staleness(run, out)


def test_the_precision_recorded_is_the_one_that_ran(tmp_path) -> None:
    out = tmp_path / "r"
    done = train_run(tiny(2), out, accelerator="cpu", precision="16-mixed")  # Lightning runs bf16-mixed on the CPU
    assert done["precision"] == "bf16-mixed"
    config = (out / "config.yaml").read_text()
    assert "precision: bf16-mixed" in config and "16-mixed\n" not in config.replace("bf16-mixed\n", "")


def test_a_launch_stopped_before_any_checkpoint_leaves_no_run_to_refuse(tmp_path) -> None:
    """A refusal on data, or a cluster launch stopped before training, can leave a config.yaml: the next launch with
    other settings replaces it (nothing of that run was kept), where one that checkpointed is refused."""
    out = tmp_path / "r"
    out.mkdir()
    from scaling_axes.harness.training.launch import resolve
    from scaling_axes.harness.training.settings import write_config

    write_config(resolve(tiny(2), out, {"precision": "bf16-mixed"}), tiny(2))
    assert train_run(tiny(2), out, accelerator="cpu")["steps"] == 2
    _interrupted(tmp_path / "s")
    with pytest.raises(SystemExit, match="other settings"):
        train_run(tiny(), tmp_path / "s", accelerator="cpu", precision="bf16-mixed")


def test_a_full_disk_while_final_weights_are_written_is_one_line(tmp_path, monkeypatch) -> None:
    import safetensors.torch

    from scaling_axes.io import atomic_save_safetensors

    def full(*args, **kwargs):
        raise safetensors.SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(OSError, match=r"could not write .*final\.safetensors \(No space left on device\): free space"):
        atomic_save_safetensors({"w": torch.zeros(2)}, tmp_path / "final.safetensors", checksum=True)
    assert list(tmp_path.iterdir()) == []


def test_a_non_finite_loss_is_one_line_on_the_command_line(tmp_path, capsys, monkeypatch) -> None:
    from scaling_axes.cli import cli

    monkeypatch.chdir(tmp_path)
    overrides = '{"n_layer": 1, "d_model": 16, "n_head": 2, "max_seq_len": 16, "vocab_size": 256}'
    with pytest.raises(SystemExit) as stopped:
        cli(
            [
                "fit",
                "--model.model",
                "transformer_124m",
                "--model.model_overrides",
                overrides,
                "--model.lr",
                "1e30",
                "--data.corpus",
                "embedded_news",
                "--data.tokenizer",
                "bytes",
                "--data.seq_len",
                "16",
                "--data.batch_size",
                "2",
                "--trainer.max_steps",
                "6",
                "--trainer.accelerator",
                "cpu",
                "--trainer.default_root_dir",
                str(tmp_path),
            ]
        )
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "error: non-finite training loss" in err and "Traceback" not in err


@pytest.mark.slow  # a killed process and its rerun each: 15-20 s (test_integrity keeps one kill in make test)
@pytest.mark.parametrize("damage", ["deleted", "cut"])
def test_a_resume_writes_the_metrics_log_again_from_the_checkpoint(tmp_path, damage, uninterrupted_run) -> None:
    """metrics.csv deleted (or cut) after a kill past a checkpoint: the resumed run's curves are the uninterrupted
    run's, every row once."""
    from tests.test_integrity import _rows, _run_script

    cut = tmp_path / "cut"
    assert _run_script(cut, "on_train_batch_start", 10, "True").returncode == 9  # killed after step 8's checkpoint
    log = cut / "metrics.csv"
    if damage == "deleted":
        log.unlink()
    else:
        log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))
    assert _run_script(cut).returncode == 0
    assert _rows(cut) == _rows(uninterrupted_run)


def test_a_grown_run_killed_before_its_first_checkpoint_keeps_its_step_0_point(tmp_path) -> None:
    import lightning as L

    from scaling_axes.harness.runs import Run
    from scaling_axes.harness.training.growth import source_weights
    from scaling_axes.harness.training.launch import resolve
    from scaling_axes.harness.training.lifecycle import train
    from tests.test_integrity import _rows

    class Killed(L.Callback):  # dies as kill -9 would: no checkpoint written on the way out
        def on_train_batch_start(self, trainer, *args) -> None:
            if trainer.global_step == 2:
                raise RuntimeError("killed")

    source = tiny(3)
    Schedule.of(_experiment(source), SMOKE, tmp_path, accelerator="cpu").train(source)
    source_dir = tmp_path / "safety" / "smoke" / "r"
    stage = Run("g", "transformer_124m", tiny(6).budget, {**tiny(6).overrides, "d_model": 48}, grow_from="r")
    outs = {}
    for name, stop in (("whole", None), ("cut", 2)):
        out = tmp_path / name
        launch = resolve(stage, out, {"accelerator": "cpu"}, source=(source, source_weights(source_dir, stage)))
        if stop:
            with pytest.raises(RuntimeError, match="killed"):
                train(launch, extra_callbacks=[Killed()])
            assert not (out / "checkpoints" / "last.ckpt").exists()
        train(launch)
        outs[name] = out
    assert _rows(outs["cut"]) == _rows(outs["whole"]) and any(r["step"] == "0" for r in _rows(outs["whole"]))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Every kind of file the suite writes with a checksum, from a source run and a stage grown from it, and a
    prepared corpus with its trained BPE and floor: (experiment, the runs, their directory, the data root)."""
    from scaling_axes.datamodules.corpora import prepare_corpus
    from scaling_axes.datamodules.floors import unigram_floor
    from scaling_axes.harness.runs import Run

    root = tmp_path_factory.mktemp("written")
    data = root / "data"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCALING_AXES_DATA", str(data))
        prepare_corpus("embedded_wiki", "wiki_bpe2048")
        unigram_floor("embedded_wiki", "wiki_bpe2048")
    source = tiny(3)
    stage = Run("g", "transformer_124m", tiny(3).budget, {**tiny(3).overrides, "d_model": 48}, grow_from="r")
    experiment = _experiment(source, stage)
    keeping = dataclasses.replace(SMOKE, keeps_final_checkpoint=True)  # so that a finished run's last.ckpt is there
    Schedule.of(experiment, keeping, root / "runs", accelerator="cpu").train(stage)
    return experiment, (source, stage), root / "runs" / "safety" / "smoke", data


CHECKSUMMED = [
    "checkpoints/last.ckpt",
    "final.safetensors",
    "config.json",
    "done.json",
    "config.yaml",
    "init_grown.safetensors",
    "init_grown_overrides.json",
    "growth_metrics.json",
    "meta.json",
    "unigram.json",
    "wiki_bpe2048.json",
]


@pytest.mark.parametrize("name", CHECKSUMMED)
def test_no_file_the_suite_trusts_passes_without_its_checksum(written, name, monkeypatch) -> None:
    """Each kind of file written with a checksum, its checksum deleted: where it is read, a refusal (or, for a run's
    settings, `stale`), never a pass."""
    from scaling_axes.datamodules.corpora import corpus_dir, open_split
    from scaling_axes.datamodules.floors import unigram_floor
    from scaling_axes.datamodules.tokenizers import corpus_bpe_file, load_tokenizer
    from scaling_axes.harness.training.growth import grown_run
    from scaling_axes.harness.training.lightning_cli import verify_resumed
    from scaling_axes.harness.training.rundir import final_weights, read_done

    _, (source, stage), runs, data = written
    monkeypatch.setenv("SCALING_AXES_DATA", str(data))
    corpus = corpus_dir(data, "embedded_wiki", "wiki_bpe2048")
    where = {"meta.json": corpus, "unigram.json": corpus, "wiki_bpe2048.json": corpus_bpe_file("wiki_bpe2048").parent}
    grown = {"init_grown.safetensors", "init_grown_overrides.json", "growth_metrics.json"}
    path = where.get(name, runs / ("g" if name in grown else "r")) / name
    readers = {
        "checkpoints/last.ckpt": lambda: verify_resumed(str(path)),
        "final.safetensors": lambda: read_done(runs / "r" / "done.json"),
        "config.json": lambda: load_checkpoint(runs / "r"),
        "done.json": lambda: read_done(runs / "r" / "done.json"),
        "init_grown.safetensors": lambda: grown_run(source, final_weights(runs / "r"), stage, runs / "g"),
        "init_grown_overrides.json": lambda: grown_run(source, final_weights(runs / "r"), stage, runs / "g"),
        "growth_metrics.json": lambda: read_verified_json(path, "rerun"),  # as `training._fit` reads it
        "meta.json": lambda: open_split(corpus, "train"),
        "unigram.json": lambda: unigram_floor("embedded_wiki", "wiki_bpe2048"),
        "wiki_bpe2048.json": lambda: load_tokenizer("wiki_bpe2048"),
    }
    assert path.exists() and checksum_file(path).exists(), path
    saved = checksum_file(path).read_bytes()
    checksum_file(path).unlink()
    try:
        if name == "config.yaml":
            assert "cannot be verified" in staleness(source, runs / "r")
        else:
            with pytest.raises(CorruptFileError, match="checksum"):
                readers[name]()
    finally:
        checksum_file(path).write_bytes(saved)


def test_a_run_moved_aside_is_shared_no_more(tmp_path, capsys) -> None:
    """A's run r is shared with B; retrained with --force-new under other settings, r no longer stands for B's run:
    B's link and the index entry go, and B trains its own."""
    import dataclasses

    from scaling_axes.harness.experiment.finished import FinishedRuns
    from scaling_axes.harness.runs import Experiment
    from scaling_axes.harness.scales import CPU

    run = tiny(2)
    first = Experiment("first", "", lambda scale: [run], lambda scale, results: [])
    second = Experiment("second", "", lambda scale: [run], lambda scale, results: [])
    runs = tmp_path / "runs"
    Schedule.of(first, CPU, runs, accelerator="cpu").train(run)
    Schedule.of(second, CPU, runs, accelerator="cpu").train(run)
    assert (runs / "second" / "cpu" / "r").is_symlink()
    other = dataclasses.replace(run, budget=dataclasses.replace(run.budget, lr=1e-3))
    first_again = Experiment("first", "", lambda scale: [other], lambda scale, results: [])
    Schedule.of(first_again, CPU, runs, force_new=True, accelerator="cpu").train(other)
    assert not (runs / "second" / "cpu" / "r").exists()  # the link to what r was: gone
    capsys.readouterr()
    Schedule.of(second, CPU, runs, accelerator="cpu").train(run)
    assert "training run r" in capsys.readouterr().out and not (runs / "second" / "cpu" / "r").is_symlink()
    assert "stale" not in FinishedRuns(second, CPU, runs).results()["r"]
    for index in (runs / IDENTICAL / "cpu").iterdir():  # entries whose run holds other settings than they recorded
        index.write_text(json.dumps({**json.loads(index.read_text()), "fingerprint": "of other settings"}))
    third = Experiment("third", "", lambda scale: [run], lambda scale, results: [])
    Schedule.of(third, CPU, runs, accelerator="cpu").train(run)
    assert "training run r" in capsys.readouterr().out and not (runs / "third" / "cpu" / "r").is_symlink()
