"""What a registration fixes beyond its claims (issue 83): the thresholds the judge cuts at, as the code has them
when it is committed (a later change to the code stops the judging), and the analysis code's commit; REPORT.md says
both."""

import pytest

from scaling_axes.harness.claims.plan import PlanError
from scaling_axes.harness.experiment.plan_checks import check_thresholds
from scaling_axes.harness.experiment.report import registered
from scaling_axes.harness.stability import OUTLIER_Z, SPIKE_NATS
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
