"""The lm-eval wrapper against direct computations from the model's logits, real offline lm-eval runs, checkpoint
loading, the official Tokenformer key mapping, and the two evaluation experiments' tables."""

import json
import math
from types import SimpleNamespace

import lm_eval
import pytest
import torch
import torch.nn.functional as F
from lm_eval.tasks import TaskManager

from scaling_axes.datamodules.tokenizers import Tokenizer
from scaling_axes.experiments.rmt import table5_6_downstream as rmt_downstream
from scaling_axes.experiments.tokenformer import table1_zeroshot as table1
from scaling_axes.harness.runs import Budget, Run
from scaling_axes.harness.scales import PAPER
from scaling_axes.harness.training.launch import resolve
from scaling_axes.harness.training.rundir import write_done
from scaling_axes.harness.training.settings import write_config
from scaling_axes.interop import evaluate, lm_eval_tasks
from scaling_axes.interop.lm_eval_model import SuiteLM, load_checkpoint
from scaling_axes.io import CorruptFileError, atomic_torch_save
from scaling_axes.modules import build_model
from scaling_axes.modules.architectures.official_weights import (
    convert_official_state_dict,
    load_official_tokenformer,
    official_key_map,
)
from tests.conftest import TINY_TOKENFORMER, TINY_TRANSFORMER

WINDOW = 16
CHARS = Tokenizer(  # one token per character, id 0 = end-of-text: token boundaries are exact and known
    "chars",
    97,
    0,
    lambda texts: [[ord(c) % 96 + 1 for c in t] for t in texts],
    lambda ids: "".join(chr(i - 1 + 32) for i in ids if i),
    "test",
)


def tiny_lm(name: str = "transformer_rmt_49m", batch_size: int = 3) -> SuiteLM:
    overrides = TINY_TRANSFORMER if name.startswith("transformer") else TINY_TOKENFORMER
    model = build_model(name, **{**overrides, "max_seq_len": WINDOW})
    return SuiteLM(model=model, tokenizer=CHARS, batch_size=batch_size, device="cpu")


