"""The rows that strengthen the batch LP (two parts unless whole, chain overlap, part configurations, transfers
per device pair): never above the true optimum, and above the plain LP where plans would average devices."""

import itertools
from time import perf_counter

import pytest
from test_batch import brute_force_optimum, random_batch_problem

import diviml
from diviml import Objective, Problem
from diviml.bounds import batch_path_work_bound
from diviml.bounds._batch import batch_path_work_lp
from diviml.bounds._batch_rows import CONFIGURATIONS_UP_TO, chain_cover, configurations
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
    from diviml.bounds import _batch_rows
    problem = Problem(layered_dag(10, seed=0), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    assert batch_path_work_lp(problem, perf_counter() + 60, strengthened=True) is not None
    assert batch_path_work_lp(problem, perf_counter() - 1, strengthened=True) is None  # the time is already up
    monkeypatch.setattr(_batch_rows, "TASKS_UP_TO", 9)
    assert batch_path_work_lp(problem, None, strengthened=True) is None
    assert batch_path_work_bound(problem) == pytest.approx(_least_makespan(batch_path_work_lp(problem, None), None))


@pytest.mark.parametrize("devices, n", [(1, 4), (3, 8), (4, 5), (6, 3)])
def test_the_configurations_are_every_vector_of_part_sizes_within_the_batch(devices, n):
    every = [c for c in itertools.product(range(n + 1), repeat=devices) if 0 < sum(c) <= n]
    assert configurations(devices, n, most=len(every)) == every
    assert configurations(devices, n, most=len(every) - 1) is None


def test_many_devices_get_no_configuration_rows_and_the_bound_keeps_its_time():
    # 18 devices (two servers of a CPU and eight A100s) at a batch of 4: 7,314 configurations, over the cap; finding
    # that by walking every size on every device once took 40 s inside a 3 s solve (edge_cases, large seed 6800)
    platform = diviml.preset("a100-ib-2x8")
    types = tuple(sorted({d.type for d in platform.devices}, key=lambda t: t != "cpu"))
    problem = Problem(layered_dag(30, seed=0, device_types=types), platform, Objective("batch", batch_size=4))
    assert configurations(len(platform.devices), 4) is None and CONFIGURATIONS_UP_TO < 7_314
    started = perf_counter()
    bound = batch_path_work_bound(problem, time_limit=2.0)
    assert perf_counter() - started < 2.0 + 3.0  # its time limit, and slack for a loaded machine
    assert 0 < bound <= diviml.solve(problem, "heft", time_limit=5).objective
