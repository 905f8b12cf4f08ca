"""A finished run's weights as they are shared: final.safetensors with config.json beside them, read without
unpickling by everything that loads a final model (evaluation, growth)."""

import functools
import json
import pickle

import pytest
import torch
from safetensors.torch import load_file

from scaling_axes.checkout import source_commit
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.runs import Experiment, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.growth import grown_run
from scaling_axes.harness.training.rundir import final_weights
from scaling_axes.interop.lm_eval_model import load_checkpoint
from scaling_axes.modules import build_model, get_config
from scaling_axes.modules.registry import language_model_examples
from tests.test_run_safety import tiny


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished smoke-sized run of the runner: (run, its directory)."""
    root, run = tmp_path_factory.mktemp("export"), tiny(4)
    experiment = Experiment("export", "test", lambda scale: [run], lambda scale, results: [])
    Schedule.of(experiment, SMOKE, root, accelerator="cpu").train(run)
    return run, root / "export" / "smoke" / "r"


def test_a_finished_run_writes_safetensors_and_a_config_json(finished) -> None:
    run, out = finished
    assert not (out / "final.pt").exists()
    config = json.loads((out / "config.json").read_text())
    assert get_config(config["model"], **config["overrides"]) == run.config  # the preset resolves to the trained model
    assert config["tokenizer"] == "gpt2" and config["commit"] == source_commit() and config["run"] == "r"
    weights = load_file(out / "final.safetensors")
    model, _ = load_checkpoint(out)
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[name], value) for name, value in model.state_dict().items())


def test_nothing_that_loads_a_final_model_unpickles(finished, tmp_path, monkeypatch) -> None:
    run, out = finished

    def refuse(*args, **kwargs):
        raise AssertionError("a final model was unpickled")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    load_checkpoint(out)  # evaluation
    stage = Run("grown", "transformer_124m", run.budget, {**run.overrides, "d_model": 48}, grow_from="r")
    grown, growth = grown_run(run, final_weights(out), stage, tmp_path / "grown")
    from scaling_axes.modules.tasks.lm import LanguageModel

    LanguageModel(grown.model, grown.overrides, init_weights=str(growth.weights))  # the stage starts from its weights
    assert growth.source_weights.name == "final.safetensors" and growth.weights.suffix == ".safetensors"


EXAMPLES = language_model_examples()  # every registered language model, smoke-sized: its architecture's examples
SHAPE = EXAMPLES["transformer_nope"].overrides  # a small Transformer, for the tests of one run's files


@functools.cache
def predicts_bytes(name: str) -> bool:
    """Whether example `name` predicts bytes (a MoT byte mixout): such a model is refused by `export`."""
    example = EXAMPLES[name]
    return bool(getattr(build_model(example.preset, **example.overrides), "predicts_bytes", False))


def native(name: str) -> bool:
    """Whether example `name` exports as GPT-NeoX (its config field by field), else as remote code."""
    from scaling_axes.interop.neox import neox_mismatch

    return neox_mismatch(get_config(EXAMPLES[name].preset, **EXAMPLES[name].overrides)) is None


EXPORTED = [name for name in EXAMPLES if not predicts_bytes(name)]
REMOTE = [name for name in EXPORTED if not native(name)]
# The model-by-model tests run in `make test` on one model of each kind: a native GPT-NeoX export, a plain remote-code
# one, the MoT with byte attention (its byte tables and cache), the RMT (its residual matrix); every other registered
# model runs under the `slow` mark (`make test-slow`, which CI runs after `make test`), as timm's and transformers'
# model-by-model suites do.
FAST_MODELS = ("transformer_nope", "tokenformer", "mot_byte_attention", "rmt")


def by_model(names: list[str], fast: tuple[str, ...] = FAST_MODELS) -> list:
    """`names` as parameters, each but those in `fast` marked `slow`."""
    return [pytest.param(name, marks=() if name in fast else pytest.mark.slow) for name in names]


def _finished_run(root, preset: str, overrides: dict, tokenizer: str):
    """A finished run's directory as the runner writes it (final.safetensors, config.json, done.json), holding a
    model whose every weight, norms and biases included, is perturbed away from its initialisation."""
    from scaling_axes.harness.runs import Budget
    from scaling_axes.harness.training.rundir import write_done, write_final
    from scaling_axes.modules import build_model

    run = Run("r", preset, Budget(1, 1, 8), overrides, corpus="embedded_news", tokenizer=tokenizer)
    model = build_model(preset, **overrides).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    out = root / "r"
    write_final(out, run, model.state_dict())
    write_done(out, {"run": "r", "steps": 1})
    return model, out


@pytest.mark.parametrize("name", by_model(list(EXAMPLES)))
def test_every_registered_language_model_exports_with_the_suites_logits_over_its_tokenizers_vocabulary(name, tmp_path):
    """Each example of the registry: GPT-NeoX where its config is one field by field, else remote code; the suite's
    logits, cut to the tokenizer's vocabulary (a vocabulary padded past it, as a MoT's is, never reaches a user); a
    model that predicts bytes is refused."""
    from transformers import AutoModelForCausalLM

    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError

    example = EXAMPLES[name]
    model, out = _finished_run(tmp_path, example.preset, example.overrides, example.tokenizer)
    if predicts_bytes(name):
        with pytest.raises(SuiteError, match="predicts bytes, not tokens"):
            export(out, tmp_path / "hf")
        return
    how = export(out, tmp_path / "hf")
    assert how.startswith("GPT-NeoX") == native(name), how
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=not native(name))
    assert (type(hf).__name__ == "GPTNeoXForCausalLM") == native(name) and not hf.training
    vocab = load_tokenizer(example.tokenizer).vocab_size
    ids = torch.randint(0, vocab, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    assert ours.abs().max() > 0.2 and hf.config.vocab_size == theirs.shape[-1] == vocab  # far from the init's
    torch.testing.assert_close(theirs, ours[..., :vocab], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "neox", "bytes"])
def test_the_exported_tokenizer_encodes_as_the_suites(name, tmp_path) -> None:
    from transformers import AutoTokenizer

    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.interop.export import save_tokenizer

    ours = load_tokenizer(name)
    save_tokenizer(ours, tmp_path, 64)
    theirs = AutoTokenizer.from_pretrained(tmp_path)
    texts = ["Hello world!", "  two  spaces\tand a tab\n\nnew lines", "naïve café — 1234567 ¥€", "it's 'quoted'"]
    for text in texts:
        assert theirs.encode(text, add_special_tokens=False) == ours.encode(text), (name, text)
        assert theirs.decode(ours.encode(text)) == ours.decode(ours.encode(text))
    if ours.eot_id is not None:
        assert theirs.eos_token_id == ours.eot_id


def test_export_without_its_extra_stops_with_one_line(finished, tmp_path, monkeypatch) -> None:
    import importlib.util

    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError

    _, out = finished
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else find_spec(n, *a))
    with pytest.raises(SuiteError, match=r"^export needs the Hugging Face extra: pip install 'scaling-axes\[hf\]'$"):
        export(out, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


SCORED = [next(n for n in EXPORTED if native(n)), REMOTE[0]]  # a native export and a remote-code one (lm-eval is slow)


@pytest.mark.slow  # lm-eval's own harness over two exports: 36 s; the generating test below keeps it in make test
@pytest.mark.parametrize("name", SCORED)
def test_lm_evals_own_hf_model_scores_an_export_as_the_suites_adapter_does(name, tmp_path) -> None:
    """lm-eval's reference `hf` model on the exported folder and the suite's `scaling-axes` model on the run: the
    same loglikelihood for every request (1e-4) and the same accuracies, on local tasks in lm-eval's format."""
    import lm_eval
    import lm_eval.models.huggingface  # (registers lm-eval's "hf", as its command line does)
    from lm_eval.tasks import TaskManager

    from scaling_axes.interop import lm_eval_tasks
    from scaling_axes.interop.export import export

    example = EXAMPLES[name]
    _, out = _finished_run(tmp_path, example.preset, {**example.overrides, "vocab_size": 50257}, "gpt2")
    export(out, tmp_path / "hf")
    lambada = lm_eval_tasks.lambada_stand_in(tmp_path)
    tasks = lm_eval_tasks.offline_tasks(tmp_path / "tasks", lambada, ["lambada_openai", "piqa"])
    names = [lm_eval_tasks.offline_name(task) for task in ("lambada_openai", "piqa")]

    def scored(model: str, model_args: str) -> tuple[dict, dict]:
        result = lm_eval.simple_evaluate(
            model=model,
            model_args=model_args,
            tasks=names,
            limit=4,
            log_samples=True,
            task_manager=TaskManager(include_path=str(tasks)),
            bootstrap_iters=0,
        )
        loglikelihoods = {
            task: {sample["doc_id"]: [float(r[0][0]) for r in sample["resps"]] for sample in result["samples"][task]}
            for task in names
        }
        return loglikelihoods, {task: result["results"][task]["acc,none"] for task in names}

    ours = scored("scaling-axes", f"checkpoint={out},batch_size=4")
    remote = "" if native(name) else ",trust_remote_code=True"
    theirs = scored("hf", f"pretrained={tmp_path / 'hf'},backend=causal,dtype=float32,device=cpu,batch_size=4{remote}")
    for task in names:
        assert sorted(ours[0][task]) == sorted(theirs[0][task]) == [0, 1, 2, 3] and ours[1][task] == theirs[1][task]
        for doc, mine in ours[0][task].items():
            assert mine == pytest.approx(theirs[0][task][doc], abs=1e-4), (task, doc)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, request):
    """(the suite's model, its tokenizer, the folder it is exported to) of architecture `request.param`, made once
    for the tests of this module (each loads the export afresh: they change what they load)."""
    from scaling_axes.datamodules.tokenizers import load_tokenizer
    from scaling_axes.interop.export import export

    root, example = tmp_path_factory.mktemp(request.param), EXAMPLES[request.param]
    model, out = _finished_run(root, example.preset, {**example.overrides, "vocab_size": 50257}, "gpt2")
    export(out, root / "hf")
    return model, load_tokenizer("gpt2"), root / "hf"


