"""Exports on both transformers lines (issue 84): an RMT, a MoT with byte attention and a NoPE GPT-NeoX, each loaded
with its tokenizer on transformers 4.x (`.venv-hf4`, which `make test` installs: its packages first on PYTHONPATH,
torch the venv's) with the suite blocked, give the suite's logits and encodings; the remote code refuses an older
4.x in one line naming the version it needs; config.json and the card name the versions this test ran."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_export import EXAMPLES, _finished_run, native

ROOT = Path(__file__).resolve().parents[1]
HF4 = ROOT / ".venv-hf4"
MODELS = ("transformer_nope", "rmt", "mot_byte_attention")  # native GPT-NeoX (rotary 0), two remote-code models
TEXTS = ("Hello world!", "naïve café — 1234567", "  two  spaces\tand a tab")

# Run with the suite blocked (on the older line: PYTHONPATH): what a user with transformers and no scaling-axes sees.
OLDER_LINE = r"""
import importlib.abc, json, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("scaling_axes", "tests"):
            raise ImportError(f"the suite is blocked: {name}")
sys.meta_path.insert(0, Blocked())
import torch, transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
out = {"version": transformers.__version__}
for folder in sys.argv[1:]:
    expected = torch.load(f"{folder}/../expected.pt")
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        logits = model(expected["ids"]).logits
    out[folder] = {
        "class": type(model).__name__,
        "difference": float((logits - expected["logits"]).abs().max()),
        "encoded": [tokenizer.encode(t, add_special_tokens=False) for t in expected["texts"]],
        "tested": model.config.transformers_tested,
        "padding_side": tokenizer.padding_side,
        "eos": tokenizer.eos_token_id,
    }
print(json.dumps(out))
"""


def loaded_blocked(folders: list[Path], tmp_path: Path, packages: Path | None = None) -> dict:
    """What `OLDER_LINE` finds of each export folder (beside it: `expected.pt`), the suite blocked, on the venv's
    transformers or, with `packages` first on PYTHONPATH, on theirs."""
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    env = {**env, "PYTHONPATH": str(packages)} if packages else {k: v for k, v in env.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", OLDER_LINE, *map(str, folders)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert found, (done.stdout[-2000:], done.stderr[-2000:])
    return json.loads(found[-1])


def _older_line() -> Path:
    if not (HF4 / ".installed").exists() or not (HF4 / "transformers").is_dir():
        pytest.skip("transformers 4.x is not in .venv-hf4: `make test` installs it from the registry or pip's cache")
    return HF4


def _exported(root: Path, name: str) -> tuple[Path, dict]:
    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.interop.export import export

    example = EXAMPLES[name]
    model, run = _finished_run(root, example.preset, example.overrides, example.tokenizer)
    export(run, root / "hf")
    tokenizer = load_tokenizer(example.tokenizer)
    ids = torch.randint(0, tokenizer.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids)[..., : tokenizer.vocab_size]
    torch.save({"ids": ids, "logits": logits, "texts": list(TEXTS)}, root / "expected.pt")
    return root / "hf", {"encoded": [tokenizer.encode(t) for t in TEXTS], "eos": tokenizer.eot_id}


def test_each_kind_of_export_loads_on_the_older_line_as_the_suites_model(tmp_path):
    _loads_on_the_older_line(MODELS, tmp_path)


@pytest.mark.slow
def test_every_other_registered_export_loads_on_the_older_line_as_the_suites_model(tmp_path):
    from tests.test_export import EXPORTED

    _loads_on_the_older_line([name for name in EXPORTED if name not in MODELS], tmp_path)


def _loads_on_the_older_line(names: list[str], tmp_path: Path) -> None:
    import transformers

    from scaling_axes.interop.hf_config import TESTED_TRANSFORMERS

    older = _older_line()
    folders = {name: _exported(tmp_path / name, name) for name in names}
    found = loaded_blocked([f for f, _ in folders.values()], tmp_path, older)
    assert (found["version"], transformers.__version__) == TESTED_TRANSFORMERS  # what the card and config.json say
    for name, (folder, ours) in folders.items():
        theirs = found[str(folder)]
        assert theirs["class"] == ("GPTNeoXForCausalLM" if native(name) else "ScalingAxesForCausalLM")
        assert theirs["difference"] < 1e-5, (name, theirs["difference"])
        assert theirs["encoded"] == ours["encoded"] and theirs["eos"] == ours["eos"], name
        assert theirs["padding_side"] == "left" and tuple(theirs["tested"]) == TESTED_TRANSFORMERS
        card = (folder / "README.md").read_text()
        assert f"Tested on transformers {' and '.join(TESTED_TRANSFORMERS)}" in card


def test_the_remote_code_refuses_an_older_transformers_in_one_line_naming_the_version_it_needs():
    """What an export's configuration file does first, on transformers 4.46 (a release before the tested line)."""
    check = "import transformers; transformers.__version__ = '4.46.3'; import scaling_axes.interop.hf_config"
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and last.startswith("ImportError: this export needs transformers>=4.57, not 4.46.3")
