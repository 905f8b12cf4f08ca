"""The holes fault injection found: --force-new racing a live run or restarting a requeued one, flipped checkpoint
bytes, temporaries of killed writes, malformed run files, what the fingerprint covers, and the command line's
one-line errors (exit status 2, `--debug` for the traceback) checked before any compute."""

import dataclasses
import json
import re
import shutil

import pytest
import torch
import yaml

from scaling_axes.cli import cli
from scaling_axes.harness.experiment.command import main
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.runs import Experiment, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.launch import fingerprint_fields, resolve_options
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.harness.training.rundir import write_done
from scaling_axes.harness.training.settings import fingerprint_changes
from scaling_axes.interop.lm_eval_model import load_checkpoint
from scaling_axes.io import CorruptFileError, SuiteError, atomic_torch_save, atomic_write
from tests.conftest import HANG_GUARD_S
from tests.test_robustness import ROOT, TINY
from tests.test_run_safety import _stop_at, lock_held_elsewhere, tiny


def _experiment(*runs: Run) -> Experiment:
    return Experiment("safety", "test", lambda scale: list(runs), lambda scale, results: [])


@pytest.mark.slow  # a second training process
def test_force_new_refuses_while_another_process_trains_the_run(tmp_path) -> None:
    out = tmp_path / "safety" / "smoke" / "r"
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(3)], accelerator="cpu")
    with lock_held_elsewhere(out) as holder:
        other = Run("r", "transformer_124m", tiny().budget, {**TINY, "n_layer": 3})
        with pytest.raises(SystemExit, match=rf"is being trained by \S+ pid {holder.pid}"):
            Schedule.of(_experiment(other), SMOKE, tmp_path, force_new=True, accelerator="cpu").train(other)
    assert sorted(p.name for p in out.parent.iterdir() if not p.name.startswith(".")) == ["r"]  # nothing moved
    assert not (out / "done.json").exists()


def test_a_requeued_force_new_resumes_a_run_whose_settings_match(tmp_path, capsys) -> None:
    out = tmp_path / "safety" / "smoke" / "r"
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(5)], accelerator="cpu")
    capsys.readouterr()
    done = Schedule.of(_experiment(tiny()), SMOKE, tmp_path, force_new=True, accelerator="cpu").train(tiny())
    assert done["steps"] == 12 and [p.name for p in out.parent.iterdir() if not p.name.startswith(".")] == ["r"]
    resumed = capsys.readouterr().out
    assert "step 12/12" in resumed and "step 1/12" not in resumed  # resumed from its checkpoint, not restarted
    Schedule.of(_experiment(tiny()), SMOKE, tmp_path, force_new=True, accelerator="cpu").train(tiny())  # finished: kept
    assert "finished earlier" in capsys.readouterr().out and not list(out.parent.glob("r.replaced-*"))


def test_force_new_keeps_a_finished_run_whose_only_change_is_the_suites_code(tmp_path, capsys, monkeypatch) -> None:
    """Issue 83's pilot: a --force-new for one changed run moved aside (to retrain) every finished run of the
    experiment, because the suite's code had moved on since they trained; a finished run is read whichever code
    reads it, so it is kept. A run with another setting is still moved aside."""
    from scaling_axes.harness.training import launch

    out = tmp_path / "safety" / "smoke" / "r"
    Schedule.of(_experiment(tiny()), SMOKE, tmp_path, accelerator="cpu").train(tiny())
    monkeypatch.setattr(launch, "source_digest", lambda: "0123456789abcdef")
    capsys.readouterr()
    Schedule.of(_experiment(tiny()), SMOKE, tmp_path, force_new=True, accelerator="cpu").train(tiny())
    assert "finished earlier" in capsys.readouterr().out and not list(out.parent.glob("r.replaced-*"))
    longer = dataclasses.replace(tiny(), budget=dataclasses.replace(tiny().budget, steps=13))
    Schedule.of(_experiment(longer), SMOKE, tmp_path, force_new=True, accelerator="cpu").train(longer)
    assert len(list(out.parent.glob("r.replaced-*"))) == 1


def test_flipped_bytes_in_a_checkpoint_are_not_resumed(tmp_path) -> None:
    out = tmp_path / "r"
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(5)], accelerator="cpu")
    last = out / "checkpoints" / "last.ckpt"
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit pattern in the tensors' bytes: the archive itself still opens
    last.write_bytes(bytes(data))
    torch.load(last, weights_only=True)
    with pytest.raises(CorruptFileError, match=rf"{last} does not match the checksum written with it .*delete it"):
        train_run(tiny(), out, accelerator="cpu")


def test_temporaries_left_by_killed_writes_are_removed_on_the_next_start(tmp_path) -> None:
    out = tmp_path / "r"
    (out / "checkpoints").mkdir(parents=True)
    left = [out / "checkpoints" / ".last.ckpt.tmp4242", out / ".done.json.tmp4242", out / ".metrics.csv.tmp17"]
    for path in left:
        path.write_bytes(b"\0" * 64)
    kept = out / "notes.tmp.txt"  # not a temporary of the suite's
    kept.write_text("mine")
    train_run(tiny(4), out, accelerator="cpu")
    assert not any(p.exists() for p in left) and kept.exists()


