import pytest

import diviml
from diviml import InputError, Objective, Plan, Problem
from diviml.generators import layered_dag


@pytest.mark.parametrize("kind", ["latency", "batch", "pipeline"])
def test_plans_round_trip_through_json(tmp_path, kind):
    p = Problem(layered_dag(12, seed=1), diviml.preset("paper-server"), Objective(kind, batch_size=4))
    plan = diviml.solve(p, "greedy", time_limit=5)
    plan.save(tmp_path / "plan.json")
    again = Plan.load(tmp_path / "plan.json")
    assert again == plan
    assert diviml.validate(again, p).ok


def test_a_plan_reports_its_gap_against_its_bound():
    plan = Plan("latency", (), objective=10.0, bound=8.0, status="feasible", solver="x")
    assert plan.gap == pytest.approx(0.2)


def test_a_file_that_is_not_a_plan_is_rejected(tmp_path):
    (tmp_path / "x.json").write_text('{"schema": "something else"}')
    with pytest.raises(InputError, match="not a diviml plan"):
        Plan.load(tmp_path / "x.json")
