"""Learning-rate sweeps run by the harness: a best rate at an edge extends the sweep until it is interior, the best
and its neighbours are compared by their mean over two draws (so one lucky draw cannot choose) and a rate that spiked
is never chosen, a sweep trains on seeds no claim is judged on, the claims' seeds train at the chosen rate, a family
carries its rate by a stated rule and checks it at its largest size."""

import itertools
import json
import math

import pytest
import yaml

from scaling_axes.harness.claims.margins import LOSS_NOISE_FLOOR
from scaling_axes.harness.experiment.command import main
from scaling_axes.harness.experiment.finished import FinishedRuns
from scaling_axes.harness.experiment.tuning import checked, choose, fallback, tune
from scaling_axes.harness.names import parse_seed, parse_stable, parse_sweep, rate, seed_name
from scaling_axes.harness.runs import Budget, Experiment, Run, run_dir
from scaling_axes.harness.scales import CPU
from scaling_axes.harness.sweeps import (
    MAX_EXTENSIONS,
    ONE_SEED_Z,
    STABLE_REGION,
    Choice,
    Point,
    Sweep,
    neighbours,
    planned_points,
    stable_run,
    sweep_point,
)

GRID = (1e-3, 3e-3, 1e-2)


def _bowl(optimum: float, diverge_above: float = math.inf):
    """A final loss of (log lr - log optimum)^2 at every draw (diverged above `diverge_above`)."""
    return lambda lr, draw: Point(None if lr > diverge_above else (math.log(lr) - math.log(optimum)) ** 2)


def _sweep(point_at, grid=GRID, draws: int = 2) -> tuple[list[tuple[float, int]], Choice]:
    """Tune a run whose draw `draw` at rate `lr` ends at `point_at(lr, draw)`: the (rate, draw) trained in order."""
    trained: dict[float, dict[int, Point]] = {}
    run = Run("r", "transformer_124m", Budget(1, 1, 8), sweep=Sweep(grid, draws=draws))

    def train(point: Run) -> None:
        draw = run.seed - point.seed
        assert point.name == sweep_point(run, point.budget.lr, draw).name and draw >= 1  # never a claim's seed
        trained.setdefault(point.budget.lr, {})[draw] = point_at(point.budget.lr, draw)

    choice = tune(run, lambda r: {lr: dict(d) for lr, d in trained.items()}, lambda name: None, train)
    order = sorted(((lr, k) for lr, d in trained.items() for k in d), key=lambda p: (p[1] > 1, 0))
    return [p for p in order if p[1] == 1] + [p for p in order if p[1] > 1], choice


def _first_draws(order):
    return [lr for lr, draw in order if draw == 1]


def test_a_sweep_whose_best_is_at_an_edge_extends_past_it_until_interior():
    order, choice = _sweep(_bowl(0.05))  # above the grid: 3e-2 then 9e-2 are tried, 3e-2 is interior
    assert _first_draws(order) == [1e-3, 3e-3, 1e-2, rate(3e-2), rate(9e-2)]
    assert choice.lr == rate(3e-2) and not choice.at_edge
    order, choice = _sweep(_bowl(2e-4))  # below it
    assert _first_draws(order)[3:] == [rate(1e-3 / 3), rate(1e-3 / 9)] and choice.lr == rate(1e-3 / 3)
    order, choice = _sweep(_bowl(3e-3))  # interior at once: the grid, then the best again (its neighbours are far
    assert _first_draws(order) == list(GRID) and choice.lr == 3e-3  # beyond the noise its two equal draws show)
    assert [lr for lr, draw in order if draw == 2] == [3e-3]


def test_a_diverged_point_is_the_worst_and_a_sweep_stops_extending_at_its_limit():
    order, choice = _sweep(_bowl(1.0, diverge_above=2e-2))  # 3e-2 diverges: 1e-2 is interior between 3e-3 and it
    assert _first_draws(order)[-1] == rate(3e-2) and choice.lr == 1e-2 and not choice.at_edge
    assert (rate(3e-2), 2) not in order  # a diverged rate is not drawn again
    order, choice = _sweep(_bowl(100.0))  # the best keeps moving up: MAX_EXTENSIONS steps, then flagged
    assert len(_first_draws(order)) == len(GRID) + MAX_EXTENSIONS and choice.at_edge and choice.lr == max(order)[0]


def test_a_lucky_first_draw_does_not_choose_the_rate_the_mean_over_draws_does():
    """The cross-architecture Transformer at cpu (measured, issue 46): its first sweep draw reached 4.946 at 9e-3 and
    5.151 at 3e-3; the second 5.562 and 5.166. One draw chose 9e-3, the mean chooses 3e-3."""
    measured = {
        (9e-4, 1): 5.888,
        (3e-3, 1): 5.151,
        (9e-3, 1): 4.946,
        (3e-2, 1): 5.669,
        (9e-4, 2): 6.0,
        (3e-3, 2): 5.166,
        (9e-3, 2): 5.562,
        (3e-2, 2): 6.083,
    }
    grid = (9e-4, 3e-3, 9e-3, 3e-2)
    one_draw = _sweep(lambda lr, draw: Point(measured[lr, draw]), grid, draws=1)[1]
    assert one_draw.lr == 9e-3  # what the single-seed sweep chose
    order, choice = _sweep(lambda lr, draw: Point(measured[lr, draw]), grid)
    assert choice.lr == 3e-3 and not choice.at_edge
    drawn_again = {lr for lr, draw in order if draw == 2}  # 9e-3 first; then 3e-3, best by mean, whose draws agree
    assert drawn_again == {3e-3, 9e-3}  # so that 9e-4, 0.73 nats worse, is beyond their noise
    assert choice.losses[9e-3] == pytest.approx((4.946 + 5.562) / 2)
    assert "4.9460 / 5.5620 (mean 5.2540)" in choice.describe()


