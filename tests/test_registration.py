"""What a registration fixes beyond its claims (issue 83): the thresholds the judge cuts at, as the code has them
when it is committed (a later change to the code stops the judging), and the analysis code's commit; REPORT.md says
both."""

import pytest

from scaling_axes.harness.claims.plan import PlanError
from scaling_axes.harness.experiment.plan_checks import check_thresholds
from scaling_axes.harness.experiment.report import registered
from scaling_axes.harness.stability import OUTLIER_Z, SPIKE_NATS
from tests.committed_plans import IN_FORCE, issue73_plan
from tests.test_controls import _plan


def test_registered_thresholds_must_be_the_codes_and_the_report_names_them():
    plan = _plan(thresholds={"SPIKE_NATS": SPIKE_NATS, "OUTLIER_Z": OUTLIER_Z}, analysis_commit="abc1234")
    check_thresholds(plan, "plan.yaml")
    assert (
        registered(plan)
        == f" It registered the analysis code of commit `abc1234`; SPIKE_NATS {SPIKE_NATS:g}, OUTLIER_Z {OUTLIER_Z:g}."
    )
    assert registered(_plan()) == ""
    with pytest.raises(
        PlanError, match=r"thresholds.SPIKE_NATS was registered as 0.7 but the code says 0.8: the analysis changed"
    ):
        check_thresholds(_plan(thresholds={"SPIKE_NATS": 0.7}), "plan.yaml")
    with pytest.raises(PlanError, match=r"thresholds.SPIKES is no threshold of the code's \(SPIKE_NATS, "):
        check_thresholds(_plan(thresholds={"SPIKES": 0.8}), "plan.yaml")
    with pytest.raises(PlanError, match=r"thresholds.SPIKE_NATS: a number"):
        _plan(thresholds={"SPIKE_NATS": "high"})


def test_an_effect_fixed_as_a_rule_before_the_pilot_is_computed_from_it(tmp_path):
    """Issue 83: a first registration fixes each effect as a fraction of a run's mean final loss in the pilot (on the
    split the plan judges); the power analysis computes the number from the pilot's per-seed file."""
    import dataclasses

    from scaling_axes.harness.claims.observed import SEED_COLUMNS
    from scaling_axes.harness.claims.plan import DecisionRules
    from scaling_axes.harness.claims.power import resolved_effects
    from scaling_axes.harness.results import COLUMNS
    from scaling_axes.io import write_csv
    from tests.test_controls import _claim

    ruled = {k: v for k, v in _claim("c", "primary", "t/a_vs_b").items() if k != "effect"}
    ruled["effect_rule"] = {"fraction": 0.05, "of": "b"}
    plan = _plan(papers={"rmt": [ruled]})
    assert plan.claims[0].effect == 0.0 and plan.claims[0].effect_rule == (0.05, "b")
    seeds = [
        {"kind": "run", "run": "b", "seed": k, "metric": m, "value": v}
        for k, (val, test) in {1: (4.0, 4.2), 2: (4.4, 4.6)}.items()
        for m, v in (("val_loss", val), ("test_loss", test))
    ]
    write_csv(tmp_path / "e.csv", COLUMNS, [])
    write_csv(tmp_path / "seeds" / "e.csv", SEED_COLUMNS, seeds, checksum=True)
    plan = dataclasses.replace(plan, pilot=str(tmp_path), root=".")
    assert resolved_effects(plan).claims[0].effect == pytest.approx(0.05 * 4.2)
    on_test = dataclasses.replace(plan, rules=DecisionRules(verdict_split="test"))
    assert resolved_effects(on_test).claims[0].effect == pytest.approx(0.05 * 4.4)
    with pytest.raises(PlanError, match=r"missing field 'effect' \(or an effect_rule"):
        _plan(papers={"rmt": [{k: v for k, v in ruled.items() if k != "effect_rule"}]})


def test_the_cpu_plan_reads_and_names_rows_and_runs_its_experiments_declare():
    """Issue 83's registration (scaling_axes/plans/cpu.yaml, in force) stays a plan the suite reads: each claim
    in its family names rows its experiment writes at cpu and an effect rule on a run it trains; every experiment of
    its priority order is one of the suite's; each primary family has one or two claims."""
    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.claims.plan import read_plan
    from scaling_axes.harness.scales import CPU

    plan = read_plan(IN_FORCE)
    experiments = {e.name: e for e in all_experiments()}
    assert set(plan.cost.priority) <= set(experiments)
    for claim in (c for c in plan.claims if c.in_family):
        experiment = experiments[claim.experiment]
        rows = {f"{r.table}/{r.row}" for r in experiment.report(CPU, {}) if r.metric == "claim"}
        assert set(claim.rows) <= rows, (claim.id, set(claim.rows) - rows)
        if claim.effect_rule:
            assert claim.effect_rule[1] in {r.name for r in experiment.runs(CPU)}, claim.id
    assert {c.experiment for c in plan.claims if c.role == "control"} == {
        "cross_architecture",
        "rmt_fig2_scaling_laws",
        "rmt_table3_4_resources",
        "tokenformer_fig3_progressive_scaling",
        "tokenformer_fig7_net2net_scaling",
    }


