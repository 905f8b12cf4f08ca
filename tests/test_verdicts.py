"""What a verdict rests on, measured by the harness: each corpus's unigram floor, whether each run learned (a claim
is never decided on one that did not), and the noise of one run measured from the seeds of all an experiment's
runs, which raises the assumed floor and sizes each undecided claim's minimum detectable effect."""

import collections
import dataclasses
import json
import math
import statistics

import numpy as np
import pytest

from scaling_axes.datamodules.corpora import corpus_dir, prepare_corpus
from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.harness.claims.verdicts import judge, lower_loss
from scaling_axes.harness.experiment.noise import measured_noise, trained_runs
from scaling_axes.harness.experiment.table import rebuild
from scaling_axes.harness.results import Row
from scaling_axes.harness.runs import Budget, Experiment, Run, run_dir
from scaling_axes.harness.scales import CPU
from scaling_axes.harness.training.rundir import write_done
from scaling_axes.io import atomic_torch_save
from scaling_axes.significance import minimum_detectable_effect, pooled_spread

TINY = {"n_layer": 1, "d_model": 32, "n_head": 4, "max_seq_len": 64, "vocab_size": 512}


def test_the_unigram_floor_is_the_entropy_of_the_training_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path))
    prepare_corpus("embedded_news", "bytes")
    directory = corpus_dir(tmp_path, "embedded_news", "bytes")
    tokens = np.fromfile(directory / "train.bin", dtype=json.loads((directory / "meta.json").read_text())["dtype"])
    counts = collections.Counter(tokens.tolist())
    expected = -math.fsum(c / len(tokens) * math.log(c / len(tokens)) for c in counts.values())
    assert unigram_floor("embedded_news", "bytes") == pytest.approx(expected, rel=1e-12)
    from scaling_axes.io import CorruptFileError, atomic_write

    cache = json.loads((directory / "unigram.json").read_text())
    atomic_write(directory / "unigram.json", json.dumps({**cache, "nats_per_token": 1.0}), checksum=True)
    assert unigram_floor("embedded_news", "bytes") == 1.0  # counted once, read back while the split is unchanged
    atomic_write(
        directory / "unigram.json",
        json.dumps({**cache, "nats_per_token": 1.0, "train_blake2b": "other"}),
        checksum=True,
    )
    assert unigram_floor("embedded_news", "bytes") == pytest.approx(expected, rel=1e-12)  # another split: recounted
    edited = (directory / "unigram.json").read_text().replace(f"{expected}"[:6], "12.0")
    (directory / "unigram.json").write_text(edited)  # the floor decides not_learning: an edit is refused
    with pytest.raises(CorruptFileError, match=r"unigram\.json.*to count it again"):
        unigram_floor("embedded_news", "bytes")
    atomic_write(directory / "unigram.json", "[]", checksum=True)  # a checksummed file of nothing: one line too
    with pytest.raises(CorruptFileError, match="holds no unigram cross-entropy"):
        unigram_floor("embedded_news", "bytes")


def _experiment(runs: list[Run]) -> Experiment:
    def claims(scale, results):
        return [lower_loss("t", "a beats b", scale, "a", "b", results)]

    return Experiment("verdict_test", "hand-written runs", lambda scale: runs, claims)


def _finish(tmp_path, experiment: Experiment, name: str, **done) -> None:
    out = run_dir(
        experiment, CPU, next(r for r in experiment.runs(CPU) if r.name == name.split("_seed")[0]), tmp_path / "runs"
    ).with_name(name)
    out.mkdir(parents=True)
    atomic_torch_save({}, out / "final.pt", checksum=True)
    write_done(out, {"run": name, "steps": 3, **done})


def _claim(tmp_path, experiment: Experiment) -> dict:
    path = rebuild(experiment, CPU, tmp_path / "runs", tmp_path / "results")
    import csv

    with open(path, newline="") as f:
        return next(r for r in csv.DictReader(f) if r["metric"] == "claim")