def test_a_neighbour_within_the_noise_of_the_best_is_drawn_again_and_one_beyond_it_is_not():
    draws = {(1e-3, 1): 5.5, (3e-3, 1): 4.90, (1e-2, 1): 5.05, (3e-3, 2): 5.10, (1e-2, 2): 4.85, (3e-2, 1): 5.9}
    order, choice = _sweep(lambda lr, draw: Point(draws[lr, draw]), (1e-3, 3e-3, 1e-2))
    # 3e-3 stays best after its second draw (mean 5.00), whose draws disagree by 0.2: 1e-2, 0.05 above, is within
    # that noise, is drawn again and wins (mean 4.95); 1e-3, 0.5 above, and 3e-2, 0.95 above 1e-2, are not
    assert choice.lr == 1e-2 and {lr for lr, draw in order if draw == 2} == {3e-3, 1e-2}


def test_a_rate_whose_draw_spiked_is_never_chosen():
    spiked = "r's training loss spiked at step 11"
    grid = (1e-3, 3e-3, 1e-2)
    losses = {1e-3: 5.2, 3e-3: 4.9, 1e-2: 5.3, rate(1e-3 / 3): 5.6}
    point_at = lambda lr, draw: Point(losses[lr], spiked if (lr, draw) == (3e-3, 2) else None)  # noqa: E731
    order, choice = _sweep(point_at, grid)
    assert choice.lr == 1e-3  # the better mean, 3e-3, is not stable: the next best is chosen, its neighbours drawn
    assert (rate(1e-3 / 3), 1) in order and choice.losses[3e-3] is None and "unstable: " + spiked in choice.describe()


def test_choose_waits_for_the_grid():
    assert choose(Sweep(GRID), {1e-3: {1: Point(5.0)}}).next == 3e-3
    assert choose(Sweep(GRID), {1e-3: {1: Point(5.0)}}).lr is None


def test_a_sweep_point_is_named_and_parsed_with_its_draw():
    run = Run("r", "transformer_124m", Budget(1, 1, 8), data={"seed": 10}, sweep=Sweep(GRID))
    second = sweep_point(run, 3e-3, 2)
    assert second.name == "r_sweep_lr0.003_draw2" and second.seed == run.seed - 2 and second.data["seed"] == 8
    assert sweep_point(run, 3e-3).name == "r_sweep_lr0.003" and sweep_point(run, 3e-3).seed == run.seed - 1
    assert parse_sweep("r_sweep_lr0.003_draw2") == ("r", 0.003, 2) and parse_sweep("r_sweep_lr0.003") == ("r", 0.003, 1)
    assert parse_sweep("r_sweep_lr0.003_draw1") is None and parse_sweep("r_sweep_lrx_draw2") is None
    assert parse_sweep("r_seed2") is None


def test_every_name_the_harness_gives_a_run_parses_back_to_what_made_it():
    """One grammar (`harness.names`): a repeat at seed k, a sweep point and its draws, claim seeds below a sweep's
    choice and their repeats each parse back to the run, rate and seed they were made from; nothing else does."""
    run = Run("r_seed", "transformer_124m", Budget(1, 1, 8), sweep=Sweep(GRID))  # a name that ends like a suffix
    assert parse_seed(seed_name(run.name, 3)) == ("r_seed", 3) and parse_seed(run.name) == ("r_seed", 1)
    assert parse_seed("r_seed1") == ("r_seed1", 1) and parse_seed("r_seedx") == ("r_seedx", 1)
    point = sweep_point(run, 1e-2 / 3, 2)
    assert parse_sweep(point.name) == ("r_seed", rate(1e-2 / 3), 2) and parse_stable(point.name) is None
    stable = stable_run(run, 3e-3)
    assert parse_stable(stable.name) == ("r_seed", 0.003, 1) and parse_sweep(stable.name) is None
    assert parse_stable(seed_name(stable.name, 2)) == ("r_seed", 0.003, 2)
    assert parse_stable("r_stable_lr0.003_seed1") is None and parse_stable("r_stable_lrfast") is None


TINY = {"n_layer": 1, "d_model": 32, "n_head": 4, "max_seq_len": 64, "vocab_size": 512}