def reference_loglikelihood(model, context: list[int], continuation: list[int]) -> tuple[float, bool]:
    """Each continuation token scored alone, on the context its window gives it: the input (all but the last token,
    the context left-truncated as lm-eval truncates it, the continuation kept whole) cut into windows of WINDOW from
    its end, each run on its own; within the window, lm-eval's single left-truncated window exactly."""
    full = context + continuation
    full = full[-(max(WINDOW, len(continuation)) + 1) :]
    n, total, greedy = len(full) - 1, 0.0, True
    for position in range(len(full) - len(continuation), len(full)):  # predicted from the logits at position - 1
        end = n - ((n - position) // WINDOW) * WINDOW  # the end of the window from the input's end that holds it
        logits = model(torch.tensor([full[max(0, end - WINDOW) : position]]))[0, -1].double()[: CHARS.vocab_size]
        total += F.log_softmax(logits, -1)[full[position]].item()
        greedy &= int(logits.argmax()) == full[position]
    return total, greedy


@pytest.mark.parametrize("name", ["transformer_rmt_49m", "tokenformer_124m"])
def test_loglikelihoods_equal_a_direct_computation_from_the_logits(name) -> None:
    lm = tiny_lm(name)
    requests = [
        ("The cat", " sat on the mat"),
        ("A", " b"),
        ("x" * 40, " ab"),
        ("Hello", " world"),
        ("one", " two"),
        ("y" * 5, " a continuation longer than the window"),
        ("", "an empty context"),
    ]
    ours = lm.loglikelihood([SimpleNamespace(args=r) for r in requests], disable_tqdm=True)
    for (context, continuation), (log_likelihood, greedy) in zip(requests, ours, strict=True):
        context_ids = CHARS.encode(context) if context else [0]
        expected, expected_greedy = reference_loglikelihood(lm.model, context_ids, CHARS.encode(continuation))
        assert log_likelihood == pytest.approx(expected, rel=1e-5, abs=1e-5)
        assert greedy == expected_greedy


def test_rolling_loglikelihood_is_the_models_summed_token_loss() -> None:
    lm = tiny_lm()
    text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL"  # 48 tokens = three full windows of 16
    full = torch.tensor([[0, *CHARS.encode(text)]])
    windows = [(full[:, s : s + WINDOW], full[:, s + 1 : s + WINDOW + 1]) for s in range(0, 48, WINDOW)]
    expected = -sum(F.cross_entropy(lm.model(x)[0], y[0], reduction="sum").item() for x, y in windows)
    short = "a short one"
    short_ids = torch.tensor([[0, *CHARS.encode(short)]])
    expected_short = -F.cross_entropy(lm.model(short_ids[:, :-1])[0], short_ids[0, 1:], reduction="sum").item()
    ours = lm.loglikelihood_rolling([SimpleNamespace(args=(text,)), SimpleNamespace(args=(short,))])
    assert ours == pytest.approx([expected, expected_short], rel=1e-5)


def test_greedy_generation_stops_at_the_stop_string() -> None:
    lm = tiny_lm()
    request = SimpleNamespace(args=("abc", {"until": ["\n"], "max_gen_toks": 5}))
    (text,) = lm.generate_until([request])
    ids, expected = CHARS.encode("abc"), []
    for _ in range(5):
        expected.append(int(lm.model(torch.tensor([ids + expected]))[0, -1].argmax()))
    assert text == CHARS.decode(expected).split("\n")[0]
    with pytest.raises(ValueError, match="greedily only"):
        lm.generate_until([SimpleNamespace(args=("abc", {"do_sample": True}))])


def test_models_that_cannot_be_scored_by_tokens_are_refused() -> None:
    from tests.test_mot import TINY_BYTES

    mot = build_model("mot_concat_split_256_48", **TINY_BYTES)
    with pytest.raises(ValueError, match="predicts bytes"):
        SuiteLM(model=mot, tokenizer="gpt2")
    with pytest.raises(ValueError, match="no end-of-text token"):
        SuiteLM(model=build_model("transformer_rmt_49m", **TINY_TRANSFORMER), tokenizer="bytes")
    with pytest.raises(ValueError, match="gpt2 has 50257 ids but the model's vocabulary is 97"):
        SuiteLM(model=build_model("transformer_rmt_49m", **TINY_TRANSFORMER), tokenizer="gpt2")
    with pytest.raises(KeyError, match="unknown tasks"):
        evaluate.zero_shot(tiny_lm(), ["squad"], offline=True)


@pytest.mark.slow  # lm-eval over 50 documents of each task
def test_a_real_offline_lm_eval_run_over_50_documents_of_each_task(tmp_path) -> None:
    model = build_model("transformer_rmt_49m", **{**TINY_TRANSFORMER, "vocab_size": 50257, "max_seq_len": 64})
    lm = SuiteLM(model=model, tokenizer="gpt2", batch_size=16, device="cpu")
    lambada = lm_eval_tasks.lambada_stand_in(tmp_path)
    results = evaluate.zero_shot(lm, list(lm_eval_tasks.TASKS), True, limit=50, data_root=tmp_path, lambada=lambada)
    assert set(results) == set(lm_eval_tasks.TASKS)
    for task, metrics in results.items():
        assert 0.0 <= metrics["acc"] <= 1.0
        if task in ("hellaswag", "piqa", "arc_easy", "arc_challenge"):
            assert 0.0 <= metrics["acc_norm"] <= 1.0
    assert results["lambada_openai"]["perplexity"] > 1.0
    first = json.loads(lambada.read_text().splitlines()[0])["text"]
    assert len(first.split()) == 60 and first[-1].isalnum()  # LAMBADA format: the last word is the target


def test_offline_tasks_need_a_lambada_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"original OpenAI lambada_test\.jsonl"):
        lm_eval_tasks.offline_tasks(tmp_path / "tasks", tmp_path / "missing.jsonl")


def _trained_run_dir(tmp_path):
    overrides = {**TINY_TRANSFORMER, "vocab_size": 50257}
    run = Run("tiny", "transformer_rmt_49m", Budget(1, 1, 8), overrides, corpus="embedded_news")
    out = tmp_path / "tiny"
    write_config(resolve(run, out, {"accelerator": "cpu"}), run)
    model = build_model(run.model, **run.overrides)
    atomic_torch_save(model.state_dict(), out / "final.pt", checksum=True)
    write_done(out, {"run": run.name, "steps": 0})
    return out, model


