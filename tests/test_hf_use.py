"""An export used as a Hugging Face user uses it (issue 75), every registered language model: 256 generated tokens
all of its tokenizer, the same tokens from two threads as alone, a padded batch that trains with its sequences'
loss, a sequence past the window run window by window from its end (every position its logits), a tokenizer and
load lines that ask nothing, a card the Hub reads, a load from the checkout root, and the generation benchmark's
options checked first."""

import json
import os
import pty
import re
import subprocess
import sys
import threading

import pytest
import torch

from tests.test_export import EXAMPLES, EXPORTED, REMOTE, _finished_run, _loaded, by_model, exported, finished  # noqa: F401 (the fixtures: an example's export, a smoke run)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("exported", by_model(EXPORTED), indirect=True)
def test_an_export_generates_256_tokens_all_of_its_tokenizer(exported) -> None:  # noqa: F811
    """Finding 1: a MoT's head gave 50,304 logits for a 50,257-token tokenizer and generated id 50275, then
    crashed. The logits are cut to the tokenizer's vocabulary; 256 tokens (four windows) decode."""
    _, tokenizer, folder = exported
    hf = _loaded(folder)
    prompt = torch.tensor([tokenizer.encode("The quick brown fox")])
    with torch.no_grad():
        assert hf(prompt).logits.shape[-1] == tokenizer.vocab_size
        out = hf.generate(prompt, max_new_tokens=256, min_new_tokens=256, do_sample=True, top_k=50, temperature=2.0)
    assert out.shape[1] == prompt.shape[1] + 256 and int(out.max()) < tokenizer.vocab_size
    assert isinstance(tokenizer.decode(out[0].tolist()), str)


@pytest.mark.parametrize("exported", by_model(EXPORTED), indirect=True)
def test_two_threads_generate_with_one_model_what_each_generates_alone(exported) -> None:  # noqa: F811
    """Finding 2: the remote code kept its decoding state in a module-level global, and two threads generating with
    one model got wrong tokens or an IndexError. The state is the call's (a ContextVar): each thread's tokens are
    its lone run's."""
    _, tokenizer, folder = exported
    hf = _loaded(folder)
    prompts = [torch.tensor([tokenizer.encode(text)]) for text in ("The quick brown fox", "Numbers: 1, 2, 3, and")]
    options = {"max_new_tokens": 40, "min_new_tokens": 40, "do_sample": False, "use_cache": True}
    with torch.no_grad():
        alone = [hf.generate(prompt, **options) for prompt in prompts]
        for _ in range(3):
            together: dict[int, torch.Tensor] = {}

            def run(i: int, together: dict = together) -> None:
                with torch.no_grad():
                    together[i] = hf.generate(prompts[i], **options)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert all(torch.equal(together[i], alone[i]) for i in range(2))


@pytest.mark.parametrize("exported", by_model(EXPORTED), indirect=True)
def test_a_left_padded_batch_trains_with_the_loss_of_its_sequences_unpadded(exported) -> None:  # noqa: F811
    """Finding 3: a forward with gradients on a padded batch raised a RuntimeError. It trains: the loss of a
    left-padded batch is its sequences' token losses, each run alone, over their count, and it backpropagates."""
    from transformers import PreTrainedTokenizerFast

    _, _, folder = exported
    hf, tokens = _loaded(folder), PreTrainedTokenizerFast.from_pretrained(folder)
    hf.train()
    texts = ["A much longer first sequence of several more words", "Short one"]
    batch = tokens(texts, return_tensors="pt", padding=True)
    assert batch["attention_mask"][1, 0] == 0  # padded on the left
    real = batch["attention_mask"].bool()  # a target counts where it and the token before it are real
    labels = batch["input_ids"].masked_fill(~(real & torch.cat((real[:, :1], real[:, :-1]), dim=1)), -100)
    positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)  # what generate gives a native model
    loss = hf(**batch, labels=labels, position_ids=positions).loss
    loss.backward()
    assert sum(float(p.grad.abs().sum()) for p in hf.parameters() if p.grad is not None) > 0
    total, count = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([tokens(text)["input_ids"]])
            total += float(hf(ids, labels=ids).loss) * (ids.size(1) - 1)
            count += ids.size(1) - 1
    assert float(loss) == pytest.approx(total / count, rel=1e-5)