def test_claims_seeds_train_at_the_chosen_rate_and_the_sweep_on_a_seed_of_its_own(tmp_path):
    budget = Budget(steps=3, batch_size=2, seq_len=32, val_windows=2)
    anchor = Run(
        "small",
        "transformer_124m",
        budget,
        TINY,
        corpus="embedded_news",
        tokenizer="bytes",
        sweep=Sweep((1e-3, 1e-2, 1e-1)),
    )
    carried = Sweep((1e-3, 1e-2, 1e-1), anchor="small", rule="same lr", check=True)
    large = Run(
        "large",
        "transformer_124m",
        budget,
        {**TINY, "d_model": 48},
        corpus="embedded_news",
        tokenizer="bytes",
        sweep=carried,
    )
    experiment = Experiment("sweep_test", "tuned arms", lambda scale: [anchor, large], lambda scale, results: [])
    main(experiment, ["--scale", "cpu", "--pilot", "--seeds", "2", "--out-dir", str(tmp_path)])
    results = FinishedRuns(experiment, CPU, tmp_path / "runs").results()
    chosen = results["small"]["tuning"].lr
    assert chosen is not None and not results["small"]["tuning"].at_edge
    tried = sorted(results["small"]["tuning"].losses)
    assert tried[0] < chosen < tried[-1]
    assert len(results["small"]["tuning"].draws_at(chosen)) == 2  # the chosen rate was drawn twice
    for name, seeds in (("small", (anchor.seed, anchor.seed + 1)), ("large", (large.seed, large.seed + 1))):
        for k, seed in enumerate(seeds, 1):
            out = run_dir(experiment, CPU, anchor, tmp_path / "runs").parent / (name if k == 1 else f"{name}_seed{k}")
            config = yaml.safe_load((out / "config.yaml").read_text())
            assert config["budget"]["lr"] == chosen and config["run"]["seed"] == seed
    for lr in tried:
        for draw in (1, 2) if lr == chosen else (1,):
            out = run_dir(experiment, CPU, sweep_point(anchor, lr, draw), tmp_path / "runs")
            assert yaml.safe_load((out / "config.yaml").read_text())["run"]["seed"] == anchor.seed - draw  # no claim's
    checks = sorted(results["large"]["tuning"].losses)  # the carried rate and its two neighbours, at the large size
    assert checks == pytest.approx([chosen / 10, chosen, chosen * 10])
    losses = results["large"]["tuning"].losses  # the report says whether the carried rate is still the best there
    best = min(losses[lr] if losses[lr] is not None else math.inf for lr in losses)
    stands = losses[rate(chosen)] is not None and losses[rate(chosen)] - best < ONE_SEED_Z * LOSS_NOISE_FLOOR * 2**0.5
    assert results["large"]["tuning"].carried_best == stands
    assert ("the carried lr is within one draw's noise" in results["large"]["tuning"].describe()) == stands
    unchecked = Choice(chosen, None, {})  # a size that carries the rate without a check says so, not "interior"
    assert unchecked.describe() == "carried over, not trained at other rates at this size"
    assert json.loads((run_dir(experiment, CPU, large, tmp_path / "runs") / "done.json").read_text())["steps"] == 3


def test_no_claim_is_decided_on_an_arm_whose_sweep_ended_at_an_edge():
    from scaling_axes.harness.claims.verdicts import judge
    from scaling_axes.harness.experiment.table import held_untuned

    claim = judge("t", "a_vs_b", "a beats b", CPU, [0.3, 0.25, 0.28], runs=("a", "b"))
    results = {"a": {"tuning": Choice(0.1, None, {0.1: {1: Point(3.0)}}, at_edge=True)}, "b": {}}
    held = held_untuned(claim, results)
    assert held.status == "insufficient" and "a's sweep ended at 0.1, an edge" in held.note


def test_every_rmt_model_below_paper_scale_is_swept_with_the_codes_decay_per_step():
    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.scales import PAPER
    from scaling_axes.harness.sweeps import tuned
    from scaling_axes.harness.training.tasks import task_of

    rmt = [e for e in all_experiments() if e.name.startswith("rmt_") and e.runs(CPU) and not e.on_request]
    assert len(rmt) == 5
    for experiment in rmt:
        for run in experiment.runs(CPU):
            assert run.sweep is not None and run.sweep.grid[0] < run.budget.lr < run.sweep.grid[-1], run.name
            assert tuned(run, 0.02).lm["decay_per_step"] == sweep_point(run, 0.02).lm["decay_per_step"] == 1e-4
            assert "weight_decay" not in run.lm
        assert all(run.sweep is None for run in experiment.runs(PAPER))  # the paper's rates
    point = sweep_point(rmt[0].runs(CPU)[0], 0.02)
    optimizer = task_of(point).module(point, None, False).configure_optimizers()["optimizer"]
    decayed = [g for g in optimizer.param_groups if g["weight_decay"] > 0]
    assert decayed and all(g["initial_lr"] * g["weight_decay"] == pytest.approx(1e-4) for g in decayed)  # a step