def test_checkpoints_load_from_a_run_directory_its_weights_or_a_lightning_checkpoint(tmp_path) -> None:
    out, model = _trained_run_dir(tmp_path)
    idx = torch.randint(0, 97, (2, 9))
    ckpt = {
        "hyper_parameters": {"model": "transformer_rmt_49m", "model_overrides": model.config.__dict__},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
    }
    (out / "checkpoints").mkdir()
    atomic_torch_save(ckpt, out / "checkpoints" / "last.ckpt", checksum=True)
    for path in (out, out / "final.pt", out / "checkpoints" / "last.ckpt"):
        loaded, tokenizer = load_checkpoint(path)
        assert tokenizer.name == "gpt2"  # embedded_news's default
        torch.testing.assert_close(loaded(idx), model(idx))
    with pytest.raises(FileNotFoundError, match="train the run first"):
        load_checkpoint(tmp_path / "tiny" / "missing.pt")
    misfit = {k: v for k, v in model.state_dict().items() if k != "final_norm.weight"}
    atomic_torch_save(misfit, out / "final.pt", checksum=True)
    named = r"final\.pt does not fit Transformer: missing final_norm\.weight; delete"  # the file, the tensor, the fix
    with pytest.raises(CorruptFileError, match=named):
        load_checkpoint(out)


@pytest.mark.slow  # the command in a process of its own, end to end
def test_cli_evaluates_a_checkpoint_offline_and_writes_json(tmp_path, monkeypatch) -> None:
    out, _ = _trained_run_dir(tmp_path)
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "data"))
    lambada = lm_eval_tasks.lambada_file(tmp_path / "data")  # where a LAMBADA file is looked for offline
    lambada.parent.mkdir(parents=True)
    lambada.write_text(lm_eval_tasks.lambada_stand_in(tmp_path / "data").read_text())
    result_file = tmp_path / "eval.json"
    evaluate.main(
        [
            "--checkpoint",
            str(out),
            "--tokenizer",
            "gpt2",
            "--tasks",
            "piqa",
            "--offline",
            "--limit",
            "4",
            "--perplexity",
            "embedded_news",
            "--seq-len",
            "16",
            "--out",
            str(result_file),
        ]
    )
    result = json.loads(result_file.read_text())
    assert 0 <= result["tasks"]["piqa"]["acc"] <= 1 and result["perplexity"]["embedded_news"] > 1
    by_name = lm_eval.simple_evaluate(  # the registered name, as lm-eval's own entry points use it
        model="scaling-axes",
        model_args=f"checkpoint={out},batch_size=2",
        tasks=["piqa_offline"],
        limit=4,
        task_manager=TaskManager(include_path=str(tmp_path / "data" / "lm_eval_tasks")),
        bootstrap_iters=0,
    )
    assert by_name["results"]["piqa_offline"]["acc,none"] == result["tasks"]["piqa"]["acc"]


def test_corpus_perplexity_is_the_exponentiated_mean_token_loss(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path))
    model = build_model("transformer_rmt_49m", **{**TINY_TRANSFORMER, "vocab_size": 50257})
    ppl = evaluate.corpus_perplexity(model, "embedded_news", "gpt2", 16, max_windows=3, batch_size=2)
    from scaling_axes.datamodules.corpora import open_split, prepare_corpus

    tokens, _ = open_split(prepare_corpus("embedded_news", "gpt2"), "val")
    losses = []
    for w in range(3):
        window = torch.tensor(tokens[w * 16 : w * 16 + 17].astype("int64"))
        losses.append(F.cross_entropy(model(window[None, :-1])[0], window[1:], reduction="none"))
    assert ppl == pytest.approx(math.exp(torch.cat(losses).mean().item()), rel=1e-5)


def official_state_dict(config) -> dict[str, torch.Tensor]:
    """A state dict in the released layout (names and shapes from reference section 2), built from scratch."""
    d, layers = config.d_model, config.n_layer
    state = {"sequential.0.word_embeddings.weight": torch.randn(config.vocab_size, d)}
    counts = {
        "query": config.qkv_tokens,
        "key": config.qkv_tokens,
        "value": config.qkv_tokens,
        "proj": config.proj_tokens,
    }
    for i in range(2, layers + 2):
        for part, n in counts.items():
            state[f"sequential.{i}.attention.{part}.key_param_tokens"] = torch.randn(n, d)
            state[f"sequential.{i}.attention.{part}.value_param_tokens"] = torch.randn(n, d)
        state[f"sequential.{i}.mlp.key_param_tokens"] = torch.randn(config.ffn_tokens, d)
        state[f"sequential.{i}.mlp.value_param_tokens"] = torch.randn(config.ffn_tokens, d)
        state[f"sequential.{i}.attention.rotary_emb.inv_freq"] = torch.randn(2)  # recomputed, skipped
    state[f"sequential.{layers + 3}.norm.weight"] = torch.randn(d)
    state[f"sequential.{layers + 3}.norm.bias"] = torch.randn(d)
    return state