@pytest.mark.parametrize(("loser_loss", "status"), [(2.0, "insufficient"), (4.9, "not_learning")])
def test_a_run_that_did_not_learn_decides_no_claim(tmp_path, monkeypatch, loser_loss, status):
    from scaling_axes.harness.experiment import table

    monkeypatch.setattr(table, "confirming_plan", lambda scale, root=".": None)  # judged by the plan in force
    budget = Budget(steps=3, batch_size=4, seq_len=64)
    runs = [Run(name, "transformer_124m", budget, TINY, corpus="embedded_news", tokenizer="bytes") for name in "ab"]
    experiment = _experiment(runs)
    floor = unigram_floor("embedded_news", "bytes")
    assert 2.0 + 0.5 < floor < 4.9 + 0.5  # b at 4.9 is within half a nat of the floor (or above it)
    for k, jitter in enumerate((0.0, 0.01, -0.01), 1):
        suffix = "" if k == 1 else f"_seed{k}"
        _finish(tmp_path, experiment, f"a{suffix}", val_loss=1.0 + jitter, test_loss=1.0 + jitter)
        _finish(tmp_path, experiment, f"b{suffix}", val_loss=loser_loss - jitter, test_loss=loser_loss - jitter)
    claim = _claim(tmp_path, experiment)  # no plan names this claim: learned, it is described, not decided
    assert claim["status"] == status, claim["note"]
    if status == "not_learning":
        assert f"b seed 1 ends at 4.900 nats/token, not 0.5 below the unigram floor {floor:.3f}" in claim["note"]
    else:
        assert "not in the plan" in claim["note"]


def test_an_image_run_at_chance_decides_no_claim(tmp_path):
    budget = Budget(steps=3, batch_size=4, seq_len=1)
    runs = [Run(name, "vit_b16", budget, {"num_classes": 10, "img_size": 16, "depth": 1}) for name in "ab"]

    def claims(scale, results):
        from scaling_axes.harness.claims.verdicts import as_good_as

        return [as_good_as("t", "a is as good as b", scale, "a", "b", results)]

    experiment = Experiment("vit_verdict_test", "hand-written runs", lambda scale: runs, claims)
    for name, top1 in (("a", 0.95), ("b", 0.30)):
        _finish(tmp_path, experiment, name, val_top1=top1)
    claim = _claim(tmp_path, experiment)
    assert (
        claim["status"] == "not_learning"
        and "b seed 1 ends at 30.0% top-1, not 25 points above chance (10%)" in claim["note"]
    )


def test_noise_is_measured_from_every_runs_seeds(tmp_path):
    """Run c's seeds spread widely; a and b agree to the last digit: the pooled spread of one run (a, b and c's
    seeds) is measured and reported (a `noise` row), as the scale's caveat; no claim's test rests on it."""
    budget = Budget(steps=3, batch_size=4, seq_len=64)
    runs = [Run(name, "transformer_124m", budget, TINY, corpus="embedded_news", tokenizer="bytes") for name in "abc"]
    experiment = _experiment(runs)
    values = {"a": [1.0, 1.0, 1.0], "b": [1.1, 1.1, 1.1], "c": [1.0, 1.6, 2.2]}
    for name, losses in values.items():
        for k, loss in enumerate(losses, 1):
            _finish(tmp_path, experiment, name + ("" if k == 1 else f"_seed{k}"), val_loss=loss)
    noise, _ = measured_noise(trained_runs(tmp_path / "runs" / "verdict_test" / "cpu"))
    dof = sum(len(v) - 1 for v in values.values())
    expected = math.sqrt(sum((len(v) - 1) * statistics.variance(v) for v in values.values()) / dof)
    assert (
        noise["val_loss"] == pytest.approx((expected, dof))
        and pooled_spread(list(values.values())) == (noise["val_loss"])
    )
    path = rebuild(experiment, CPU, tmp_path / "runs", tmp_path / "results")
    import csv

    with open(path, newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if (r["table"], r["row"]) == ("noise", "val_loss")]
    assert float(row["ours"]) == pytest.approx(expected, rel=1e-5) and f"{dof} degrees of freedom" in row["note"]