def test_each_family_of_the_growth_figures_is_swept_on_its_own_grid():
    """Figs. 3, 6, 7 at cpu: a chain carries the grid of the family it started in (Tokenformer and Transformer
    grids are centred apart; each in the stable region's spacing), and nothing else is swept."""
    from scaling_axes.experiments import all_experiments
    from scaling_axes.experiments.tokenformer.recipes import progressive_at

    recipe = progressive_at(CPU)
    grids = {family: recipe.sweep_region.applied(Sweep(grid)).grid for family, grid in recipe.lr_grids.items()}
    names = {
        "tokenformer_fig3_progressive_scaling",
        "tokenformer_fig6_enwik8_continual",
        "tokenformer_fig7_net2net_scaling",
    }
    assert grids["tokenformer"] != grids["transformer"]
    for experiment in (e for e in all_experiments() if e.name in names):
        by_name = {run.name: run for run in experiment.runs(CPU)}
        for run in (run for run in by_name.values() if run.sweep):
            family = by_name[run.sweep.anchor or run.name].model.split("_")[0]
            assert run.sweep.grid == grids[family], (experiment.name, run.name)


def test_a_sweep_of_fixed_per_group_rates_scales_them_all():
    """MoT below paper scale: the speedrun's rates times the swept factor, every group, budget.lr untouched."""
    from scaling_axes.experiments.mot import results_tables
    from scaling_axes.harness.scales import PAPER
    from scaling_axes.harness.training.tasks import task_of
    from scaling_axes.modules.tasks.optim import speedrun_lrs

    run = results_tables.runs(CPU)[0]
    assert run.sweep.rate_option == "group_lr_scale" and all(r.sweep is None for r in results_tables.runs(PAPER))
    point = sweep_point(run, 3.0)
    assert point.lm["group_lr_scale"] == 3.0 and point.budget.lr == run.budget.lr
    module = task_of(point).module(point, None, False)
    optimizer = module._muon(100)
    expected = sorted({3.0 * lr for lr in speedrun_lrs(module.model.config.d_model).values()})
    assert sorted({group["lr"] for group in optimizer.param_groups}) == pytest.approx(expected)


def test_a_grown_stage_trains_at_its_chain_heads_chosen_rate_from_its_tuned_weights(tmp_path):
    budget = Budget(steps=3, batch_size=2, seq_len=32, val_windows=2)
    head = Run(
        "head",
        "transformer_124m",
        budget,
        TINY,
        corpus="embedded_news",
        tokenizer="bytes",
        sweep=Sweep((1e-3, 1e-2, 1e-1)),
    )
    carried = Sweep((1e-3, 1e-2, 1e-1), anchor="head", rule="one lr")
    stage = Run(
        "stage",
        "transformer_124m",
        budget,
        {**TINY, "d_model": 48},
        corpus="embedded_news",
        tokenizer="bytes",
        grow_from="head",
        sweep=carried,
    )
    experiment = Experiment("chain_test", "a swept chain", lambda scale: [head, stage], lambda scale, results: [])
    main(experiment, ["--scale", "cpu", "--pilot", "--seeds", "1", "--out-dir", str(tmp_path), "--run-name", "stage"])
    results = FinishedRuns(experiment, CPU, tmp_path / "runs").results()
    chosen = results["head"]["tuning"].lr
    out = run_dir(experiment, CPU, stage, tmp_path / "runs")
    assert yaml.safe_load((out / "config.yaml").read_text())["budget"]["lr"] == chosen
    assert results["stage"]["tuning"].lr == chosen and results["stage"]["steps"] == 3
    lr_of = lambda name: yaml.safe_load((out.parent / name / "config.yaml").read_text())["budget"]["lr"]  # noqa: E731
    assert lr_of("head") == chosen  # the head trained at its chosen rate, and the stage grew from it
    trained = lambda: sorted(path.name for path in out.parent.glob("[!.]*"))  # noqa: E731 (not the lock files)
    swept = trained()
    main(experiment, ["--scale", "cpu", "--pilot", "--seeds", "2", "--out-dir", str(tmp_path)])
    assert lr_of("head_seed2") == lr_of("stage_seed2") == chosen  # seed 2's chain at seed 1's choice, not re-swept
    assert trained() == sorted([*swept, "head_seed2", "stage_seed2"])


def test_a_family_is_swept_at_its_largest_size_and_the_rule_checked_at_another():
    """RMT Fig. 2: one sweep per family at its largest size, carried by the paper's rule (muP for the Transformers,
    whose proxy is then the smallest width; one lr for the RMTs), checked at the smallest; Fig. 6 likewise over D_k."""
    from scaling_axes.experiments.rmt import fig2_scaling_laws, fig6_residual_scaling, setup

    runs = {run.name: run for run in fig2_scaling_laws.runs(CPU)}
    for sizes in (setup.TRANSFORMERS, setup.RMTS):
        assert runs[sizes[-1]].sweep.anchor is None
        assert all(runs[size].sweep.anchor == sizes[-1] and runs[size].sweep.rule for size in sizes[:-1])
        assert [size for size in sizes if runs[size].sweep.check] == [sizes[0]]
    smallest = runs[setup.TRANSFORMERS[0]].config.d_model
    assert {runs[size].config.mup_base_width for size in setup.TRANSFORMERS} == {smallest}
    residual = {run.name: run.sweep for run in fig6_residual_scaling.runs(CPU)}
    checked = [name for name, sweep in residual.items() if sweep.check]
    assert checked == [fig6_residual_scaling.GPT2_SMALL] and residual[fig6_residual_scaling.WIDEST].anchor is None
    assert residual[fig6_residual_scaling.EQUAL_RESIDUAL].anchor is None  # the Transformer: its own sweep


