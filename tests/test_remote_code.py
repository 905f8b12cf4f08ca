"""Exports that leave the suite: each language-model architecture exported, then loaded, run and generated in a
process where `scaling_axes` cannot be imported, from a folder outside the checkout; the folder is one a Hub
repository takes as it is (model card, generation config, 0644 files); the key/value cache gives the uncached
logits and tokens at a cost per token that does not grow with the prefix."""

import ast
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from scaling_axes.interop.remote_code import DECLARATION
from tests.test_export import EXAMPLES, EXPORTED, _finished_run

RECIPIENT = r"""
import importlib.abc, json, sys

class NoSuite(importlib.abc.MetaPathFinder):  # this suite is not installed where the model is shared
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "scaling_axes":
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NoSuite())
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Cache

found = {}
for folder in sys.argv[1:]:
    hf = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    case = load_file(f"{folder}.case.safetensors")
    with torch.no_grad():
        logits = hf(case["ids"], use_cache=False).logits
        out = hf(case["ids"][:, :12], use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values  # its name from transformers 5.2x, and before
    prompt = case["ids"][:1, :9]
    cached = hf.generate(prompt, max_new_tokens=24, do_sample=False, use_cache=True)
    uncached = hf.generate(prompt, max_new_tokens=24, do_sample=False, use_cache=False)
    found[folder] = {
        "difference": (logits - case["logits"]).abs().max().item(),
        "cache": type(cache).__name__,
        "is_cache": isinstance(cache, Cache),
        "same_tokens": cached.tolist() == uncached.tolist(),
        "new_tokens": cached.shape[1] - prompt.shape[1],
        "suite_imported": any(m.split(".")[0] == "scaling_axes" for m in sys.modules),
    }
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{family: (the suite's model, its export folder)}, each folder beside its reference ids and logits."""
    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.interop.export import export

    root, made = tmp_path_factory.mktemp("remote"), {}
    for name in EXPORTED:
        example = EXAMPLES[name]
        model, out = _finished_run(root / name, example.preset, example.overrides, example.tokenizer)
        folder = root / f"{name}-hf"
        export(out, folder)
        ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
        if getattr(model.config, "document_mask", False):  # a document boundary, where a model masks documents
            ids[:, 20] = model.config.bos_token_id
        with torch.no_grad():
            vocab = load_tokenizer(example.tokenizer).vocab_size  # what an export's logits cover
            logits = model(ids)[..., :vocab].float().contiguous()
            save_file({"ids": ids, "logits": logits}, f"{folder}.case.safetensors")
        made[name] = (model, folder)
    return made


@pytest.mark.slow  # every export in a venv holding torch and transformers alone
def test_every_export_loads_runs_and_generates_with_torch_and_transformers_alone(exports, tmp_path) -> None:
    """Outside the checkout, `scaling_axes` unimportable: the suite's logits to 1e-6, a transformers Cache, and the
    same greedy tokens with and without it."""
    folders = [str(folder) for _, folder in exports.values()]
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", RECIPIENT, *folders], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    for name, (_, folder) in exports.items():
        result = found[str(folder)]
        assert result["difference"] <= 1e-6, (name, result)
        assert result["is_cache"] and result["same_tokens"] and result["new_tokens"] == 24, (name, result)
        assert not result["suite_imported"], name