def test_the_official_key_mapping_covers_every_key_and_refuses_misfits(tmp_path) -> None:
    model = build_model("tokenformer_150m", **TINY_TOKENFORMER)
    official = official_state_dict(model.config)
    mapping = official_key_map(model.config.n_layer)
    assert sorted(mapping.values()) == sorted(model.state_dict())  # every parameter of ours has an official key
    torch.save(official, tmp_path / "pytorch_model.bin")
    load_official_tokenformer(model, str(tmp_path))
    for key, ours in mapping.items():
        torch.testing.assert_close(model.state_dict()[ours], official[key])
    wrong = {**official, "sequential.2.mlp.key_param_tokens": torch.randn(41, 32)}
    with pytest.raises(ValueError, match=r"sequential.2.mlp.key_param_tokens has shape \(41, 32\).*\(40, 32\)"):
        convert_official_state_dict(wrong, model)
    with pytest.raises(KeyError, match=r"unknown keys.*sequential\.2\.attention\.dense\.weight"):
        convert_official_state_dict({**official, "sequential.2.attention.dense.weight": torch.ones(1)}, model)
    fewer = {k: v for k, v in official.items() if "sequential.3." not in k}
    with pytest.raises(KeyError, match=r"missing keys.*sequential\.3\."):
        convert_official_state_dict(fewer, model)
    with pytest.raises(FileNotFoundError, match="neither a local file nor reachable"):
        load_official_tokenformer(model, str(tmp_path / "nowhere" / "pytorch_model.bin"))


FAKE_RESULT = {
    "tasks": {
        "lambada_openai": {"acc": 0.45, "perplexity": 16.0},
        "hellaswag": {"acc": 0.30, "acc_norm": 0.35},
        "piqa": {"acc": 0.65, "acc_norm": 0.64},
        "arc_easy": {"acc": 0.47, "acc_norm": 0.42},
        "arc_challenge": {"acc": 0.20, "acc_norm": 0.25},
        "winogrande": {"acc": 0.5},
    },
    "perplexity": {"pile_ppl": 10.4, "openwebtext_ppl": 20.0, "pile_10k_ppl": 30.0, "wikitext_ppl": 70.0},
}


