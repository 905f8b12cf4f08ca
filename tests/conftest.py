import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub; fail at once instead of retrying for 20 s
os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on the CPU (read when a kernel is decorated)

import pytest
import torch


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
