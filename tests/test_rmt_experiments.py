"""The RMT paper's formulas, errata and moment propagation, and the plans of its training experiments."""

import pytest

from scaling_axes.experiments.rmt import fig1_resource_scaling as fig1
from scaling_axes.experiments.rmt import fig2_scaling_laws as fig2
from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.experiments.rmt import table1_2_moment_propagation as moments
from scaling_axes.experiments.rmt import table3_4_resources as table34
from scaling_axes.experiments.rmt import table7_formulas_and_table8_9_configs as table7
from scaling_axes.harness.scales import PAPER, SMOKE
from scaling_axes.harness.training.curves import smoothed
from scaling_axes.modules import get_config


@pytest.mark.parametrize(
    "model,tokens,expected",
    [
        ("transformer_rmt_405m", 6.04e9, 1.187e19),  # Table 4 prints 1.18e19
        ("rmt_305m", 6.04e9, 8.455e18),  # Table 4: 8.45e18
        ("rmt_305m", 3.55e9, 4.97e18),  # Table 3
    ],
)
def test_paper_compatible_formula_reproduces_the_reported_flops(model, tokens, expected):
    assert rmt_setup.train_flops(get_config(model), tokens, compatible=True) == pytest.approx(expected, rel=1e-3)


def test_printed_rmt_formula_with_its_v_dv_term_would_not():
    """With Table 7's printed 4 V D_v term the 305M RMT would cost about 1.21e19, not 8.45e18 (reference 5.4)."""
    c = get_config("rmt_305m")
    printed = rmt_setup.train_flops(c, 6.04e9, True) + 3 * c.rank * 4 * c.vocab_size * (c.d_value - 1) * 6.04e9
    assert printed == pytest.approx(1.21e19, rel=0.01)


def test_errata_rows_show_the_corrections():
    rows = {(r.row, r.metric): r for r in table7.report(SMOKE, {})}
    assert rows[("rmt_206m", "d_key")].paper == 896 and rows[("rmt_206m", "d_key")].ours == 48
    assert rows[("rmt_305m", "d_key")].ours == 64
    assert rows[("rmt_206m", "params_as_printed")].ours < 160e6  # D_k 896, D_v 48 cannot be 206M
    spread = rows[("rmt_residual_dk6_to_dk64", "flops_spread")].ours
    assert 0.02 < spread < 0.03  # the paper's "<1%" is about 2.6% by its own formula
    for name in table7.PRESETS:
        assert rows[(name, "params")].status == "match"  # within 2% of the size labels
        assert rows[(name, "params_table7_printed")].paper < rows[(name, "params")].ours  # V counted once


def test_key_flops_itemised_in_the_appendix_equal_the_count():
    """App. A.2 itemises 6 N R D_k D_v (1 + 2L) key FLOPs; our per-token count of every storage/retrieval agrees."""
    from scaling_axes.modules.flops import formula_flops

    c = get_config("rmt_305m")
    flops = formula_flops(c, 512)
    key_flops = flops["embedding"] + flops["qkv"] + flops["out"] + 2 * c.n_layer * 2 * c.d_key * c.d_value * c.rank
    key_flops += 2 * c.d_key * c.d_value * c.rank  # readout
    # the embedding here also stores positions (Eq. 19): the itemisation's 4 N R D_k D_v
    assert key_flops == 6 * c.rank * c.d_key * c.d_value * (1 + 2 * c.n_layer)


@pytest.mark.parametrize("name", list(moments.TABLE2))
def test_table2_pairs_measured_at_init_match_table1_closed_forms(name):
    """Each of Table 2's eight operations, measured on the real contraction at Xavier init, within 5%."""
    operation = moments.TABLE2[name]
    forward, backward = operation.closed_form()
    values = moments.measured(operation, draws=8, seed=1)
    assert values["forward"] == pytest.approx(forward, rel=moments.TOLERANCE)
    assert values["backward"] == pytest.approx(backward, rel=moments.TOLERANCE)