def test_table1_puts_each_paper_number_on_its_likely_metric_and_averages_those(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(table1, "evaluate_cached", lambda *a, **k: FAKE_RESULT)
    monkeypatch.setattr(table1, "weights_fingerprint", lambda path: "x")
    monkeypatch.setattr(table1, "official_source", lambda preset, scale: None)
    rows = table1.report(PAPER, {p: {} for p in table1.PRESETS})
    ours = {(r.row, r.metric): r for r in rows}
    hellaswag, hellaswag_acc = (
        ours[("tokenformer_150m", "hellaswag_acc_norm")],
        ours[("tokenformer_150m", "hellaswag_acc")],
    )
    assert (hellaswag.paper, hellaswag.ours, hellaswag_acc.paper) == (35.5, 35.0, None)
    assert ours[("tokenformer_150m", "arc_easy_acc")].paper == 47.3
    assert ours[("tokenformer_150m", "lambada_ppl")].status == "match"  # 16.0 vs 16.38 within 3%
    assert ours[("tokenformer_150m", "average")].ours == pytest.approx((45 + 35 + 65 + 47 + 25 + 50) / 6)
    assert ours[("pythia_160m", "hellaswag")].status == "cited" and ours[("pythia_160m", "hellaswag")].ours is None
    assert ours[("tokenformer_150m_official", "lambada_acc")].status == "not_run"


def test_rmt_tables_5_and_6_from_the_scaling_runs(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(rmt_downstream, "evaluate_cached", lambda *a, **k: FAKE_RESULT)
    monkeypatch.setattr(rmt_downstream, "weights_fingerprint", lambda path: "x")
    weights = {name: {1: tmp_path / "final.pt"} for name in ("transformer_rmt_405m", "rmt_305m")}
    monkeypatch.setattr(
        rmt_downstream.rmt_setup,
        "downstream_checkpoints",
        lambda scale, results: {name: weights[name] for name in results},
    )
    (tmp_path / "final.pt").touch()
    rows = {(r.table, r.row, r.metric): r for r in rmt_downstream.report(PAPER, {"rmt_305m": {}})}
    assert rows[("table5", "rmt_305m", "lambada_ppl")].paper == 25.21
    assert rows[("table5", "rmt_305m", "wikitext_ppl")].ours == 70.0
    assert rows[("table6", "rmt_305m", "piqa_acc")].paper == 63.7
    assert rows[("table6", "rmt_305m", "piqa_acc_norm")].paper is None
    assert rows[("table6", "transformer_rmt_405m", "piqa_acc")].status == "not_run"
    assert rmt_downstream.EXPERIMENT.run_group == "rmt_scaling"


def test_rmt_tables_5_and_6_claims_are_a_contrast_of_each_metric_over_every_evaluated_seed():
    """The log-perplexity margin per seed, a contrast of the two arms' log perplexities (each metric a measure of
    its own, never pooled with another); one seed each is one margin."""
    import math
    import statistics

    rmt = {1: 20.0, 2: 22.0, 3: 18.0}
    transformer = {k: 2 * v for k, v in rmt.items()}
    evaluated = {
        name: {k: {"lambada_ppl": v} for k, v in values.items()}
        for name, values in (("rmt_305m", rmt), ("transformer_rmt_405m", transformer))
    }
    (claim,) = rmt_downstream.claim_rows(PAPER, evaluated)
    e = claim.evidence
    assert e.measure == "log_lambada_ppl" and e.contrast == {"transformer_rmt_405m": 1.0, "rmt_305m": -1.0}
    assert e.arm_values["rmt_305m"] == pytest.approx({k: math.log(v) for k, v in rmt.items()})
    assert e.margins == pytest.approx((math.log(2),) * 3) and claim.seeds == 3
    one = {name: {1: seeds[1]} for name, seeds in evaluated.items()}
    (single,) = rmt_downstream.claim_rows(PAPER, one)
    assert statistics.mean(single.evidence.margins) == pytest.approx(math.log(2)) and single.seeds == 1


def test_pile_and_the_evaluation_corpora_go_through_the_memmap_path_from_local_files(tmp_path) -> None:
    from scaling_axes.datamodules.corpora import open_split, prepare_corpus

    documents = [{"text": f"Document {i} of the local Pile copy, with some words."} for i in range(2000)]
    for name in ("pile", "pile_10k", "wikitext"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    pile = json.loads((prepare_corpus("pile", data_root=tmp_path) / "meta.json").read_text())
    assert pile["tokenizer"] == "neox" and pile["eot_id"] == 0
    assert pile["splits"]["val"]["documents"] == 2 and pile["splits"]["train"]["documents"] == 1998  # 0.1% held out
    ten_k = prepare_corpus("pile_10k", data_root=tmp_path)
    wiki = prepare_corpus("wikitext", data_root=tmp_path)
    assert list(json.loads((ten_k / "meta.json").read_text())["splits"]) == ["val"]
    assert json.loads((wiki / "meta.json").read_text())["splits"]["val"]["documents"] == 1  # joined into one text
    tokens, _ = open_split(ten_k, "val")
    assert (tokens == 50256).sum() == 2000  # one end-of-text per document


def test_table1_printed_averages_against_their_six_columns():
    """Two printed averages are not the mean of their row: Pythia-160M 40.1 (41.08), GPT-Neo 2.7B 56.5 (56.33)."""
    from scaling_axes.experiments.tokenformer import table1_zeroshot as table1
    from scaling_axes.harness.results import published

    rows = {r.row: r for r in table1.average_rows(published("tokenformer"))}
    assert {name for name, r in rows.items() if r.status == "differs"} == {"pythia_160m", "gpt_neo_2_7b"}
    assert rows["pythia_160m"].ours == pytest.approx((35.4 + 30.3 + 62.3 + 43.6 + 23.6 + 51.3) / 6)
    assert rows["gpt_neo_2_7b"].ours == pytest.approx((62.2 + 55.8 + 71.1 + 61.1 + 30.2 + 57.6) / 6)
    assert len(rows) == 13 and "erratum" in rows["gpt_neo_2_7b"].note
