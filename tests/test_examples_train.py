"""Every registered language-model example trains a few steps on the optimiser its architecture's recipes use
(`Example.optimizer`: Muon + Adam for the MoT family), exports, and loads with the suite blocked as the model it
trained (issue 84: a MoT with byte attention crashed building Muon's groups, and no test trained an example)."""

import pytest
import torch
import torch.nn.functional as F

from scaling_axes.datamodules.tokenizers import load_tokenizer
from scaling_axes.harness.runs import Budget, Run
from scaling_axes.harness.training.rundir import write_done, write_final
from scaling_axes.interop.export import export
from scaling_axes.modules.tasks.lm import LanguageModel
from scaling_axes.modules.tasks.optim import MuonWithAdam
from tests.test_export import EXAMPLES, EXPORTED, by_model
from tests.test_hf_lines import TEXTS, loaded_blocked

STEPS = 3
FAST = ("mot_byte_attention", "transformer_nope")  # Muon + Adam and AdamW in `make test`; the others slow


@pytest.mark.parametrize("name", by_model(EXPORTED, FAST))
def test_an_example_trains_on_its_optimiser_exports_and_loads_as_the_model_it_trained(name, tmp_path):
    example = EXAMPLES[name]
    module = LanguageModel(
        model=example.preset,
        model_overrides=example.overrides,
        optimizer=example.optimizer,
        lr=1e-2,
        warmup_steps=1,
        schedule_steps=STEPS,
        momentum_warmup=1,
    )
    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert isinstance(optimizer, MuonWithAdam) == (example.optimizer == "muon")
    vocab = load_tokenizer(example.tokenizer).vocab_size
    ids = torch.randint(0, vocab, (2, 17), generator=torch.Generator().manual_seed(2))
    before = {n: p.detach().clone() for n, p in module.model.named_parameters()}
    for _ in range(STEPS):
        logits = module.model(ids[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    names = {id(p): n for n, p in module.model.named_parameters()}
    grouped = [id(p) for group in optimizer.param_groups for p in group["params"]]
    assert sorted(grouped) == sorted(names), name  # every parameter in exactly one group
    for group in optimizer.param_groups:  # each of the optimiser's groups moved (Muon's matrices, Adam's tables, ...)
        assert any(not torch.equal(p, before[names[id(p)]]) for p in group["params"]), (name, group.get("name"))
    run = Run("r", example.preset, Budget(STEPS, 2, 16), example.overrides, tokenizer=example.tokenizer)
    write_final(tmp_path / "r", run, module.model.state_dict())
    write_done(tmp_path / "r", {"run": "r", "steps": STEPS})
    export(tmp_path / "r", tmp_path / "hf")
    module.model.eval()
    with torch.no_grad():
        expected = module.model(ids)[..., :vocab]
    torch.save({"ids": ids, "logits": expected, "texts": list(TEXTS)}, tmp_path / "expected.pt")
    found = loaded_blocked([tmp_path / "hf"], tmp_path)[str(tmp_path / "hf")]
    assert found["difference"] < 1e-5, (name, found["difference"])