@pytest.mark.parametrize("text", ["run: [unclosed", "- a list, not a mapping", "fingerprinted: 3"])
def test_a_malformed_config_yaml_names_the_file_and_the_fix(tmp_path, text) -> None:
    from tests.test_run_safety import _stop_at

    out = tmp_path / "r"
    with pytest.raises(SystemExit):  # a run with a checkpoint to protect
        train_run(tiny(4), out, extra_callbacks=[_stop_at(2)], accelerator="cpu")
    (out / "config.yaml").write_text(text)
    with pytest.raises(CorruptFileError, match=rf"{out / 'config.yaml'} .*restore it, or pass --force-new"):
        train_run(tiny(4), out, accelerator="cpu")
    shutil.rmtree(out / "checkpoints")
    atomic_torch_save({}, out / "final.pt", checksum=True)
    write_done(out, {"run": "r", "steps": 4})
    with pytest.raises(CorruptFileError, match=rf"{out / 'config.yaml'}"):
        load_checkpoint(out)


@pytest.mark.parametrize("content", [b"hello world", b"PK\x03\x04 not a zip", "a list"], ids=["text", "zip", "list"])
def test_garbage_final_weights_name_the_file_whatever_loading_raises(tmp_path, content) -> None:
    run = tiny(4)
    Schedule.of(_experiment(run), SMOKE, tmp_path, accelerator="cpu").train(run)
    final = tmp_path / "safety" / "smoke" / "r" / "final.safetensors"
    if content == "a list":
        torch.save([1, 2, 3], final)
    else:
        final.write_bytes(content)
    with pytest.raises(
        CorruptFileError, match=rf"{final} (does not match the checksum|is truncated or corrupt).*rerun"
    ):
        load_checkpoint(final.parent)


def test_the_fingerprint_covers_compile_strategy_and_accelerator_and_spares_older_runs(tmp_path) -> None:
    out = tmp_path / "r"
    with pytest.raises(SystemExit):
        train_run(tiny(), out, extra_callbacks=[_stop_at(3)], accelerator="cpu")
    for options, change in (
        ({"compile": True}, "compile: False -> True"),
        ({"strategy": "ddp"}, "strategy: 'single_device' -> 'ddp'"),
        ({"accelerator": "cuda"}, "accelerator: 'cpu' -> 'cuda'"),
    ):
        fields = fingerprint_fields(tiny(), resolve_options({"accelerator": "cpu", **options}))
        assert fingerprint_changes(out, fields) == [change]
    config = yaml.safe_load((out / "config.yaml").read_text())
    for field in ("accelerator", "strategy", "compile"):
        del config["fingerprinted"][field]  # a run from before these fields (its config checksummed)
    atomic_write(out / "config.yaml", yaml.safe_dump(config), checksum=True)
    assert fingerprint_changes(out, fingerprint_fields(tiny(), resolve_options({"compile": True}))) == []


def test_the_writability_check_comes_before_the_lock(tmp_path) -> None:
    out = tmp_path / "r"
    out.write_text("a file where the run directory belongs")
    with pytest.raises(SuiteError, match=rf"--out-dir {out} is a file, not a directory"):
        train_run(tiny(4), out, accelerator="cpu")
    assert not (tmp_path / ".r.lock").exists()


def test_each_run_of_a_multi_run_experiment_is_named_before_it_trains(tmp_path, capsys) -> None:
    runs = [
        Run(name, "transformer_124m", tiny(2).budget, dict(TINY), seed=seed)  # two seeds: two runs
        for name, seed in (("first", 1), ("second", 2))
    ]
    main(_experiment(*runs), ["--out-dir", str(tmp_path), "--accelerator", "cpu"])
    out = capsys.readouterr().out
    first, second = out.index("training run first"), out.index("training run second")
    assert first < out.index("step 2/2") < second  # the name precedes its training