def _loaded(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)


@pytest.mark.parametrize("exported", by_model(REMOTE), indirect=True)
def test_a_remote_code_export_generates_as_the_suites_greedy_decode(exported) -> None:
    from transformers import AutoTokenizer, pipeline

    from scaling_axes.interop.lm_eval_model import SuiteLM

    model, tokenizer, folder = exported
    hf = _loaded(folder)
    assert hf.can_generate() and hf.config.model_type == "scaling_axes" and hf.config.num_hidden_layers
    context = "The quick brown fox"
    ours = SuiteLM(model=model, tokenizer=tokenizer, device="cpu").generate_until(
        [type("R", (), {"args": (context, {"until": [], "max_gen_toks": 20})})()]
    )[0]
    ids = torch.tensor([tokenizer.encode(context)])
    theirs = hf.generate(ids, max_new_tokens=20, do_sample=False)
    assert tokenizer.decode(theirs[0, ids.size(1) :].tolist()).split(tokenizer.decode([tokenizer.eot_id]))[0] == ours
    hf_tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = hf_tokenizer(["A much longer first prompt of words", context], return_tensors="pt", padding=True)
    assert batch["attention_mask"][1, 0] == 0  # padded on the left
    together = hf.generate(**batch, max_new_tokens=8, do_sample=False)
    alone = hf.generate(ids, max_new_tokens=8, do_sample=False)
    assert together[1, -8:].tolist() == alone[0, -8:].tolist()  # left padding changes nothing
    sampled = hf.generate(ids, max_new_tokens=5, do_sample=True, top_k=5)
    assert sampled.shape == (1, ids.size(1) + 5)
    text = pipeline("text-generation", model=str(folder), trust_remote_code=True)(context, max_new_tokens=5)
    assert text[0]["generated_text"].startswith(context)
    assert len(hf_tokenizer("word " * 500, truncation=True)["input_ids"]) == model.config.max_seq_len


