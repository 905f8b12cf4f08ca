"""`export` from a checkpoint of `fit` (LightningCLI) as from a run directory (issue 84): an example no experiment
trains is shared without Python, its card naming what the checkpoint knows (the preset, its step, its data) and no
fragment of the path it was found at."""

import json

import torch

from tests.test_runner import TINY


def test_a_fit_checkpoint_exports_with_a_card_of_what_it_knows(tmp_path, monkeypatch):
    from scaling_axes.harness.training.lightning_cli import cli_main
    from scaling_axes.interop.export import export
    from scaling_axes.interop.lm_eval_model import load_checkpoint
    from tests.test_export import _loaded

    monkeypatch.setattr("sys.argv", ["scaling-axes"])
    flags = {"--model.model": "transformer_124m", "--model.model_overrides": json.dumps(TINY)}
    flags |= {"--data.seq_len": "16", "--data.batch_size": "2", "--trainer.max_steps": "2"}
    flags |= {"--trainer.accelerator": "cpu", "--trainer.default_root_dir": str(tmp_path / "fit")}
    cli_main(["fit", *(part for pair in flags.items() for part in pair)])
    (checkpoint,) = (tmp_path / "fit").rglob("*.ckpt")
    how = export(checkpoint, tmp_path / "hf")
    model, tokenizer = load_checkpoint(checkpoint)
    hf = _loaded(tmp_path / "hf")
    ids = torch.randint(0, tokenizer.vocab_size, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model.eval()(ids)[..., : tokenizer.vocab_size])
    card = (tmp_path / "hf" / "README.md").read_text()
    assert how.startswith("GPT-NeoX") and "# transformer_124m at step 2: transformer_124m" in card
    assert "| none | n/a | transformer_124m at step 2 | 2 | n/a | embedded_news | gpt2 | n/a | n/a |" in card
    assert "**Trained outside the suite's scales: not a reproduction.**" in card
    assert not any(part in card for part in ("lightning_logs", "version_0", "checkpoints", tmp_path.name))