def test_a_carried_rate_is_refuted_only_by_a_neighbour_better_beyond_one_draws_noise():
    """RMT Fig. 6's check at D_k 12 (the call at 5fc01ea): the carried 0.01 drew 4.7742, its neighbour 0.033 4.7726.
    A 0.0016-nat gap between single draws refutes nothing; a neighbour 0.1 nats better, or a carried rate that
    spiked, does."""
    sweep = Sweep((3e-3, 1e-2, 3e-2), anchor="dk64", rule="one lr", check=True)
    anchor = Choice(1e-2, None, {})
    below, carried, above = neighbours(sweep, 1e-2)
    drawn = lambda *points: {lr: {1: point} for lr, point in zip((below, carried, above), points, strict=True)}  # noqa: E731
    assert checked(sweep, anchor, drawn(Point(4.9278), Point(4.7742), Point(4.7726))).carried_best is True
    assert checked(sweep, anchor, drawn(Point(4.9278), Point(4.7742), Point(4.6742))).carried_best is False
    spiked = drawn(Point(4.9278), Point(4.77, "spiked"), Point(4.78))
    assert checked(sweep, anchor, spiked).carried_best is False


def test_a_transfer_refuted_at_its_checked_size_leaves_every_carried_size_untuned():
    from scaling_axes.harness.claims.verdicts import judge
    from scaling_axes.harness.experiment.finished import with_refuted_transfers
    from scaling_axes.harness.experiment.table import held_untuned

    one_draw = lambda losses: {lr: {1: Point(loss)} for lr, loss in losses.items()}  # noqa: E731
    carried = {"tuning": Choice(0.01, None, {}), "tuning_anchor": "large"}
    results = {
        "large": {"tuning": Choice(0.01, None, one_draw({0.001: 4.1, 0.01: 4.0, 0.1: 4.3}))},
        "small": {
            **carried,
            "tuning": Choice(0.01, None, one_draw({0.001: 3.9, 0.01: 4.0, 0.1: 4.2}), carried_best=False),
        },
        "middle": carried,
        "other": {},
    }
    claim = judge("t", "middle_vs_other", "middle beats other", CPU, [0.3, 0.25, 0.28], runs=("middle", "other"))
    assert held_untuned(claim, results) == claim  # not yet propagated
    held = held_untuned(claim, with_refuted_transfers(results))
    assert held.status == "insufficient" and "carried from large, and at small" in held.note
    results["small"]["tuning"] = Choice(0.01, None, one_draw({0.001: 4.1, 0.01: 4.0, 0.1: 4.2}), carried_best=True)
    assert held_untuned(claim, with_refuted_transfers(results)) == claim


def test_a_stage_carries_its_heads_rate_times_its_scale_and_its_seeds_carry_the_stages():
    """Figs. 3, 6, 7 at cpu: a grown stage of either family trains at a third of its chain head's chosen rate (at
    the head's rate the Tokenformers' restarts bumped past the spike threshold, and a Transformer's seed spiked);
    a seed-k repeat of a stage carries the stage's rate, not a third of it again."""
    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.experiment.tuning import checked
    from scaling_axes.harness.runs import seed_run

    head = Choice(9e-2, None, {9e-2: {1: Point(4.6)}})
    stage = Sweep((3e-2, 9e-2, 2.7e-1), anchor="head", rule="one lr", scale=1 / 3)
    assert checked(stage, head, {}).lr == rate(3e-2)
    run = Run("stage", "tokenformer_354m", Budget(1, 1, 8), sweep=stage)
    assert seed_run(run, 2).sweep.scale == 1.0 and seed_run(run, 2).sweep.anchor == "stage"
    fig7 = next(e for e in all_experiments() if e.name == "tokenformer_fig7_net2net_scaling")
    scales = {run.model.split("_")[0]: run.sweep.scale for run in fig7.runs(CPU) if run.grow_from and run.sweep}
    assert scales == {"tokenformer": pytest.approx(1 / 3), "transformer": pytest.approx(1 / 3)}


