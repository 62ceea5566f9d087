"""The rows that strengthen the batch LP (two parts unless whole, chain overlap, part configurations, transfers
per device pair): never above the true optimum, and above the plain LP where plans would average devices."""

import pytest
from test_batch import brute_force_optimum, random_batch_problem

import diviml
from diviml import Objective, Problem
from diviml.bounds import batch_path_work_bound
from diviml.bounds._batch import batch_path_work_lp
from diviml.bounds._batch_rows import chain_cover
from diviml.bounds._lp import _least_makespan
from diviml.generators import layered_dag


def plain_and_strengthened(problem: Problem) -> tuple[float, float]:
    return (_least_makespan(batch_path_work_lp(problem, None), None),
            _least_makespan(batch_path_work_lp(problem, None, strengthened=True), None))


@pytest.mark.parametrize("seed", range(24, 60))
def test_the_strengthened_lp_never_exceeds_the_brute_force_optimum(seed):
    problem = random_batch_problem(seed)
    assert plain_and_strengthened(problem)[1] <= brute_force_optimum(problem) * (1 + 1e-9)


def test_the_rows_lift_the_lp_where_it_averages_devices():
    # tiny random problems the brute force solves: on seeds 0, 14 and 23 the plain LP is 5-10% lower
    for seed in (0, 14, 23):
        problem = random_batch_problem(seed)
        plain, strengthened = plain_and_strengthened(problem)
        assert plain * 1.04 < strengthened <= brute_force_optimum(problem) * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_on_ten_task_graphs_the_bound_rises_and_stays_under_every_plan(seed):
    problem = Problem(layered_dag(10, seed=seed), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    plain, strengthened = plain_and_strengthened(problem)
    best = min(diviml.solve(problem, solver, time_limit=10).objective for solver in ("heft", "exact", "best-device"))
    assert plain * 1.03 < strengthened <= best
    assert batch_path_work_bound(problem) == pytest.approx(strengthened)


def test_a_batch_whose_part_sizes_are_priced_in_ranges_gets_no_rows():
    problem = Problem(layered_dag(10, seed=0), diviml.preset("paper-server"), Objective("batch", batch_size=20))
    assert batch_path_work_lp(problem, None, strengthened=True) is None
    assert batch_path_work_bound(problem) == pytest.approx(_least_makespan(batch_path_work_lp(problem, None), None))


def test_the_chain_cover_starts_with_the_heaviest_path_and_covers_every_task():
    problem = Problem(layered_dag(20, seed=1), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    chains = chain_cover(problem)
    graph = problem.graph
    assert {t for chain in chains for t in chain} == set(graph.topological_order)
    for chain in chains:
        assert all(b in graph.successors[a] for a, b in zip(chain, chain[1:]))  # each a path of the graph
    heaviest = max(chains, key=lambda c: sum(min(problem.time(t, d, 4) for d in problem.allowed_devices[t]) for t in c))
    assert chains[0] == heaviest


def test_graphs_over_the_size_limit_and_builds_past_their_deadline_get_no_rows(monkeypatch):
    from time import perf_counter

    from diviml.bounds import _batch_rows
    problem = Problem(layered_dag(10, seed=0), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    assert batch_path_work_lp(problem, perf_counter() + 60, strengthened=True) is not None
    assert batch_path_work_lp(problem, perf_counter() - 1, strengthened=True) is None  # the time is already up
    monkeypatch.setattr(_batch_rows, "TASKS_UP_TO", 9)
    assert batch_path_work_lp(problem, None, strengthened=True) is None
    assert batch_path_work_bound(problem) == pytest.approx(_least_makespan(batch_path_work_lp(problem, None), None))