def _cli(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        cli(list(argv))
    assert stop.value.code == 2, stop.value.code
    err = capsys.readouterr().err.strip()
    return err.splitlines()[-1] if err else ""


def test_the_command_line_prints_the_suites_errors_as_one_line_and_exits_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    fig2 = ("run", "rmt_fig2_scaling_laws")
    cases = {
        (*fig2, "--run-name", "rmt_9b"): "no run 'rmt_9b' at scale smoke; runs: ",
        (*fig2, "--out-dir", "afile"): "--out-dir afile is a file, not a directory: pass a directory",
        (*fig2, "--out-dir", "afile/sub"): "cannot write in afile/sub .*make it writable or pass another --out-dir",
        (*fig2, "--precision", "fp9"): "Lightning refuses these Trainer settings \\(--precision fp9\\): Precision",
        (*fig2, "--strategy", "nonsense"): "Lightning refuses these Trainer settings \\(--strategy nonsense\\)",
        ("eval", "--checkpoint", "missing"): "no trained weights at missing: train the run first",
        ("eval", "--checkpoint", "afile"): "afile is truncated or corrupt .*rerun",
        ("plan", "--mfu", "2"): "argument --mfu: 2.0 is out of range \\(0, 1\\]",
        ("plan", "--devices", "0"): "argument --devices: 0 is out of range \\[1, inf\\]",
        ("eval", "--model", "x", "--limit", "0"): "argument --limit: 0 is out of range",
    }
    atomic_write(tmp_path / "config.yaml", "run: {model: transformer_124m, corpus: embedded_news}", checksum=True)
    for argv, message in cases.items():
        line = _cli(capsys, *argv)
        assert re.search(message, line), (argv, line)
        assert "Traceback" not in line
    assert not (tmp_path / "runs").exists()  # every refusal came before any compute
    with pytest.raises(KeyError, match="rmt_9b"):
        cli(["--debug", *fig2, "--run-name", "rmt_9b"])  # --debug: the exception itself, with its traceback


def test_offline_evaluation_asks_only_for_the_tasks_requested(tmp_path, monkeypatch) -> None:
    """piqa offline, no LAMBADA file anywhere: it runs (it used to demand LAMBADA); LAMBADA asked for is refused."""
    from scaling_axes.interop import lm_eval_tasks
    from scaling_axes.interop.lm_eval import with_offline_tasks

    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "data"))
    directory = lm_eval_tasks.offline_tasks(tmp_path / "tasks", tmp_path / "missing.jsonl", ["piqa"])
    assert sorted(p.name for p in directory.iterdir()) == ["piqa_offline.yaml"]
    with pytest.raises(FileNotFoundError, match="offline LAMBADA needs"):
        lm_eval_tasks.offline_tasks(tmp_path / "tasks", tmp_path / "missing.jsonl", ["lambada_openai"])
    argv = with_offline_tasks(["--model", "scaling-axes", "--tasks", "piqa_offline,hellaswag_offline"])
    written = tmp_path / "data" / "lm_eval_tasks"
    assert argv[-2:] == ["--include_path", str(written)]
    assert sorted(p.name for p in written.iterdir()) == ["hellaswag_offline.yaml", "piqa_offline.yaml"]
    assert with_offline_tasks(["--tasks", "piqa"]) == ["--tasks", "piqa"]  # lm-eval's own tasks: untouched
    mine = ["--tasks=piqa_offline", "--include_path", "elsewhere"]
    assert with_offline_tasks(mine) == mine


def test_a_checkpoint_of_fit_is_evaluable(tmp_path, monkeypatch) -> None:
    """`python -m scaling_axes fit` (LightningCLI) writes lightning_logs/version_0/checkpoints/*.ckpt, with no run
    config.yaml of the runner beside it: eval and lm-eval read its model and tokenizer from the checkpoint."""
    from scaling_axes.harness.training.lightning_cli import fit_main
    from scaling_axes.interop.lm_eval_model import SuiteLM

    monkeypatch.chdir(tmp_path)
    overrides = json.dumps({k: v for k, v in TINY.items() if k != "vocab_size"})
    fit_main(
        [
            "--model.model",
            "transformer_124m",
            "--model.model_overrides",
            overrides,
            "--data.seq_len",
            "32",
            "--data.batch_size",
            "2",
            "--trainer.max_steps",
            "2",
            "--trainer.limit_val_batches",
            "1",
            "--trainer.accelerator",
            "cpu",
            "--data.data_root",
            str(tmp_path / "data"),
        ]
    )
    (ckpt,) = (tmp_path / "lightning_logs").rglob("*.ckpt")
    model, tokenizer = load_checkpoint(ckpt)
    assert tokenizer.name == "gpt2" and model.config.n_layer == TINY["n_layer"]
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    assert all(torch.equal(v, state[f"model.{k}"]) for k, v in model.state_dict().items())
    lm = SuiteLM(checkpoint=str(ckpt))
    assert lm.tokenizer.name == "gpt2" and lm.max_length == TINY["max_seq_len"]


def test_every_command_line_number_is_range_checked() -> None:
    """The README promises it: no option anywhere parses a bare int or float (each goes through `in_range`)."""
    unchecked = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "scaling_axes").rglob("*.py"))
        if (found := re.findall(r"add_argument\([^)]*type=(?:int|float)\b", path.read_text()))
    }
    assert unchecked == {}


def test_a_corpus_is_prepared_by_one_process_while_the_others_wait(tmp_path) -> None:
    import threading

    from filelock import FileLock

    from scaling_axes.datamodules.corpora import prepare_corpus

    held = FileLock(tmp_path / ".embedded_news.gpt2.lock")  # as another process preparing it would hold it
    held.acquire()
    waiter = threading.Thread(target=prepare_corpus, args=("embedded_news", "gpt2", tmp_path))
    waiter.start()
    waiter.join(timeout=2)
    assert waiter.is_alive() and not (tmp_path / "embedded_news").exists()  # waiting, writing nothing
    held.release()
    waiter.join(timeout=HANG_GUARD_S)
    assert (tmp_path / "embedded_news" / "gpt2" / "meta.json").exists()