def test_claim_seeds_that_spike_at_the_chosen_rate_fall_back_to_the_best_stable_rate_below():
    """Table 10's Transformer at cpu (measured, 53eecb0): its sweep chose 1e-2 on two stable draws (4.892, 4.947)
    over 3e-3 (5.150) and 3e-2 (spiked); its claim seeds 1 and 3 spiked at 1e-2. The best stable rate below, 3e-3, is
    the lowest tried: one grid step below it is trained first, as a sweep extends past an edge."""
    sweep, spiked = Sweep((3e-3, 1e-2, 3e-2)), "spiked at step 18"
    points = {3e-3: {1: Point(5.1502)}, 1e-2: {1: Point(4.8923), 2: Point(4.9469)}, 3e-2: {1: Point(5.8195, spiked)}}
    below = rate(3e-3 / sweep.step)  # 9e-4
    assert fallback(sweep, points, [1e-2]) == Choice(None, below, points)
    points[below] = {1: Point(5.61)}
    assert fallback(sweep, points, [1e-2]) == Choice(3e-3, None, points)  # interior now: settled
    assert fallback(sweep, points, [1e-2, 3e-3]) == Choice(None, rate(below / sweep.step), points)  # spiked there too
    lowest = rate(sweep.grid[0] / sweep.step**MAX_EXTENSIONS)
    points = {lr: {1: Point(5.0, spiked)} for lr in (lowest, rate(below / sweep.step), below, 3e-3)}
    assert fallback(sweep, points, [1e-2]) == Choice(None, None, points)  # no stable rate within the extensions
    points[lowest] = {1: Point(5.5)}
    assert fallback(sweep, points, [1e-2]) == Choice(lowest, None, points, at_edge=True)


def _spiking_arm(tmp_path, other_loss: float = 2.82):
    """An experiment whose claim "a beats b" compares swept arm `a` (the measured shape of Table 10's Transformer at
    cpu, 3 nats lower so that it learns: claim seeds 1 and 3 spike at the sweep's choice 1e-2) with `b` (at
    `other_loss` + 0.01 k at seed k), and a `train` that writes each run's done.json as it would finish."""
    from scaling_axes.harness.claims.verdicts import lower_loss
    from scaling_axes.harness.training.rundir import write_done
    from scaling_axes.io import atomic_torch_save

    run = Run(
        "a",
        "transformer_124m",
        Budget(3, 2, 32),
        TINY,
        corpus="embedded_news",
        tokenizer="bytes",
        sweep=Sweep((3e-3, 1e-2, 3e-2)),
    )
    other = Run("b", "transformer_124m", Budget(3, 2, 32, lr=3e-2), TINY, corpus="embedded_news", tokenizer="bytes")
    claims = lambda scale, results: [lower_loss("t", "a beats b", scale, "a", "b", results)]  # noqa: E731
    experiment = Experiment("fallback_test", "claim seeds that spike", lambda scale: [run, other], claims)
    losses, trained = {9e-4: 2.61, 3e-3: 2.15, 1e-2: 1.92, 3e-2: other_loss}, []

    def train(point: Run) -> None:
        out = run_dir(experiment, CPU, point, tmp_path / "runs")
        k = point.seed - (run if point.name.startswith("a") else other).seed + 1
        if (out / "done.json").exists():
            return
        lr = point.budget.lr
        spike = {"nats": 2.67 if k in (1, 3) and lr == 1e-2 else 0.3, "step": 30, "loss": 9.48}
        out.mkdir(parents=True)
        atomic_torch_save({}, out / "final.pt", checksum=True)
        write_done(out, {"run": point.name, "steps": 3, "val_loss": losses[lr] + 0.01 * k, "train_loss_spike": spike})
        trained.append(point.name)

    return experiment, run, other, train, trained


def test_a_swept_arms_claim_seeds_retrain_below_its_choice_under_names_of_their_own(tmp_path):
    from scaling_axes.harness.claims.margins import seeds_of
    from scaling_axes.harness.experiment.arms import tuning_rows
    from scaling_axes.harness.runs import find_run, seed_run
    from scaling_axes.harness.stability import unstable_seeds

    experiment, run, other, train, trained = _spiking_arm(tmp_path)
    finished = FinishedRuns(experiment, CPU, tmp_path / "runs")
    settled = finished.settled_rate(run, 3, train)
    stable = ["a_stable_lr0.003", "a_stable_lr0.003_seed2", "a_stable_lr0.003_seed3"]
    assert trained[-5:] == ["a_seed3", "a_sweep_lr0.0009", *stable] and settled.lr == 3e-3
    again = finished.settled_rate(run, 3, train)  # on disk: nothing trained twice
    assert (again.run, again.lr, again.seeds) == (settled.run, settled.lr, settled.seeds) and len(trained) == 11
    for k, name in enumerate(stable, 1):
        assert (
            find_run(experiment, CPU, name) == seed_run(settled.run, k)
            and find_run(experiment, CPU, name).seed == run.seed + k - 1
        )
    for k in (1, 2, 3):
        train(seed_run(other, k))
    results = FinishedRuns(experiment, CPU, tmp_path / "runs").results()
    assert results["a"]["run"] == "a_stable_lr0.003" and sorted(results["a"]["seed_runs"]) == [2, 3]
    assert sorted(results["a"]["stable_fallback"]["unstable_at"]) == [1e-2]
    assert len(results["a"]["stable_fallback"]["unstable_at"][1e-2]) == 2  # seeds 1 and 3
    assert not any(unstable_seeds(seeds_of(results["a"])).values())  # decided on the stable seeds, not the spiked ones
    rows = {row.metric: row for row in tuning_rows(results) if row.row == "a"}
    assert rows["chosen_lr"].ours == 1e-2 and rows["stable_fallback_lr"].ours == 3e-3
    assert "the sweep's mean at 0.003 over 1 draws 2.1500" in rows["claim_seeds_minus_sweep"].note