@pytest.mark.parametrize("exported", by_model(EXPORTED), indirect=True)
def test_lm_evals_own_hf_model_generates_from_an_export_as_the_suites_adapter_does(exported) -> None:
    """A generate_until task's requests (two contexts batched with left padding, a stop string) through lm-eval's
    `hf` model on the exported folder and through the suite's adapter on the model: the same continuations."""
    import lm_eval.models.huggingface
    from lm_eval.api.instance import Instance

    from scaling_axes.interop.lm_eval_model import SuiteLM

    model, tokenizer, folder = exported
    options = {"until": ["\n\n", "."], "max_gen_toks": 12, "do_sample": False}
    requests = [
        Instance("generate_until", {}, (context, dict(options)), idx)
        for idx, context in enumerate(["The quick brown fox", "A much longer first prompt of some words"])
    ]
    theirs = lm_eval.models.huggingface.HFLM(
        pretrained=str(folder), trust_remote_code=True, device="cpu", dtype="float32", batch_size=2
    ).generate_until(requests)
    ours = SuiteLM(model=model, tokenizer=tokenizer, device="cpu").generate_until(requests)
    assert theirs == ours and any(ours)


@pytest.mark.parametrize("exported", by_model(REMOTE), indirect=True)
def test_a_remote_code_export_checkpoints_gradients_and_resizes_its_embeddings(exported) -> None:
    model, _, folder = exported
    assert getattr(model, "embeds_bytes", False) == (getattr(model.config, "mixin", "noop") != "noop")
    hf = _loaded(folder)
    hf.train()
    ids = torch.randint(0, 50257, (2, 24), generator=torch.Generator().manual_seed(2))

    def gradients() -> dict[str, torch.Tensor]:
        hf.zero_grad()
        hf(ids, labels=ids).loss.backward()
        return {name: p.grad.clone() for name, p in hf.named_parameters() if p.grad is not None}

    plain = gradients()
    hf.gradient_checkpointing_enable()
    assert any(getattr(m, "gradient_checkpointing", False) for m in hf.modules())
    checkpointed = gradients()
    assert plain.keys() == checkpointed.keys() and len(plain) > 5
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5)
    assert hf.get_input_embeddings().num_embeddings == 50257
    if getattr(model, "embeds_bytes", False):  # a MoT backbone (no byte mixin) resizes as any model
        with pytest.raises(NotImplementedError, match="byte table"):
            hf.resize_token_embeddings(50300)
        return
    hf.resize_token_embeddings(50300)
    assert hf.get_input_embeddings().num_embeddings == 50300 and hf.config.vocab_size == 50300
    assert hf(ids).logits.shape[-1] in (50300, 50257 if hf.get_output_embeddings() is None else 50300)