@pytest.mark.parametrize("exported", by_model(REMOTE), indirect=True)
def test_past_the_window_every_position_gets_its_logits_window_by_window_from_the_end(exported) -> None:  # noqa: F811
    """Finding 4: `model(ids)` past the window returned zero logits for the early positions, silently. Every position
    now gets its logits, with or without labels: the sequence cut into windows from its end, each run alone (the
    last one exactly the sequence truncated to it, as lm-eval truncates); generating past it keeps to the window."""
    import torch.nn.functional as F

    model, _, folder = exported
    hf, window = _loaded(folder), model.config.max_seq_len
    ids = torch.randint(0, 256, (1, 2 * window + 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = hf(ids).logits
        alone = [hf(ids[:, start:end]).logits for start, end in ((0, 5), (5, window + 5), (window + 5, 2 * window + 5))]
        loss = hf(ids, labels=ids).loss
    torch.testing.assert_close(logits, torch.cat(alone, dim=1), atol=1e-6, rtol=1e-6)
    assert bool((logits.abs().amax(-1) > 0).all())  # no position without logits
    assert float(loss) == pytest.approx(float(F.cross_entropy(logits[0, :-1], ids[0, 1:])), rel=1e-6)
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=3, do_sample=False)
    assert out[0, ids.size(1)] == logits[0, -1].argmax()  # the first new token, from the last window


@pytest.mark.slow  # lm-eval's hf model against the suite's scorer on piqa: 23 s
def test_the_suites_scorer_and_lm_evals_hf_agree_on_piqa_past_the_window(tmp_path) -> None:
    """Finding 5: on piqa with a window shorter than an answer lm-eval's `hf` asserted while the suite's scorer
    scored the last window's tokens of the answer, silently. One rule now: a sequence past the window is scored
    window by window from its end. lm-eval's `hf` applies it through the export's forward when given a
    `max_length` past the answers (by default it refuses such an answer, as lm-eval does); the suite's scorer gives
    the same loglikelihoods for every document, the answers longer than the window included."""
    import lm_eval
    import lm_eval.models.huggingface  # (registers lm-eval's "hf")
    from lm_eval.tasks import TaskManager

    from scaling_axes.interop import lm_eval_tasks
    from scaling_axes.interop.export import export

    name = REMOTE[0]
    overrides = {**EXAMPLES[name].overrides, "vocab_size": 50257, "max_seq_len": 8}
    _, out = _finished_run(tmp_path, EXAMPLES[name].preset, overrides, "gpt2")
    export(out, tmp_path / "hf")
    tasks = lm_eval_tasks.offline_tasks(tmp_path / "tasks", lm_eval_tasks.lambada_stand_in(tmp_path), ["piqa"])

    def scored(model: str, model_args: str) -> dict[int, list[float]]:
        result = lm_eval.simple_evaluate(
            model=model,
            model_args=model_args,
            tasks=["piqa_offline"],
            limit=4,
            log_samples=True,
            task_manager=TaskManager(include_path=str(tasks)),
            bootstrap_iters=0,
        )
        return {s["doc_id"]: [float(r[0][0]) for r in s["resps"]] for s in result["samples"]["piqa_offline"]}

    with pytest.raises(AssertionError):  # lm-eval's own refusal of an answer longer than its max_length
        scored("hf", f"pretrained={tmp_path / 'hf'},dtype=float32,device=cpu,trust_remote_code=True")
    hf_args = f"pretrained={tmp_path / 'hf'},dtype=float32,device=cpu,trust_remote_code=True,max_length=512"
    theirs, ours = scored("hf", hf_args), scored("scaling-axes", f"checkpoint={out},max_length=512")
    assert sorted(ours) == sorted(theirs) == [0, 1, 2, 3]
    for doc, mine in ours.items():
        assert mine == pytest.approx(theirs[doc], abs=1e-4), doc


def _in_a_terminal(code: str, cwd: str) -> tuple[int, str]:
    """Run `code` with a terminal on its standard input, as a user at a prompt would: a question it asked would
    wait there (transformers gives it 15 s)."""
    main, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], stdin=terminal, cwd=cwd, capture_output=True, text=True, timeout=300
        )
    finally:
        os.close(main)
        os.close(terminal)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow  # two processes in a terminal, each importing torch and transformers
@pytest.mark.parametrize("exported", [REMOTE[0], next(n for n in EXPORTED if n not in REMOTE)], indirect=True)
def test_the_cards_load_lines_run_as_written_in_a_terminal_asking_nothing(exported, tmp_path) -> None:  # noqa: F811
    """Finding 6: the card's `AutoTokenizer.from_pretrained(PATH)` sat on a `[y/N]` prompt about the model's remote
    code. The tokenizer is a standard fast tokenizer read from tokenizer.json; the card's lines ask nothing."""
    _, tokenizer, folder = exported
    card = (folder / "README.md").read_text()
    lines = re.search(r"```python\n(.*?)```", card, re.S).group(1).replace('"PATH"', repr(str(folder)))
    code = lines + "print(tokenizer.encode('Hello world'), type(model).__name__)\n"
    returncode, output = _in_a_terminal(code, str(tmp_path))
    assert returncode == 0 and "[y/N]" not in output and "model of type" not in output, output[-2000:]
    assert str(tokenizer.encode("Hello world")) in output