def test_under_a_plan_that_keeps_every_seed_claim_seeds_stay_at_the_sweeps_choice(tmp_path):
    """Issue 83: a plan with `stability_veto: false` trains its claim seeds at the sweep's choice however they
    spiked (the spike reported, the rate not moved); a plan that vetoes (issue 73's), or none, falls back."""
    import dataclasses

    from scaling_axes.harness.claims.plan import DecisionRules
    from scaling_axes.harness.experiment.finished import fallback_for
    from tests.test_controls import _plan

    experiment, run, _, train, trained = _spiking_arm(tmp_path)
    keeps = dataclasses.replace(_plan(), rules=DecisionRules(stability_veto=False))
    assert fallback_for(None) and fallback_for(_plan()) and not fallback_for(keeps)
    finished = FinishedRuns(experiment, CPU, tmp_path / "runs", fall_back=fallback_for(keeps))
    settled = finished.settled_rate(run, 3, train)
    assert settled.lr == 1e-2 and settled.run.name == "a" and not settled.unstable_at
    assert not any("stable" in name for name in trained) and sorted(settled.seeds) == [1, 2, 3]
    results = FinishedRuns(experiment, CPU, tmp_path / "runs", fall_back=False).results()
    assert results["a"]["run"] == "a" and "stable_fallback" not in results["a"]


STABLE_GRID = (1e-3, 2e-3, 4e-3, 8e-3)


def _stable_region(point_at) -> tuple[list[tuple[float, int]], Choice]:
    """Tune a stable-margin sweep on STABLE_GRID; the (rate, draw) trained in the order trained."""
    trained: dict[float, dict[int, Point]] = {}
    order: list[tuple[float, int]] = []
    run = Run("r", "transformer_124m", Budget(1, 1, 8), sweep=Sweep(STABLE_GRID, draws=2, stable_margin=True))

    def train(point: Run) -> None:
        draw = run.seed - point.seed
        order.append((point.budget.lr, draw))
        trained.setdefault(point.budget.lr, {})[draw] = point_at(point.budget.lr, draw)

    return order, tune(run, lambda r: {lr: dict(d) for lr, d in trained.items()}, lambda name: None, train)


def _losses(table: dict[float, float], unstable: tuple[tuple[float, int], ...] = ()):
    return lambda lr, draw: Point(table.get(lr, 5.5), "a spike" if (lr, draw) in unstable else None)


def test_the_stable_region_rule_draws_every_rate_twice_and_takes_the_best_below_a_stable_rate():
    losses = {1e-3: 5.0, 2e-3: 4.8, 4e-3: 4.7, 8e-3: 4.75}
    order, choice = _stable_region(_losses(losses))
    assert order == [(lr, 1) for lr in STABLE_GRID] + [(lr, 2) for lr in STABLE_GRID]
    assert choice.lr == 4e-3 and not choice.at_edge
    assert planned_points(Sweep(STABLE_GRID, stable_margin=True)) == tuple(order)


def test_the_stable_region_rule_refuses_a_rate_whose_next_higher_spiked_on_one_draw():
    _, choice = _stable_region(_losses({1e-3: 5.0, 2e-3: 4.8, 4e-3: 4.7, 8e-3: 4.75}, unstable=((8e-3, 2),)))
    assert choice.lr == 2e-3  # 4e-3 is the best stable rate, but a rate above it spiked: one step down
    _, choice = _stable_region(_losses({1e-3: 5.0, 2e-3: 4.8, 4e-3: 4.7, 8e-3: 4.9}, unstable=((4e-3, 1),)))
    assert choice.lr == 1e-3 and not choice.at_edge  # 2e-3's next higher spiked; 5e-4 tried below, worse


def test_the_stable_region_ends_at_the_lowest_rate_that_trained_unstably():
    """Issue 83's pilot: the muP Transformer spiked at 0.006 on one draw and ended 0.4 nats worse at 0.012 and 0.024
    with no spike flagged; the rule chose 0.012, whose next higher rate was stable. A rate above an unstable one is
    outside the stable region: the rule steps below it."""
    losses = {rate(2.5e-4): 5.4, rate(5e-4): 5.1, 1e-3: 4.9, 2e-3: 4.6, 4e-3: 4.7, 8e-3: 5.1}
    order, choice = _stable_region(_losses(losses, unstable=((2e-3, 2),)))
    assert choice.lr == rate(5e-4) and not choice.at_edge  # below the spike at 2e-3 (never 4e-3), a stable rate above
    assert [lr for lr, draw in order if draw == 1][-2:] == [rate(5e-4), rate(2.5e-4)]  # the region's foot found
    _, choice = _stable_region(_losses(losses, unstable=((8e-3, 1),)))
    assert choice.lr == 2e-3  # the region is 1e-3 to 4e-3; 4e-3's next higher is outside it