def test_table1_means_vanish_and_the_mean_squared_terms_count():
    """Table 1: zero-mean weights give zero-mean outputs and gradients, and a unit input mean adds mu^2 = 1 to the
    propagated variance (without that term the measured ratios would be twice the closed forms)."""
    rows = moments.table1_rows(draws=32)
    assert all(r.status == "match" for r in rows), [(r.row, r.metric, r.ours) for r in rows if r.status != "match"]


def test_table2_printed_values_and_their_errata():
    """As printed in our version: every ATTN row and the FF Transformer rows equal Table 1's closed forms (the earlier
    PDF's swapped ATTN rows are only a note); the RMT's FF rows print 1 / 1 against 0.4 / 1.6 and 1.6 / 0.4."""
    rows = {(r.row, r.metric): r for r in moments.table2_rows(moments.published("rmt"), draws=1)}
    ratios = ("forward_variance_ratio", "backward_variance_ratio")
    printed = {
        ("attn_storage_rmt", 0.4, 1.6),
        ("attn_retrieval_rmt", 1.14, 0.86),
        ("attn_storage_transformer", 1, 1),
        ("attn_retrieval_transformer", 0.5, 1.5),
        ("ff_storage_transformer", 1.6, 0.4),
        ("ff_retrieval_transformer", 0.4, 1.6),
    }
    for name, forward, backward in printed:
        assert (rows[(name, ratios[0])].paper, rows[(name, ratios[1])].paper) == (forward, backward)
        assert all(rows[(name, m)].status == "match" for m in ratios), name
    storage, retrieval = (tuple(rows[(f"ff_{op}_rmt", m)].ours for m in ratios) for op in ("storage", "retrieval"))
    assert storage == pytest.approx((0.4, 1.6)) and retrieval == pytest.approx((1.6, 0.4))  # printed: 1 / 1
    assert all(
        rows[(f"ff_{op}_rmt", m)].paper == 1 and rows[(f"ff_{op}_rmt", m)].status == "differs"
        for op in ("storage", "retrieval")
        for m in ratios
    )
    keys = moments.retrieval_keys_row(moments.published("rmt"))
    assert keys.paper == 0.86 and keys.ours == pytest.approx(2 * 16 / (64 + 48))  # Table 1's R, not 3R


def test_fig1_formulas_equal_counts_and_only_the_residual_grows():
    rows = {(r.row, r.metric): r for r in fig1.report(SMOKE, {}) if r.table == "fig1"}
    assert all(r.note == "formula = count" for r in rows.values())
    rmt = [rows[(f"rmt_residual{n}", "params")].ours for n in fig1.RESIDUALS]
    transformer = [rows[(f"transformer_residual{n}", "params")].ours for n in fig1.RESIDUALS]
    assert transformer[-1] == 4 * transformer[0]  # every Transformer parameter is linear in D alone
    c = get_config("rmt_305m")  # RMT: R (6L + 3) keys and 2L + 1 norms of D_v x D_k, each entry per D_k
    norms, affine = 2 * c.n_layer + 1, 1 + c.norm_bias
    assert rmt[-1] - rmt[0] == 48 * (c.rank * (6 * c.n_layer + 3) + norms * affine * c.d_value)


def test_section_3_1_claims_by_independent_arithmetic():
    """+100% params, ~94% FLOPs for the Transformer (Table 7 with V D; 92% with V alone), < 1% for the RMT."""
    n, v, layers, heads, width, ffn = 512, 50257, 24, 16, 1024, 4096

    def transformer(d, vocab):
        return 4 * n * (vocab(d) + layers * d * (2 * width + ffn) + layers * (n * width + 0.75 * n * heads))

    def grown(vocab):
        return 100 * (transformer(2048, vocab) / transformer(1024, vocab) - 1)

    rows = {r.metric.removesuffix("_increase"): r for r in fig1.claim_rows() if r.row.startswith("transformer")}
    assert rows["params"].ours == 100 and rows["params"].status == "match"
    assert rows["train_flops"].ours == pytest.approx(grown(lambda d: v * d)) == pytest.approx(94.08, abs=0.01)
    assert rows["train_flops_v_only"].ours == pytest.approx(grown(lambda d: v)) == pytest.approx(92.20, abs=0.01)
    assert rows["train_flops"].status == "match" and rows["train_flops_v_only"].status == "differs"
    assert "erratum" in rows["train_flops_v_only"].note
    rmt = [r for r in fig1.claim_rows() if r.row.startswith("rmt")]
    assert len(rmt) == 4 and all(0 < r.ours < 1 and r.status == "match" for r in rmt)


