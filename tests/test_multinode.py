"""Many nodes as safe as one, tried on the CPU as a cluster runs them: two "nodes" started by torchrun on 127.0.0.1
(gloo), the command exactly as docs/gpu-and-clusters.md writes it, and a SLURM job simulated through its
environment with an `scontrol` that only logs. Each is bounded in time: a hang fails, it never waits forever."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import HANG_GUARD_S
from tests.test_robustness import ROOT, tiny_run

RUN = ("rmt_table10_variants", "rmt_134m")  # a smoke run: seconds
pytestmark = pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                                reason="torchrun not installed")  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(out: Path) -> list[str]:
    return ["-m", "scaling_axes", "run", RUN[0], "--scale", "smoke", "--run-name", RUN[1], "--out-dir", str(out),
            "--accelerator", "cpu"]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
            "SCALING_AXES_DATA": os.environ.get("SCALING_AXES_DATA", str(ROOT / "data"))}  # fmt: skip


def _two_nodes(outs: tuple[Path, Path]) -> list[subprocess.CompletedProcess]:
    """The documented torchrun line on two nodes of one process each, node r writing to `outs[r]`."""
    torchrun, port = str(Path(sys.executable).parent / "torchrun"), _free_port()
    nodes = [subprocess.Popen([torchrun, "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(rank),
                               "--master_addr", "127.0.0.1", "--master_port", str(port), *_command(out),
                               "--devices", "1", "--num-nodes", "2"],
                              cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, out in enumerate(outs)]  # fmt: skip
    try:
        return [subprocess.CompletedProcess(n.args, n.wait(HANG_GUARD_S), n.communicate()[0], "") for n in nodes]
    finally:
        for node in nodes:
            node.kill()


def _done(out: Path) -> dict:
    return json.loads(next(out.rglob(f"{RUN[1]}/done.json")).read_text())


def test_two_nodes_on_one_run_directory_train_what_one_process_does(tmp_path) -> None:
    one = subprocess.run([sys.executable, *_command(tmp_path / "one")], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=HANG_GUARD_S)  # fmt: skip
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
    nodes = _two_nodes((tmp_path / "two", tmp_path / "two"))
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(n.stdout[-2000:] for n in nodes)
    single, double = _done(tmp_path / "one"), _done(tmp_path / "two")
    for (step, a), (step2, b) in zip(single["train_loss_curve"], double["train_loss_curve"], strict=True):
        assert step == step2 and b == pytest.approx(a, abs=1e-4)  # the whole batch's loss, as one process's
    weights = [
        load_file(next(out.rglob(f"{RUN[1]}/final.safetensors"))) for out in (tmp_path / "one", tmp_path / "two")
    ]
    for name, value in weights[0].items():  # measured: 2.3e-4 on the embedding, 1.7e-5 on the head, < 8e-6 elsewhere
        # (its cause is open: docs/gpu-and-clusters.md)
        atol = 1e-3 if name in ("embed.token.weight", "lm_head.weight") else 2e-5
        torch.testing.assert_close(weights[1][name], value, rtol=1e-4, atol=atol, msg=name)


def test_two_nodes_on_node_local_directories_refuse_in_one_line_instead_of_hanging(tmp_path) -> None:
    """Issue 58, case 2: each node its own --out-dir (node-local disks). Before, the first launch trained and then
    died on metrics.csv, and the relaunch hung; now both refuse before training, naming the requirement."""
    nodes = _two_nodes((tmp_path / "node0", tmp_path / "node1"))
    assert all(n.returncode != 0 for n in nodes)
    assert any("needs one run directory every node sees, a shared filesystem" in n.stdout for n in nodes), nodes[
        0
    ].stdout[-3000:]
    assert not list(tmp_path.rglob("done.json")) and not list(tmp_path.rglob("last.ckpt"))


def test_a_slurm_sigusr1_checkpoints_requeues_and_the_requeued_job_ends_as_the_uninterrupted_run(tmp_path) -> None:
    """Issue 58, case 4: Lightning's own requeue also wrote `hpc_ckpt_1.ckpt` into the working directory, and the
    requeued job then failed at its final validation on `hpc_ckpt_12.ckpt`. Now SIGUSR1 leaves the suite's own
    checkpoint only, requeues through scontrol, and the requeued job finishes with the uninterrupted run's weights
    and record; nothing lands in the folder the job started from."""
    (tmp_path / "bin").mkdir()
    scontrol, calls = tmp_path / "bin" / "scontrol", tmp_path / "scontrol.log"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    started_in = tmp_path / "jobs"
    started_in.mkdir()
    slurm = {**_env(), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
             "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_NODEID": "0"}  # fmt: skip
    script = tmp_path / "job.py"
    script.write_text("import sys\nfrom pathlib import Path\nfrom tests.test_robustness import tiny_run\n"
                      "from scaling_axes.harness.training.lifecycle import train_run\n"
                      "train_run(tiny_run(30), Path(sys.argv[1]), accelerator='cpu')\n")  # fmt: skip
    job, out = [sys.executable, str(script), str(tmp_path / "job")], tmp_path / "job"
    first = subprocess.Popen(
        job, cwd=started_in, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    while not (out / "checkpoints" / "last.ckpt").exists():
        assert first.poll() is None, first.communicate()[0][-3000:]
    first.send_signal(signal.SIGUSR1)
    output = first.communicate(timeout=HANG_GUARD_S)[0]
    assert first.returncode != 0 and "rerun the same command to resume" in output, output[-3000:]
    assert calls.read_text().split() == ["requeue", "4242"]
    requeued = subprocess.run(job, cwd=started_in, env=slurm, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert requeued.returncode == 0, requeued.stdout[-3000:] + requeued.stderr[-3000:]
    assert not list(started_in.iterdir()) and not list(tmp_path.rglob("hpc_ckpt*"))
    straight = subprocess.run([sys.executable, str(script), str(tmp_path / "straight")], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=HANG_GUARD_S)  # fmt: skip
    assert straight.returncode == 0
    a, b = (json.loads((tmp_path / d / "done.json").read_text()) for d in ("straight", "job"))
    assert a["val_loss"] == b["val_loss"] and a["train_loss_curve"] == b["train_loss_curve"]
    assert tiny_run(30).budget.steps == b["steps"]
