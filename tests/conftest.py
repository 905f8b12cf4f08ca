import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub; fail at once instead of retrying for 20 s
os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on the CPU (read when a kernel is decorated)
if os.environ.get("PYTEST_XDIST_WORKER"):  # test processes share the cores (`make test`: pytest-xdist): one thread
    os.environ["OMP_NUM_THREADS"] = "1"  # each, their subprocesses' too (OpenMP threads of two processes spinning on
    # two cores ran up to 14 times slower)

import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

# torch.compile's kernel cache is shared machine-wide (/tmp/torchinductor_<user>) and its keys leave out the CPU
# capability ATen runs at: kernels compiled under ATEN_CPU_CAPABILITY=avx2 crashed a later native run of the same
# test on an AVX-512 machine (heap corruption, then a segfault: issue 55). The tests keep a cache per capability.
_KERNELS = f"{torch.__version__}-{torch.backends.cpu.get_cpu_capability()}"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", f"{tempfile.gettempdir()}/torchinductor-{_KERNELS}")

CHECKOUT = Path(__file__).parent.parent
# A subprocess's time limit in a test turns a hang into a failure; it never judges speed: the slowest such call (a
# 2-process training, 13 s on 2 cores under AVX2 kernels and another job) gets about 45 times that
HANG_GUARD_S = 600


def checkout_status() -> str:
    """`git status` of the checkout, ignored files aside (what a fresh clone would show changed)."""
    return subprocess.run(["git", "status", "--porcelain"], cwd=CHECKOUT, capture_output=True, text=True).stdout


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STATUS] = checkout_status()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that writes into the checkout (results, reports, data outside the ignored folders) fails the run."""
    before, after = session.config.stash.get(_STATUS, ""), checkout_status()
    if after != before:
        changed = sorted(set(after.splitlines()) - set(before.splitlines()))
        print(f"\nthe tests changed the checkout: {changed[:10]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STATUS = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def uninterrupted_run(tmp_path_factory) -> Path:
    """`tests.test_run_safety.tiny()` trained once, uninterrupted, in a process of its own: what every kill-and-resume
    test compares with (read only)."""
    from tests.test_run_safety import _run_script

    whole = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert _run_script(whole).returncode == 0
    return whole


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


TINY_TOKENFORMER = {
    "n_layer": 2,
    "d_model": 32,
    "n_head": 4,
    "max_seq_len": 32,
    "qkv_tokens": 12,
    "proj_tokens": 10,
    "ffn_tokens": 40,
    "vocab_size": 97,
}
TINY_TRANSFORMER = {"n_layer": 2, "d_model": 32, "n_head": 4, "max_seq_len": 32, "vocab_size": 97}