def test_a_spike_the_same_data_order_shows_at_another_rate_is_the_datas_not_the_rates():
    """Issue 83's pilot: a sweep's second draws all peaked at step 1348 (one hard batch of that data order), and the
    one at 0.012 crossed SPIKE_NATS; a spike at a step no other rate of its draw shares stays an instability."""
    from scaling_axes.harness.experiment.finished import as_points, data_spikes

    def done(lr: float, nats: float, step: int) -> dict:
        return {"run": f"p{lr}", "val_loss": 4.0 + lr, "train_loss_spike": {"nats": nats, "step": step, "loss": 9.0}}

    finished = {(1e-2, 2): done(1e-2, 0.82, 1348), (2e-2, 2): done(2e-2, 0.7, 1349), (4e-2, 2): done(4e-2, 3.6, 79)}
    finished |= {(1e-2, 1): done(1e-2, 0.6, 1348)}  # another data order: no witness for draw 2
    assert data_spikes(finished) == {(2e-2, 2)}  # witnessed by 1e-2 below it
    finished |= {(5e-3, 2): done(5e-3, 0.6, 1347)}  # a lower rate of the same order peaks there too
    assert data_spikes(finished) == {(1e-2, 2), (2e-2, 2)}
    points = as_points(finished)
    assert points[1e-2][2].eligible and not points[4e-2][2].eligible and "step 79" in points[4e-2][2].unstable
    risen = {**finished[(1e-2, 2)], "val_loss_curve": [[100, 4.0], [200, 4.5]]}
    assert not as_points({**finished, (1e-2, 2): risen})[1e-2][2].eligible  # a validation rise still counts


def test_the_stable_region_rule_steps_up_past_a_best_top_rate_and_down_past_a_lowest_one():
    order, choice = _stable_region(lambda lr, draw: Point(5.0 - 10 * min(lr, 1.6e-2)))
    assert [lr for lr, draw in order if draw == 1][-3:] == [8e-3, rate(1.6e-2), rate(3.2e-2)]  # the top best: up
    assert choice.lr == rate(1.6e-2) and not choice.at_edge
    order, choice = _stable_region(lambda lr, draw: Point(5.0 + lr, None if lr < 1e-3 else "a spike"))
    assert {lr for lr, _ in order} >= {rate(5e-4), rate(2.5e-4)}  # nothing stable above: downwards
    assert choice.at_edge


def test_the_judged_comparisons_sweep_inside_the_stable_region_at_cpu():
    """Issue 83: at cpu the comparisons' arms sweep grids of ratio 2 from their declared lowest rate past their
    highest, every rate at two draws, choosing with the stable margin (so do the RMT recipe's other experiments)."""
    from scaling_axes.experiments import all_experiments

    compared = [e for e in all_experiments() if e.comparisons is not None]
    for run in (run for experiment in compared for run in experiment.runs(CPU) if run.sweep is not None):
        sweep = run.sweep
        assert sweep.stable_margin and sweep.draws == 2, run.name
        assert all(b / a == pytest.approx(2, rel=1e-5) for a, b in itertools.pairwise(sweep.grid)), run.name
    assert STABLE_REGION.applied(Sweep((3e-3, 1e-2, 3e-2))).grid == (3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2)


def test_each_sweep_point_is_committed_per_draw_and_drawn(tmp_path):
    """Issue 83: the loss-vs-rate points of each arm's sweep, per draw, go into the per-seed file (read back by the
    judge's reader, a diverged point flagged without a loss) and into `<experiment>_sweeps.png`, byte-stable."""
    from scaling_axes.harness.claims.observed import SEED_COLUMNS, read_experiment
    from scaling_axes.harness.experiment.seeds import sweep_rows
    from scaling_axes.harness.experiment.sweep_figure import sweep_figure
    from scaling_axes.harness.results import COLUMNS
    from scaling_axes.io import write_csv

    points = {
        1e-3: {1: Point(4.2), 2: Point(4.3)},
        2e-3: {1: Point(4.0), 2: Point(4.1, "spiked")},
        4e-3: {1: Point(None)},
    }
    done = {"tuning": Choice(1e-3, None, points)}
    rows = sweep_rows("a", done)
    assert [(r["metric"], r["seed"], r["value"], r["flag"]) for r in rows] == [
        ("0.001", 1, "4.2", ""),
        ("0.001", 2, "4.3", ""),
        ("0.002", 1, "4", ""),
        ("0.002", 2, "4.1", "unstable"),
        ("0.004", 1, "", "diverged"),
    ]
    write_csv(tmp_path / "e.csv", COLUMNS, [])
    write_csv(tmp_path / "seeds" / "e.csv", SEED_COLUMNS, rows, checksum=True)
    assert read_experiment(tmp_path, "e").sweeps["a"][-1] == (0.004, 1, None, "diverged")
    results = {"a": done, "b": {"tuning": Choice(2e-3, None, points), "tuning_anchor": "a"}}  # carried: not drawn
    assert sweep_figure(results, tmp_path / "one.png", "t") and sweep_figure(results, tmp_path / "two.png", "t")
    assert (tmp_path / "one.png").read_bytes() == (tmp_path / "two.png").read_bytes()
    assert not sweep_figure({"b": results["b"]}, tmp_path / "none.png", "t") and not (tmp_path / "none.png").exists()