def test_the_minimum_detectable_effect_is_the_noncentral_ts():
    """The effect that n seeds find 4 times in 5 at one-sided 2.5% (a scale's design: what it cannot detect, before
    any run): scipy's noncentral t, not (t + 0.84) sigma / sqrt n, which mixes t and z."""
    from scipy import stats

    for seeds in (1, 2, 3, 10, 40):
        df = seeds - 1 if seeds > 1 else math.inf
        effect = minimum_detectable_effect(0.1, seeds) * math.sqrt(seeds) / 0.1  # the noncentrality
        critical = stats.norm.ppf(0.975) if math.isinf(df) else stats.t.ppf(0.975, df)
        power = stats.norm.sf(critical - effect) if math.isinf(df) else stats.nct.sf(critical, df, effect)
        assert power == pytest.approx(0.8, abs=1e-6), seeds
    assert minimum_detectable_effect(1.0, 3) == pytest.approx(3.264, abs=2e-3)


def test_a_run_two_experiments_declare_identically_is_trained_once(tmp_path, capsys):
    """B declares A's run under another name (and a run grown from it, as A does): both are links to A's
    directories, its numbers read by B's report, not stale; a run that differs in anything is trained."""
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.harness.experiment.finished import FinishedRuns

    budget = Budget(steps=2, batch_size=2, seq_len=32, val_windows=2)
    base = Run("base", "transformer_124m", budget, TINY, corpus="embedded_news", tokenizer="bytes")
    grown = Run(
        "grown",
        "transformer_124m",
        budget,
        {**TINY, "d_model": 48},
        corpus="embedded_news",
        tokenizer="bytes",
        grow_from="base",
    )

    def experiment(name: str, renamed: str, other_lr: float, base_lr: float = 6e-4) -> Experiment:
        source = dataclasses.replace(base, name=renamed, budget=dataclasses.replace(budget, lr=base_lr))
        runs = [
            source,
            dataclasses.replace(grown, grow_from=renamed),
            dataclasses.replace(base, name="other", budget=dataclasses.replace(budget, lr=other_lr)),
        ]
        return Experiment(name, "a shared run", lambda scale: runs, lambda scale, results: [])

    first, second = experiment("first", "base", 1e-3), experiment("second", "from_scratch", 2e-3)
    third = experiment("third", "base", 1e-3, base_lr=3e-4)  # the grown run's source differs: so does the run
    for each in (first, second, third):
        main(each, ["--scale", "cpu", "--pilot", "--seeds", "1", "--out-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    runs = tmp_path / "runs"
    for name, source in (("from_scratch", "base"), ("grown", "grown")):
        assert (runs / "second" / "cpu" / name).is_symlink()
        assert (runs / "second" / "cpu" / name).resolve() == (runs / "first" / "cpu" / source).resolve()
    assert not (runs / "second" / "cpu" / "other").is_symlink()  # another lr: another run
    assert not any((runs / "third" / "cpu" / name).is_symlink() for name in ("base", "grown"))
    assert (runs / "third" / "cpu" / "other").is_symlink()  # first's, at the same lr
    assert printed.count("training run") == 6 and printed.count("trained once") == 3
    results = FinishedRuns(second, CPU, runs).results()
    assert set(results) == {"from_scratch", "grown", "other"} and not any("stale" in r for r in results.values())


def test_a_claim_whose_paper_effect_is_below_what_the_scale_detects_is_out_of_reach():
    from scaling_axes.experiments.rmt import table5_6_downstream as table5
    from scaling_axes.harness.scales import PAPER
    from scaling_axes.significance import beyond_reach

    # one seed of two runs: (1.96 + 0.84) x sqrt 2 x the noise
    assert beyond_reach(0.1, 0.02, 1) is None and beyond_reach(0.05, 0.02, 1) is not None
    assert "minimum detectable effect here, 0.0792" in beyond_reach(0.05, 0.02, 1)  # (1.96 + 0.84) x sqrt 2 x 0.02
    values = {
        "lambada_ppl": (60.0, 30.0),
        "openwebtext_ppl": (20.0, 18.0),
        "pile_10k_ppl": (20.0, 18.0),
        "wikitext_ppl": (20.0, 18.0),
        "piqa_acc": (60.0, 63.0),
    }  # (Transformer, RMT)
    rows = {
        name: {k: {metric: pair[i] * (1 + 0.01 * (k - 2)) for metric, pair in values.items()} for k in (1, 2, 3)}
        for i, name in enumerate((table5.TRANSFORMER, table5.RMT))
    }
    status = {r.row.rsplit("_vs_", 1)[1]: r.status for r in table5.claim_rows(CPU, rows)}
    suffix = table5.TRANSFORMER + "_"
    status = {k.removeprefix(suffix): v for k, v in status.items()}
    assert status == {  # the plan decides the two measured; the stand-in's two other names and piqa never measured
        "lambada_ppl": "insufficient",
        "openwebtext_ppl": "insufficient",
        "pile_10k_ppl": "out_of_reach",
        "wikitext_ppl": "out_of_reach",
        "piqa_acc": "out_of_reach",
    }
    assert "out_of_reach" not in {r.status for r in table5.claim_rows(PAPER, rows)}


@pytest.mark.parametrize(("device", "status"), [("cpu", "out_of_reach"), ("NVIDIA H100 80GB HBM3", "insufficient")])
def test_a_gpu_step_time_claim_is_out_of_reach_of_cpu_runs(device, status):
    from scaling_axes.experiments.mot import results_tables

    runs = {run.name: run for run in results_tables.runs(CPU)}
    curves = {c: [[10, 3.0]] for run in runs.values() for c in (run.corpus, *run.data["extra_corpora"])}
    each = {"step_ms": 100.0, "device": device, "val_loss_curves": curves}
    results = {name: {**each, "seed_runs": {k: each for k in (2, 3)}} for name in runs}
    step_rows = [r for r in results_tables.claim_rows(CPU, results) if r.row.endswith("_step_time")]
    assert step_rows and {r.status for r in step_rows} == {status}


def test_an_equal_parameters_claim_on_unmatched_arms_decides_nothing():
    from scaling_axes.experiments.cross_architecture import setup as cross
    from scaling_axes.harness.experiment.arms import parameter_match
    from scaling_axes.harness.scales import PAPER, SMALL
    from scaling_axes.modules import get_config
    from scaling_axes.modules.flops import formula_params

    small = get_config("transformer_124m", **TINY, tie_embeddings=False)
    wider = get_config("transformer_124m", **{**TINY, "d_model": 36}, tie_embeddings=False)
    tied = get_config("transformer_124m", **TINY, tie_embeddings=True)
    rows, why = parameter_match("t", {"a": small, "b": wider}, "total")
    counts = {(r.row, r.metric): r.ours for r in rows}
    assert (
        counts[("a", "total_params")] == sum(formula_params(small).values()) and ("b", "non_embedding_params") in counts
    )
    assert why.startswith("total parameters") and "above 3%" in why
    assert "the head is tied on b only" == parameter_match("t", {"a": small, "b": tied}, "non_embedding")[1]
    claim = judge("t", "a_vs_b", "a beats b at equal parameters", CPU, [0.3, 0.25, 0.28], unmatched=why)
    assert (
        claim.status == "unmatched"
        and "the arms are not matched on what the claim is stated at: total parameters" in claim.note
    )
    for scale in (CPU, SMALL, PAPER):  # the cross-architecture arms, heads untied on both
        for size in cross.sizes(scale):
            configs = {a: cross.make_run(scale, a, size).config for a in ("tokenformer", "transformer")}
            assert parameter_match("t", configs, "total")[1] is None, (scale, size)
    from scaling_axes.experiments.tokenformer import fig6_enwik8_continual, fig7_net2net_scaling, progressive

    for scale in (CPU, SMALL):  # the growth claims' families, at equal total parameters (the paper's size labels)
        for module in (fig6_enwik8_continual, fig7_net2net_scaling):
            rows = module.EXPERIMENT.report(scale, {})
            claims = [r for r in rows if r.metric == "claim" and "_vs_transformer" in r.row]
            assert claims and all(r.evidence.unmatched is None for r in claims), (scale, module.__name__)
    grown = {run.name: run for run in fig7_net2net_scaling.runs(CPU)}
    across_sizes = progressive.gain_claim(
        "fig7", "tokens beat Net2Net", CPU, grown["tokenformer_1_4b_short"], grown["transformer_757m_short"], {}
    )[0]
    assert across_sizes.evidence.unmatched.startswith("total parameters")


def test_the_vit_claims_are_out_of_reach_at_cpu_scale_and_not_trained_there():
    """One cpu ViT's top-1 spreads 2.6 points over seeds: three seeds detect about 11 points, and the paper's
    effects are 0.2-2.9 points. No ViT is trained at cpu scale; each claim says why; at small scale they are."""
    from scaling_axes.experiments.tokenformer import table2_imagenet, table4_softmax_ablation, table5_layernorm_ablation
    from scaling_axes.harness.scales import SMALL

    for module in (table2_imagenet, table4_softmax_ablation, table5_layernorm_ablation):
        assert module.EXPERIMENT.runs(CPU) == [] and module.EXPERIMENT.runs(SMALL)
        claims = [r for r in module.EXPERIMENT.report(CPU, {}) if r.metric == "claim"]
        assert claims and {r.status for r in claims} == {"out_of_reach"}
        assert all("below the minimum detectable effect here" in r.note for r in claims)


@pytest.mark.parametrize("tokenformer_gain", [0.3, 0.6])
def test_growth_claims_measure_what_each_growth_gained_not_the_base_models_gap(tokenformer_gain):
    """Fig. 7: the Tokenformer chain starts 0.5 nats below the Transformer's. Growing gains the Transformer 0.3 nats
    over a stage; a Tokenformer that gains as much ends 0.5 below it, and that is the base models' gap, not growth:
    a margin of 0. One that gains 0.6 beats Net2Net by 0.3 nats. Each arm's gain is its value of the contrast."""
    from scaling_axes.experiments.tokenformer import fig7_net2net_scaling as fig7

    results = {}
    for run in fig7.runs(CPU):
        family_start = 5.0 if run.name.startswith("tokenformer") else 5.5
        gain = tokenformer_gain if run.name.startswith("tokenformer") else 0.3
        each = {
            k: {"val_loss_before_growth": family_start + 0.01 * k, "val_loss": family_start + 0.01 * k - gain}
            for k in (1, 2, 3)
        }
        results[run.name] = {**each[1], "seed_runs": {2: each[2], 3: each[3]}}
    rows = {(r.row, r.metric): r for r in fig7.claims(CPU, results)}
    pair = "tokenformer_1_4b_short_vs_transformer_1_4b_short"
    claim = rows[(pair, "claim")].evidence
    assert statistics.fmean(claim.margins) == pytest.approx(tokenformer_gain - 0.3)
    assert claim.measure == "stage_gain" and claim.arm_values["transformer_1_4b_short"][2] == pytest.approx(0.3)
    assert rows[(pair, "final_loss_margin")].ours == pytest.approx(0.5 + tokenformer_gain - 0.3)
    assert rows[(pair, "start_gap")].ours == pytest.approx(0.5)


def test_fig7_positive_control_is_the_net2net_stage_gain_on_its_own_seeds():
    """Fig. 7's control (issue 83): the Net2Net-grown 1.4B against the 757M it grew from, margin the 757M's final
    loss minus the 1.4B's per seed, so a design that cannot resolve a stage's gain judges none of its claims."""
    from scaling_axes.experiments.tokenformer import fig7_net2net_scaling as fig7

    results = {run.name: {"val_loss": 5.0, "seed_runs": {2: {"val_loss": 5.0}}} for run in fig7.runs(CPU)}
    for k, (small, large) in enumerate(((5.0, 4.7), (5.1, 4.9))):
        for name, loss in (("transformer_757m_short", small), ("transformer_1_4b_short", large)):
            (results[name] if k == 0 else results[name]["seed_runs"][2])["val_loss"] = loss
    row = next(r for r in fig7.claims(CPU, results) if r.row.endswith("1_4b_short_vs_transformer_757m_short"))
    assert row.metric == "claim" and row.evidence.margins == pytest.approx([0.3, 0.2])


def test_runs_no_claim_reads_train_only_on_request_where_claims_are_judged(monkeypatch, tmp_path):
    """Below paper scale Fig. 3's random-key chain and its Transformers from scratch feed no claim, and the cpu
    diagnosis chose a recipe once: `all` trains none of them there (it still reports the diagnosis), smoke does."""
    from scaling_axes import cli
    from scaling_axes.experiments.tokenformer import fig3_progressive_scaling as fig3
    from scaling_axes.harness.scales import SMOKE

    declared = {run.name: run for run in fig3.runs(CPU)}
    assert all(run.on_request for name, run in declared.items() if name.endswith("random") or "transformer" in name)
    compared = {name for row in fig3.claims(CPU, {}) if row.metric == "claim" for name in row.run.split(",")}
    assert compared and not any(declared[name].on_request for name in compared)
    assert not any(run.on_request for run in fig3.runs(SMOKE))
    calls = {}
    monkeypatch.setattr(  # where `run_all` imports them from when it runs
        "scaling_axes.harness.experiment.command.main",
        lambda experiment, args: calls.setdefault(args[1], {}).update({experiment.name: "--report" in args}),
    )
    monkeypatch.setattr("scaling_axes.harness.experiment.report.write_report", lambda **kwargs: tmp_path / "R.md")
    monkeypatch.setattr("scaling_axes.harness.runs.RUNS_DIR", tmp_path)
    for scale in (CPU, SMOKE):
        cli.run_all(scale, report_only=False)
    from scaling_axes.experiments import all_experiments

    diagnoses = {e.name for e in all_experiments() if e.on_request}
    assert {"tokenformer_cpu_diagnosis", "rmt_cpu_diagnosis", "recipe_attribution"} <= diagnoses
    assert all(calls["cpu"][name] and not calls["smoke"][name] for name in diagnoses)
    assert not any(report for name, report in calls["cpu"].items() if name not in diagnoses)


def test_a_number_unlike_the_papers_is_not_comparable_never_match_or_differs():
    """A time on this machine, or a loss learned from an embedded stand-in for the paper's corpus, beside the
    paper's number is `not_comparable`, saying why; a parameter count of the same runs is compared as it is."""
    from scaling_axes.harness.experiment.table import data_caveats

    run = Run("r", "transformer_124m", Budget(steps=3, batch_size=4, seq_len=64), TINY, corpus="embedded_news")
    on_owt = dataclasses.replace(run, name="o", corpus="openwebtext")
    rows = [
        Row(table="t", row="r", metric="train_loss", paper=3.0, ours=5.0, unit="nats/token", run="r", status="differs"),
        Row(table="t", row="r", metric="train_seconds", paper=3600, ours=3500, unit="s", run="o", status="match"),
        Row(table="t", row="r", metric="params", paper=100, ours=101, unit="parameters", run="r", status="match"),
        Row(table="t", row="o", metric="train_loss", paper=3.0, ours=3.01, unit="nats/token", run="o", status="match"),
    ]
    out = {(r.run, r.metric): r for r in data_caveats(rows, {}, [run, on_owt])}
    assert out[("r", "train_loss")].status == out[("o", "train_seconds")].status == "not_comparable"
    assert "embedded stand-in" in out[("r", "train_loss")].note and "machine" in out[("o", "train_seconds")].note
    assert out[("r", "params")].status == out[("o", "train_loss")].status == "match"