def test_the_card_is_what_the_hub_reads_with_the_runs_results_and_real_size(finished, tmp_path) -> None:  # noqa: F811
    """Finding 7: the card's metadata had no license, datasets, pipeline tag or model-index; a 3 x 48 variant read
    "GPT2-small shapes"; no card stated its parameters; a MoT card cited a file not in the folder. Read back by
    huggingface_hub's `ModelCard`: the metadata, the run's validation loss and evaluated accuracies, the scale named
    plainly, the real parameter count and shapes, and only files the folder holds."""
    import shutil

    from huggingface_hub import ModelCard

    from scaling_axes.interop.export import export

    run, run_dir = finished
    evaluated = tmp_path / "export" / "smoke" / "r"
    shutil.copytree(run_dir, evaluated)
    (evaluated / "eval.json").write_text(json.dumps({"tasks": {"piqa": {"acc": 0.625, "acc_norm": 0.5}}}))
    export(evaluated, tmp_path / "hf")
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    assert (card.data.license, card.data.pipeline_tag, card.data.library_name) == (
        "mit",
        "text-generation",
        "transformers",
    )
    done = json.loads((run_dir / "done.json").read_text())
    found = {(r.dataset_name, r.metric_type, r.metric_value) for r in card.data.eval_results}
    assert found == {
        ("embedded_news", "loss", done["val_loss"]),
        ("piqa", "accuracy", 0.625),
        ("piqa", "accuracy", 0.5),
    }
    assert "**smoke scale: tiny models on a few thousand tokens, a pipeline check, not a reproduction.**" in card.text
    loaded = _loaded(tmp_path / "hf")
    assert f"{sum(p.numel() for p in loaded.parameters()):,} parameters in the exported tensors: " in card.text
    assert f": {run.config.n_layer} layers" in card.text


@pytest.mark.parametrize("name", by_model(EXPORTED))
def test_every_card_cites_only_files_in_its_folder_and_states_the_models_shapes(name, tmp_path) -> None:
    from scaling_axes.interop.export import export

    example = EXAMPLES[name]
    model, out = _finished_run(tmp_path, example.preset, example.overrides, example.tokenizer)
    export(out, tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text()
    cited = set(re.findall(r"`([\w/.-]+\.(?:py|json|md|safetensors|txt))`", card))
    assert all((tmp_path / "hf" / path).is_file() for path in cited), cited
    assert " parameters in the exported tensors: " in card and "GPT2-small" not in card
    assert re.search(rf"windows? of {model.config.max_seq_len} tokens", card)


def test_an_export_loads_with_the_checkout_root_as_the_working_directory(tmp_path) -> None:
    """Finding 9: from the checkout root transformers found the top-level `kernels` link when it probed for the Hub's
    `kernels` package, and the load failed. A link imported by its bare name answers as no package."""
    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.interop.export import export

    name = REMOTE[0]
    _, out = _finished_run(tmp_path, EXAMPLES[name].preset, EXAMPLES[name].overrides, EXAMPLES[name].tokenizer)
    export(out, tmp_path / "hf")
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        f"hf = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'hf')!r}, trust_remote_code=True)\n"
        "print(hf(torch.tensor([[1, 2, 3]])).logits.shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    vocab = load_tokenizer(EXAMPLES[name].tokenizer).vocab_size
    assert done.returncode == 0 and f"torch.Size([1, 3, {vocab}])" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--device", "cuda"], "--device cuda: this machine has no CUDA GPU"),
        (["--out", "{file}/bench.csv"], "is a file, not a directory"),
        (["--out", "{folder}"], "is a folder: pass the CSV file to write"),
    ],
)
def test_bench_generate_checks_its_options_in_one_line_before_any_work(options, said, tmp_path) -> None:
    """Finding 11: `--device cuda` without a GPU printed a traceback; a bad `--out` was found after the benchmark."""
    if "cuda" in options and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    (tmp_path / "afile").write_text("")
    argv = [o.format(file=tmp_path / "afile", folder=tmp_path) for o in options]
    command = [sys.executable, "-m", "scaling_axes", "bench-generate", "--architectures", "transformer", *argv]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    errors = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(errors) == 1 and said in errors[0], done.stderr[-2000:]
    assert "tokens" not in done.stdout  # nothing generated