LOOKS_BACK = [name for name in REMOTE if name.startswith("mot") and name != "mot_backbone"] + ["rmt_official"]


@pytest.mark.parametrize("exported", by_model(LOOKS_BACK), indirect=True)
def test_a_hand_written_decoding_loop_is_shown_the_call_with_prefix_ids(exported) -> None:
    """Issue 84: a model that looks back at token ids (a MoT's byte pull, the official RMT's document mask), stepped
    by hand with a cache, said only "pass the 16 ids the cache holds"; it names `prefix_ids` and shows the call, and
    that call gives the uncached logits."""
    _, tokenizer, folder = exported
    hf = _loaded(folder)
    ids = torch.tensor([tokenizer.encode("The quick brown fox jumps over")])
    with torch.no_grad():
        first = hf(ids[:, :-1], use_cache=True)
        said = r"pass the \d+ ids the cache holds as prefix_ids, model\(next_ids, past_key_values=cache, prefix_ids="
        with pytest.raises(ValueError, match=said):
            hf(ids[:, -1:], past_key_values=first.past_key_values, use_cache=True)
        cache = hf(ids[:, :-1], use_cache=True).past_key_values
        step = hf(ids[:, -1:], past_key_values=cache, prefix_ids=ids[:, :-1], use_cache=True).logits[:, -1]
        torch.testing.assert_close(step, hf(ids, use_cache=False).logits[:, -1], atol=1e-5, rtol=1e-5)
        window = torch.randint(0, 1000, (1, hf.config.max_position_embeddings), generator=torch.Generator())
        full = hf(window, use_cache=True).past_key_values  # a step past the window, without the prefix: said so too
        with pytest.raises(ValueError, match=said):
            hf(window[:, -1:], past_key_values=full, use_cache=True)


def test_export_refuses_a_folder_with_files_and_one_inside_the_run(finished, tmp_path) -> None:
    from scaling_axes.interop.export import export
    from scaling_axes.io import SuiteError

    _, out = finished
    with pytest.raises(SuiteError, match="inside the run directory"):
        export(out, out)
    with pytest.raises(SuiteError, match="inside the run directory"):
        export(out, out / "hf")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "generation_config.json").write_text('{"bos_token_id": 0}')
    with pytest.raises(SuiteError, match=r"holds files already.*--replace"):
        export(out, tmp_path / "old")
    with pytest.raises(SuiteError, match="holds no export manifest"):  # not an export's: --replace takes nothing
        export(out, tmp_path / "old", replace=True)
    assert 'bos_token_id": 0' in (tmp_path / "old" / "generation_config.json").read_text()
    assert not (out / "hf").exists() and (out / "config.json").exists()


def test_a_finished_runs_config_json_rebuilds_its_model_alone(finished) -> None:
    from scaling_axes.modules.registry import build_from_config, config_from

    run, out = finished
    config = json.loads((out / "config.json").read_text())
    rebuilt = build_from_config(config_from(config["model_class"], config["model_config"]))
    assert rebuilt.config == run.config
    rebuilt.load_state_dict(load_file(out / "final.safetensors"))


def test_gpt_neox_takes_a_transformer_config_field_by_field_and_names_what_it_cannot_hold():
    """Finding 8: any subclass of the Transformer's config passed, so a parallel-block, Highway or layer-aggregation
    model with rotary positions and no muP went out as a sequential GPT-NeoX (logits off by 2 to 2.7). Now every
    field is checked: a subclass's own fields are named, as are values GPT-NeoX cannot hold."""
    import dataclasses

    from scaling_axes.interop.neox import neox_mismatch
    from scaling_axes.modules.configs.transformer_config import TransformerConfig

    @dataclasses.dataclass(frozen=True)
    class ParallelConfig(TransformerConfig):
        parallel_block: bool = True

    rope = {"position": "rope", "mup": False, "inverse_layer_scaling": False}
    assert neox_mismatch(TransformerConfig(**rope)) is None
    assert "(parallel_block)" in neox_mismatch(ParallelConfig(**rope))
    for preset in ("highway_transformer_191m", "depthwise_lstm_233m", "hierarchical_aggregation_165m"):
        assert "(variant, aggregation_stages)" in neox_mismatch(get_config(preset, **rope))
    assert neox_mismatch(TransformerConfig(position="learned", attention_fp32=True)) == (
        "a Transformer with learned positions, attention upcast to fp32"
    )
