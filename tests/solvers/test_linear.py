"""The linear engine: HiGHS honours the time limit even where its own steps ignore the clock."""

import random
import time

import pytest

from diviml.solvers.engines.highs import CHILD_SIZE
from diviml.solvers.engines.linear import LinearModel, solve_linear


def knapsacks(columns: int, rows: int = 60, seed: int = 1) -> LinearModel:
    """A multi-dimensional knapsack on which HiGHS's presolve ran 17 s of a 3 s limit (20,000 columns)."""
    rng = random.Random(seed)
    m = LinearModel()
    xs = [m.binary(cost=-rng.uniform(1, 10)) for _ in range(columns)]
    for _ in range(rows):
        m.row([(x, rng.uniform(1, 10)) for x in xs if rng.random() < 0.3], upper=columns * 0.5)
    return m


def feasible(m: LinearModel, values: list[float]) -> bool:
    for idx, coef, lo, hi in m.rows:
        total = sum(c * values[i] for i, c in zip(idx, coef))
        if not lo - 1e-6 <= total <= hi + 1e-6:
            return False
    return all(lo - 1e-6 <= v <= hi + 1e-6 for v, lo, hi in zip(values, m.lower, m.upper))


def test_a_solve_whose_presolve_ignores_the_clock_still_ends_at_the_time_limit():
    m = knapsacks(20_000)
    started = time.perf_counter()
    result = solve_linear(m, time_limit=1.5, engine="highs")
    assert time.perf_counter() - started < 1.5 + 0.5
    assert result.status in ("timeout", "unknown") and result.engine == "highs"


def test_a_stopped_solve_returns_the_best_solution_it_reported_with_its_bound():
    # in a child process (a model above CHILD_SIZE): its first solution came at 0.8-1.5 s here, and not within
    # 1.5 s on a loaded CI machine ("unknown"); at 4 s the gap is still 1.3%, far from proven
    m = knapsacks(CHILD_SIZE + 1000)
    started = time.perf_counter()
    result = solve_linear(m, time_limit=4.0, engine="highs")
    assert time.perf_counter() - started < 4.0 + 0.5
    assert result.status == "timeout" and result.values is not None and feasible(m, result.values)
    assert result.objective == pytest.approx(sum(c * v for c, v in zip(m.cost, result.values)))
    assert result.bound <= result.objective


def test_small_and_large_models_are_solved_to_the_same_optimum():
    for columns in (CHILD_SIZE - 2, CHILD_SIZE):  # one row: below the child's size, and above it
        m = LinearModel()
        xs = [m.binary(cost=-1.0 - (i % 7)) for i in range(columns)]
        m.row([(x, 1.0) for x in xs], upper=5.0)
        result = solve_linear(m, time_limit=30, engine="highs")
        assert result.status == "optimal" and result.objective == pytest.approx(-35.0)
        assert feasible(m, result.values)


@pytest.mark.slow
def test_a_warm_started_solve_proves_the_same_optimum_as_a_cold_one():
    """HiGHS 1.12 with presolve on declared a warm-started pipeline IP optimal at 0.0089713; its optimum is
    0.0089459 (two servers, identical GPUs ordered by their number of tasks)."""
    from conftest import two_servers

    import diviml
    from diviml.generators import layered_dag
    from diviml.solvers.engines.plans import Stopwatch
    from diviml.solvers.pipeline import ip
    from diviml.solvers.pipeline.common import Contracted
    platform = two_servers()
    problem = diviml.Problem(layered_dag(24, seed=0, device_types=("cpu", "a100"), ccr=(0.05, 0.5)), platform,
                             diviml.Objective("pipeline"))
    contracted = Contracted(problem)
    model, maps = ip.build(problem, contracted, "tasks", unit=1e5)
    start = ip.warm_start(problem, Stopwatch(20), diviml.bounds.lower_bound(problem))
    hint = ip.hint_vector(model, maps, problem, contracted, start.placement, "tasks")
    warm = solve_linear(model, time_limit=120, engine="highs", hint=hint)
    cold = solve_linear(model, time_limit=120, engine="highs")
    assert warm.status == cold.status == "optimal"
    assert warm.objective == pytest.approx(cold.objective, rel=1e-6)