def _line(start, slope, steps=46_082, every=50):
    return [(s, start - slope * s) for s in range(every, steps + 1, every)]


def test_table3_locates_the_train_loss_threshold_between_logged_steps():
    """Linear train losses logged every 50 steps: the trailing mean of 10 points lags 225 steps, so the RMT's
    smoothed loss reaches the Transformer's smoothed minimum at an exactly known step."""
    transformer, rmt = table34.runs(PAPER)[:2]
    steps = rmt.budget.steps
    threshold = 6.0 - 6e-5 * (steps - steps % 50 - 225)  # the Transformer's smoothed minimum, at its last point
    crossing = (5.5 - threshold) / 1e-4 + 225
    results = {
        transformer.name: {
            "val_loss": 3.02,
            "params": 405e6,
            "train_seconds": 1.86e5,
            "steps": steps,
            "train_loss_curve": _line(6.0, 6e-5),
        },
        rmt.name: {
            "val_loss": 2.91,
            "params": 305e6,
            "train_seconds": 3.3e5,
            "steps": steps,
            "train_loss_curve": _line(5.5, 1e-4),
            "train_time_curve": [(s, 7.0 * s) for s, _ in _line(0, 0)],
        },
    }
    rows = {(r.row, r.metric): r for r in table34.report(PAPER, results) if r.table == "table3"}
    assert rows[("transformer_rmt_405m", "min_train_loss")].ours == pytest.approx(threshold)
    reached = "rmt_305m_to_transformer_best"
    assert rows[(reached, "tokens")].ours == pytest.approx(rmt.budget.tokens * crossing / steps)
    assert rows[(reached, "train_seconds")].ours == pytest.approx(7.0 * crossing)
    assert rows[(reached, "train_flops")].ours == pytest.approx(
        rmt_setup.train_flops(rmt.config, rmt.budget.tokens * crossing / steps, True)
    )
    assert rows[("percent_diff", "tokens")].ours == pytest.approx(100 * (crossing / steps - 1))
    assert rows[("transformer_rmt_405m", "tokens")].ours == transformer.budget.tokens == pytest.approx(6.04e9, rel=1e-4)


def test_curve_helpers():
    assert rmt_setup.first_crossing([(10, 4.0), (20, 3.0), (30, 2.0)], 2.5) == 25
    assert rmt_setup.first_crossing([(10, 2.0)], 2.5) == 10 and rmt_setup.first_crossing([(10, 4.0)], 3) is None
    assert smoothed([(1, 3.0), (2, 1.0), (3, 2.0)], window=2) == [(1, 3.0), (2, 2.0), (3, 1.5)]
    from scaling_axes.harness.training.curves import (
        training_clock,  # a resumed run's clock restarts; stitched, it keeps counting
    )

    assert training_clock([(10, 5.0), (20, 10.0), (30, 2.0), (40, 7.0)]) == [
        (10, 5.0),
        (20, 10.0),
        (30, 12.0),
        (40, 17.0),
    ]