def test_remote_code_is_the_suites_own_files_with_relative_imports(exports) -> None:
    """Each file of an export's remote code is a suite module's text with only its `scaling_axes` imports changed,
    and imports nothing but torch, transformers, the standard library and its own folder."""
    import scaling_axes

    package = Path(scaling_axes.__file__).parent
    _, folder = exports["rmt"]
    files = sorted(path.name for path in folder.glob("*.py"))
    assert files == [
        "configuration_scaling_axes.py",
        "decoder_config.py",
        "kernels.py",
        "layers.py",
        "modeling_scaling_axes.py",
        "registry.py",
        "rmt.py",
        "rmt_config.py",
    ]
    for path in folder.glob("*.py"):
        ours = {"kernels.py": "kernels/__init__.py", "registry.py": "modules/registry.py"}.get(path.name)
        ours = ours or {"configuration_scaling_axes.py": "interop/hf_config.py"}.get(path.name)
        ours = ours or {"modeling_scaling_axes.py": "interop/hf_modeling.py"}.get(path.name)
        folder_of = "configs" if path.name.endswith("_config.py") else "architectures"
        ours = package / (ours or f"modules/{folder_of}/{path.name}")
        text, _, declared = path.read_text().partition(DECLARATION)  # an entry file names every other file after
        if path.name in ("configuration_scaling_axes.py", "modeling_scaling_axes.py"):
            named = sorted(re.findall(r"^    from \.(\w+) import __name__ as _\1$", declared, re.M))
            entries = ("configuration_scaling_axes.py", "modeling_scaling_axes.py")
            assert named == sorted(f[:-3] for f in files if f not in entries), path.name
        theirs_lines, our_lines = text.splitlines(), ours.read_text().splitlines()
        assert len(theirs_lines) == len(our_lines), path.name
        changed = [(a, b) for a, b in zip(our_lines, theirs_lines, strict=True) if a != b]
        assert all(a.lstrip().startswith("from scaling_axes") and b.lstrip().startswith("from .") for a, b in changed)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in {"torch", "transformers", "__future__", *sys.stdlib_module_names}
            if isinstance(node, ast.Import):
                assert all(
                    a.name.split(".")[0] in {"torch", "transformers", *sys.stdlib_module_names} for a in node.names
                )


def test_an_exports_files_import_each_other_without_a_cycle(exports) -> None:
    """transformers before 4.57 follows a folder's relative imports until none is new, comparing names with and
    without `.py`: a cycle loops it forever (it hung on 4.46 before the version check could refuse it)."""
    for _, folder in exports.values():
        graph = {
            path.stem: set(re.findall(r"^\s*from\s+\.(\w+)\s+import", path.read_text(), re.M))
            for path in folder.glob("*.py")
        }
        assert _cycle(graph) is None, f"{folder.name}: {' -> '.join(_cycle(graph))}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (file -> the files it imports), or None."""
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for child in graph.get(node, ()):
                if child == start:
                    return [*path, child]
                if child not in path:
                    stack.append((child, [*path, child]))
    return None


def test_an_export_is_a_folder_the_hub_takes_as_it_is(exports) -> None:
    _, folder = exports["tokenformer"]
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path.name
    mask = os.umask(0o022)  # the folder as mkdir makes one under the usual umask, so another user reads it
    os.umask(mask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_scaling_axes.ScalingAxesConfig",
        "AutoModelForCausalLM": "modeling_scaling_axes.ScalingAxesForCausalLM",
    }
    assert config["overrides"]["kernel"] == "torch"
    assert json.loads((folder / "generation_config.json").read_text())["use_cache"] is True
    from huggingface_hub import ModelCard

    card = ModelCard.load(folder / "README.md")
    run_dir = folder.parent / "tokenformer" / "r"
    assert card.data.library_name == "transformers" and "Tokenformer (Wang et al., ICLR 2025)" in card.text
    assert run_dir.parts[-3] not in card.text  # a run that recorded no experiment or scale: none, never its path's
    assert "| none | n/a | r | 1 | n/a | embedded_news | bytes | n/a | n/a |" in card.text
    assert 'from_pretrained("PATH", trust_remote_code=True)' in card.text and "scaling-axes 0.1.0" in card.text


def test_a_mot_export_carries_its_byte_tables_and_no_tokenizer_code(exports) -> None:
    model, folder = exports["mot"]
    overrides = json.loads((folder / "config.json").read_text())["overrides"]
    assert overrides["byte_table"] == "stored" and overrides["byte_symbols"] == model.bytes_vocab.symbols
    from safetensors.torch import load_file

    weights = load_file(folder / "model.safetensors")
    assert torch.equal(weights["backbone.input_bytes"], model.input_bytes)
    assert not (folder / "token_bytes.py").exists() and not (folder / "tokenizers.py").exists()