def test_a_plan_registered_before_the_recipes_changed_trains_no_confirmatory_run(tmp_path, capsys, monkeypatch):
    """The committed cpu plan of issue 73 (no analysis_commit) would train its arms at its rates under the new
    recipes and record its old digest; were it the plan a confirmatory run trains under, the command refuses, in one
    line, and still lists its runs (pinned to it whatever registration is pending)."""
    from scaling_axes.experiments.cross_architecture import table
    from scaling_axes.harness.experiment import command
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.io import SuiteError

    def would_train(*args, **kwargs):
        raise AssertionError("the command went on to train the old plan's runs")

    old = issue73_plan()
    assert not old.analysis_commit
    monkeypatch.setattr(command, "training_plan", lambda scale: old)
    monkeypatch.setattr(command.Schedule, "of", would_train)
    with pytest.raises(SuiteError, match=r"registered no analysis_commit: its confirmatory runs trained before"):
        main(table.EXPERIMENT, ["--scale", "cpu", "--out-dir", str(tmp_path)])
    assert not (tmp_path / "runs").exists()
    main(table.EXPERIMENT, ["--scale", "cpu", "--list"])
    assert "the plan's confirmatory runs" in capsys.readouterr().out


def test_a_pilot_trains_under_the_pending_registration_and_into_its_pilot_folder(tmp_path, monkeypatch):
    """Issue 83's first registration is committed before its pilot: each pilot run records the pending plan's digest
    (so `git log` and the run show which registration it trained under), and the pilot's tables go into the plan's
    `pilot:` folder, never over the plan in force's pilot."""
    import yaml

    from scaling_axes.harness.claims import plan as plan_module
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.harness.runs import Budget, Experiment, Run, run_dir
    from scaling_axes.harness.scales import CPU

    pending = {k: v for k, v in yaml.safe_load(IN_FORCE.read_text()).items() if k != "experiments"}
    path = tmp_path / "pending.yaml"
    path.write_text(yaml.safe_dump({**pending, "pilot": "results/cpu/pilot_next"}))
    monkeypatch.setattr(plan_module, "pending_path", lambda scale: path)
    tiny = {"n_layer": 1, "d_model": 32, "n_head": 4, "max_seq_len": 64, "vocab_size": 512}
    run = Run(
        "r",
        "transformer_124m",
        Budget(steps=2, batch_size=2, seq_len=32, val_windows=2),
        tiny,
        corpus="embedded_news",
        tokenizer="bytes",
    )
    experiment = Experiment("pilot_test", "a pilot", lambda scale: [run], lambda scale, results: [])
    main(experiment, ["--scale", "cpu", "--pilot", "--seeds", "1", "--out-dir", str(tmp_path)])
    config = yaml.safe_load((run_dir(experiment, CPU, run, tmp_path / "runs") / "config.yaml").read_text())
    assert config["labels"]["plan"] == plan_module.digest_of(path)
    assert (tmp_path / "results" / "cpu" / "pilot_next" / "pilot_test.csv").exists()
    assert not (tmp_path / "results" / "cpu" / "pilot").exists()


def test_a_second_registration_trains_its_seeds_beside_the_plan_in_force(tmp_path, monkeypatch):
    """Once the pending registration holds its experiments part, `run` trains its arms at its fresh seeds and fixed
    rates under its digest, and judges their tables in results/cpu/registered/: the plan in force keeps its tables
    and its REPORT.md until the registration's last experiment finished."""
    import yaml

    from scaling_axes.harness.claims import plan as plan_module
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.harness.runs import Budget, Experiment, Run, run_dir, seed_run
    from scaling_axes.harness.scales import CPU

    pending = yaml.safe_load(IN_FORCE.read_text())
    arms = {"seeds": [4], "test": "own_spread", "test_source": "one contrast", "arms": {"r": 0.004}}
    path = tmp_path / "pending.yaml"
    path.write_text(yaml.safe_dump({**pending, "experiments": {"registered_test": arms}}))
    monkeypatch.setattr(plan_module, "pending_path", lambda scale: path)
    tiny = {"n_layer": 1, "d_model": 32, "n_head": 4, "max_seq_len": 64, "vocab_size": 512}
    budget = Budget(steps=2, batch_size=2, seq_len=32, val_windows=2)
    run = Run("r", "transformer_124m", budget, tiny, corpus="embedded_news", tokenizer="bytes")
    experiment = Experiment("registered_test", "a confirmatory run", lambda scale: [run], lambda scale, results: [])
    main(experiment, ["--scale", "cpu", "--out-dir", str(tmp_path)])
    out = run_dir(experiment, CPU, seed_run(run, 4), tmp_path / "runs")
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["labels"]["plan"] == plan_module.digest_of(path) and config["budget"]["lr"] == 0.004
    assert (tmp_path / "results" / "cpu" / "registered" / "registered_test.csv").exists()
    assert not (tmp_path / "results" / "cpu" / "registered_test.csv").exists()
    assert not (tmp_path / "results" / "cpu" / "REPORT.md").exists()


def test_the_pending_plan_is_checked_against_the_pilot_but_not_an_experiment_it_trains_none_of(tmp_path):
    """`power --draft` checks each claim's rows against the experiment's tables; an experiment the registration
    declares out_of_budget writes no new rows (Tokenformer Fig. 7's control is a row issue 73's table never had),
    so its claims are not held to them. Without the declaration the check stops at the experiment, naming it: its
    pilot trained none of it."""
    import yaml

    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.claims.plan import PlanError
    from scaling_axes.harness.experiment.plan_checks import checked_plan
    from scaling_axes.harness.scales import CPU

    root = IN_FORCE.parents[2]
    names = {e.name for e in all_experiments()}
    assert checked_plan(CPU, root, names, draft=True, path=IN_FORCE).out_of_budget("tokenformer_fig7_net2net_scaling")
    data = yaml.safe_load(IN_FORCE.read_text())
    del data["out_of_budget"]
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlanError, match=r"pilot results/cpu/pilot83 lacks tokenformer_fig7_net2net_scaling's table"):
        checked_plan(CPU, root, names, draft=True, path=path)