def test_tables_3_4_percentages_and_errata_from_the_papers_own_values():
    rows = {(r.table, r.row, r.metric): r for r in table34.report(SMOKE, {})}
    time = rows[("table4", "percent_diff_paper_values", "train_seconds")]
    assert time.paper == 43 and time.ours == pytest.approx(100 * (3.30e5 / 1.86e5 - 1)) and time.status == "differs"
    assert "erratum" in time.note and 100 * (1 - 1.86 / 3.30) == pytest.approx(43, abs=1)
    for metric in ("params", "train_flops", "tokens", "train_seconds"):  # Table 3's column follows its values
        assert rows[("table3", "percent_diff_paper_values", metric)].status == "match"
    cited = rows[("sec4_2", "rmt_vs_transformer", "flop_efficiency_same_tokens_percent")]
    assert cited.ours == pytest.approx(100 * (1 - 8.45e18 / 1.18e19)) and "Table 4" in cited.note
    larger, fewer = (
        rows[("sec4_2", "transformer_vs_rmt", "params_larger_percent")],
        rows[("sec4_2", "rmt_vs_transformer", "non_embedding_params_percent")],
    )
    assert larger.status == fewer.status == "match"
    assert fewer.ours == pytest.approx(100 * ((2 * 24 * 16 * 64 * 4096 + 2 * 16 * 64 * 73) / (24 * 12 * 1024**2) - 1))


def test_scaling_plan_at_paper_scale(capsys):
    from scaling_axes.harness.experiment.command import main

    main(fig2.EXPERIMENT, ["--scale", "paper", "--dry-run"])
    plan = capsys.readouterr().out
    for steps in ("6,470", "51,880", "46,082", "4,333"):
        assert steps in plan
    run = {r.name: r for r in fig2.runs(PAPER)}["rmt_305m"]
    assert run.budget.warmup_steps == 46_082 // 20 and run.budget.min_lr_ratio == 0.1
    assert run.lm["z_loss"] == 1e-4 and run.lm["decay_per_step"] == 1e-4
    assert run.corpus == "openwebtext" and run.tokenizer == "gpt2" and run.budget.seq_len == 512


def test_downstream_hook_points_at_the_scaling_runs(tmp_path):
    from scaling_axes.experiments.rmt import setup as rmt_setup
    from scaling_axes.harness.runs import run_dir

    results = {
        "rmt_305m": {"run": "rmt_305m", "seed_runs": {2: {"run": "rmt_305m_stable_lr0.01_seed2"}}},
        "transformer_rmt_405m": {},
    }
    paths = rmt_setup.downstream_checkpoints(PAPER, results, tmp_path)
    for run in table34.runs(PAPER)[:2]:  # the pair downstream evaluates (the control is not)
        assert paths[run.name][1] == run_dir(table34.EXPERIMENT, PAPER, run, tmp_path) / "final.safetensors"
    assert paths["rmt_305m"][2].parent.name == "rmt_305m_stable_lr0.01_seed2"  # where that seed settled


def test_table10_reports_the_residual_stream_size_column():
    """768 for every Transformer-family row and D_k D_v = 2048 for the RMT (Table 10), from the paper-scale configs."""
    from scaling_axes.experiments.rmt import table10_variants as table10

    rows = [r for r in table10.report(PAPER, {}) if r.metric == "residual_size"]
    assert {r.row: (r.ours, r.paper, r.status) for r in rows} == {
        "transformer_rmt_160m": (768, 768, "match"),
        "rmt_134m": (2048, 2048, "match"),
        "highway_transformer_191m": (768, 768, "match"),
        "depthwise_lstm_233m": (768, 768, "match"),
        "hierarchical_aggregation_165m": (768, 768, "match"),
    }
    assert {r.status for r in table10.report(SMOKE, {}) if r.metric == "residual_size"} == {"analytic"}


def test_fig2_reads_the_305m_rmt_at_its_own_chinchilla_budget():
    runs = {r.name: r for r in fig2.runs(PAPER)}
    rmt = runs["rmt_305m"]
    tokens = 20 * (2 * 24 * 16 * 64 * 4096 + 2 * 16 * 64 * 73)  # 20 x App. A's non-embedding parameters
    assert fig2.read_tokens(rmt, PAPER) == tokens == pytest.approx(4.03e9, rel=1e-3)
    assert all(fig2.read_tokens(r, PAPER) == r.budget.tokens for n, r in runs.items() if n != "rmt_305m")
    done = {"val_loss": 2.91, "params": 305e6, "val_loss_curve": [(0, 4.0), (rmt.budget.steps, 2.0)]}
    point = fig2.point(rmt, done, PAPER)
    assert point["val_loss"] == pytest.approx(4.0 - 2.0 * tokens / rmt.budget.tokens)
    assert point["train_flops"] == pytest.approx(rmt.train_flops() * tokens / rmt.budget.tokens)
    row = next(r for r in fig2.report(PAPER, {"rmt_305m": done}) if r.run == "rmt_305m" and r.metric == "val_loss")
    assert row.paper is None and "read at" in row.note  # Table 4's 2.91 is at 6.04e9, not at this point


def test_section_4_4_savings_where_the_wide_residual_reaches_the_narrow_ones_loss():
    from scaling_axes.experiments.rmt import fig6_residual_scaling as fig6

    n, r, d_v, layers, v, d_ff = 512, 12, 64, 12, 50257, 3072
    shared = n * r * (4 * v + layers * (4 * n * d_v + 3 * n + 4 * d_v * d_ff))
    ratio = (6 * n * r * 64 * d_v * (1 + layers) + shared) / (6 * n * r * 12 * d_v * (1 + layers) + shared)
    rows = {r.metric: r for r in fig6.section_4_4_rows(PAPER, {})}
    implied = rows["flops_saving_implied_by_tokens_saving"]  # 23% follows from 25% at this per-token FLOP ratio
    assert implied.ours == pytest.approx(100 * (1 - 0.75 * ratio)) and implied.status == "match"
    assert rows["tokens_saving_percent"].status == "not_run"
    steps = 50_000
    results = {
        "rmt_residual_dk12": {"val_loss": 3.43},
        "rmt_residual_dk64": {"val_loss": 3.36, "val_loss_curve": [(0, 9.0), (30_000, 3.5), (45_000, 3.4)]},
    }
    rows = {r.metric: r for r in fig6.section_4_4_rows(PAPER, results)}
    crossing = 30_000 + 15_000 * (3.5 - 3.43) / 0.1  # linear between the two evaluations
    assert rows["tokens_saving_percent"].ours == pytest.approx(100 * (1 - crossing / steps))
    counted = {run.name: run.train_flops() for run in fig6.runs(PAPER)}  # the claim's own FLOP count, as its row's
    counted = counted["rmt_residual_dk64"] / counted["rmt_residual_dk12"]
    assert rows["flops_saving_percent"].ours == pytest.approx(100 * (1 - crossing / steps * counted))
    assert counted != pytest.approx(ratio, rel=1e-3) and rows["flops_saving_percent"].seeds == 1
    short = {**results, "rmt_residual_dk64": {"val_loss": 3.5, "val_loss_curve": [(0, 9.0), (45_000, 3.5)]}}
    rows = {r.metric: r for r in fig6.section_4_4_rows(PAPER, short)}  # never reached: no number, no -1
    assert rows["tokens_saving_percent"].ours is None and "never reaches" in rows["tokens_saving_percent"].note
    claims = [r for r in fig6.claim_rows(PAPER, short) if r.table == "sec4_4"]
    assert [(r.status, r.ours) for r in claims] == [("never_reached", pytest.approx(3.43 - 3.5))] * 2  # each resource


def test_fig6_equal_residual_claim_decides_nothing_where_the_residuals_differ():
    """Below paper scale D_k 12's residual (D_k x D_v) is not the shrunk Transformer's width: the claim stated at
    equal residual size is `unmatched`, whatever its margin; at paper scale both are 768 and it is judged."""
    from scaling_axes.experiments.rmt import fig6_residual_scaling as fig6
    from scaling_axes.harness.scales import CPU

    assert fig6.residual_mismatch(PAPER) is None
    why = fig6.residual_mismatch(CPU)
    assert "rmt_residual_dk12 144" in why and "transformer_rmt_160m 48" in why
    results = {
        name: {"val_loss": loss, "seed_runs": {k: {"val_loss": loss + 0.01 * k} for k in (2, 3)}}
        for name, loss in (("rmt_residual_dk12", 3.0), ("transformer_rmt_160m", 3.5))
    }
    (claim,) = [r for r in fig6.claim_rows(CPU, results) if r.row == "rmt_residual_dk12_vs_transformer_rmt_160m"]
    assert claim.status == "unmatched" and why in claim.note


def test_mup_values_are_app_c21s_and_two_lie_outside_its_search_range():
    rows = [r for r in table7.report(SMOKE, {}) if r.table == "appC_2_1"]
    values = [r for r in rows if not r.metric.endswith("_within_search_range")]
    assert len(values) == 8 and all(r.status == "match" for r in values)  # the presets carry the published values
    outside = [r for r in rows if r.metric.endswith("_within_search_range")]
    assert {r.metric for r in outside} == {
        "input_multiplier_within_search_range",
        "output_multiplier_within_search_range",
    }
    assert all(r.ours > r.paper == 1.0 and r.status == "differs" and "erratum" in r.note for r in outside)


def test_fig2_says_when_a_ladder_does_not_improve_with_size():
    """The committed cpu RMTs ended at 4.753, 4.605, 4.742, 4.650 by size: the row says where the ladder rises."""
    from scaling_axes.experiments.rmt import fig2_scaling_laws as fig2
    from scaling_axes.experiments.rmt import setup as rmt_setup

    losses = dict(zip(rmt_setup.RMTS, (4.753, 4.605, 4.742, 4.650), strict=True))
    losses |= dict(zip(rmt_setup.TRANSFORMERS, (5.0, 4.8, 4.7, 4.6), strict=True))
    rmt, transformer = (
        fig2.ladder_row(family, {n: {"val_loss": losses[n]} for n in family})
        for family in (rmt_setup.RMTS, rmt_setup.TRANSFORMERS)
    )
    assert rmt.ours == 0.0 and "does not improve at rmt_134m -> rmt_206m" in rmt.note and "rmt_46m" not in rmt.note
    assert transformer.ours == 1.0 and "does not improve" not in transformer.note


def test_table4s_matched_two_by_two_holds_the_parametrisation_equal_and_the_papers_pair_names_it():
    """Issue 83: the paper's protocol (a muP-tuned Transformer against an RMT at its defaults) beside the matched
    2 x 2: muP at each model's own width with every multiplier 1 (the RMT code's defaults, so `rmt_305m` itself), and
    App. C.4's standard init for both; every cell on the pair's tokens, swept on the same grid."""
    from scaling_axes.harness.experiment.comparisons import mismatches, parametrisation
    from scaling_axes.harness.scales import CPU

    runs = {r.name: r for r in table34.runs(CPU)}
    kinds = {name: parametrisation(run.config) for name, run in runs.items()}
    assert kinds["rmt_305m"] == kinds["transformer_rmt_405m_mup1"] == "muP at its own width (init 0.02)"
    assert kinds["rmt_305m_standard"] == kinds["transformer_rmt_405m_standard"] == "standard (lecun)"
    assert kinds["transformer_rmt_405m"].startswith("muP at base width 24 (init 0.15, multipliers 9.76/0.25/5.52)")
    compared = {c.name: c for c in table34.EXPERIMENT.comparisons(CPU)}
    assert [m for c in compared.values() for m in mismatches(c, runs)] == []
    assert compared["rmt_305m_vs_transformer_rmt_405m"].differs == ("parametrisation",)
    assert compared["rmt_305m_vs_transformer_rmt_405m_mup1"].differs == ()
    cells = [
        runs[n] for n in ("rmt_305m", "transformer_rmt_405m_mup1", "rmt_305m_standard", "transformer_rmt_405m_standard")
    ]
    assert len({(r.budget.tokens, r.sweep.grid) for r in cells}) == 1
    rows = {r.row for r in table34.report(CPU, {}) if r.metric == "claim"}
    assert {"rmt_305m_vs_transformer_rmt_405m_mup1", "rmt_305m_standard_vs_transformer_rmt_405m_standard"} <= rows
