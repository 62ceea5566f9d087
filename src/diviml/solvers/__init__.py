"""Solvers, one module each, all behind ``solve(problem, *, time_limit, seed) -> Plan``.

:func:`get` looks one up by its CLI name; :data:`REGISTRY` lists them with what they are for.
"""

from __future__ import annotations

import importlib
import inspect
import time
from dataclasses import dataclass, replace

from ..errors import InputError


@dataclass(frozen=True)
class SolverInfo:
    name: str
    module: str
    objectives: tuple[str, ...]
    summary: str


REGISTRY: dict[str, SolverInfo] = {s.name: s for s in (
    SolverInfo("split", "split", ("latency", "batch"),
               "MILP-SPLIT (DiviML): modules solved exactly in parallel, joined by dynamic programming"),
    SolverInfo("best-device", "baselines.best_device", ("latency", "batch", "pipeline", "call-latency"),
               "the whole graph on the single device that runs it fastest (baseline)"),
    SolverInfo("data-parallel", "baselines.data_parallel", ("batch",),
               "data parallelism with unequal shares: every integer split of the batch over the devices (baseline)"),
    SolverInfo("heft", "baselines.heft", ("latency", "batch"),
               "HEFT: upward rank, insertion-based earliest finish time, memory-aware (baseline)"),
    SolverInfo("exact", "exact", ("latency", "batch"),
               "CP-SAT: optimal device, order and batch split with a proven bound (default exact engine)"),
    SolverInfo("milp", "milp", ("latency", "batch"),
               "the paper's MILP (HiGHS, or Gurobi when licensed): device, order and batch split with a bound"),
    SolverInfo("dp", "pipeline.dp", ("pipeline",),
               "optimal contiguous pipeline split: dynamic program over ideals (NeurIPS 2020)"),
    SolverInfo("ip", "pipeline.ip", ("pipeline",),
               "exact pipeline split as an integer program (NeurIPS 2020), contiguous or not; HiGHS or Gurobi"),
    SolverInfo("call-exact", "call_exact", ("call-latency",),
               "CP-SAT: optimal placement under the NeurIPS 2020 latency model (q calls per accelerator), with a bound"),
    SolverInfo("local-search", "baselines.local_search", ("pipeline",),
               "random restarts + best single move over co-location classes (NeurIPS 2020 baseline)"),
    SolverInfo("pipedream", "baselines.pipedream", ("pipeline",),
               "PipeDream-style optimal split of the linearised graph into consecutive stages (baseline)"),
    SolverInfo("partitioner", "baselines.partitioner", ("latency", "batch", "pipeline"),
               "METIS graph partition with speed-proportional parts, repaired for memory (baseline)"),
    SolverInfo("greedy", "baselines.greedy", ("latency", "batch", "pipeline", "call-latency"),
               "memory-aware topological fill of devices, fastest first, towards balanced load (baseline)"),
)}


def get(name: str):
    """The module implementing solver ``name`` (it has ``solve(problem, *, time_limit, seed)``)."""
    if name not in REGISTRY:
        raise InputError(f"unknown solver {name!r}: choose one of {', '.join(REGISTRY)} (see 'diviml solvers')")
    return importlib.import_module(f"{__name__}.{REGISTRY[name].module}")


def check_request(objective_kind: str, solver: str, time_limit: float) -> None:
    """Raise InputError when ``solver`` does not exist, does not handle the objective, or the limit is bad."""
    get(solver)
    info = REGISTRY[solver]
    if objective_kind not in info.objectives:
        raise InputError(f"solver {solver!r} does not handle objective {objective_kind!r}: "
                         f"it handles {', '.join(info.objectives)}")
    if time_limit is None or not time_limit > 0:
        raise InputError(f"time limit must be positive, got {time_limit}")


def check_options(solver: str, options: dict) -> None:
    """Raise InputError for an option ``solver`` does not take or a value it rejects, before any work."""
    accepted = inspect.signature(get(solver).solve).parameters
    unknown = sorted(set(options) - set(accepted) - {"progress"})
    if unknown:
        raise InputError(f"solver {solver!r} takes no option {', '.join('--' + u.replace('_', '-') for u in unknown)}")
    workers = options.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"--workers must be a whole number >= 1, got {workers!r} (leave it out for the default)")
    check = getattr(get(solver), "check_options", None)
    if check:
        check(**options)


def resolve(problem, solver: str) -> tuple[str, str | None]:
    """The solver that runs for ``solver`` on ``problem`` and why: ``auto`` chooses by the problem
    (:func:`.auto.choose`), any other name is itself (and no reason)."""
    if solver != "auto":
        return solver, None
    from .auto import choose
    return choose(problem)


def solve(problem, solver: str = "heft", *, time_limit: float = 60.0, seed: int = 0, **options):
    """Solve ``problem`` with the named solver (``auto``: chosen by :func:`resolve`, which a note on the plan
    says), after checking it handles the objective and the options.

    ``progress`` (a callable taking one line) is passed to solvers that report progress, dropped for others.
    """
    solver, because = resolve(problem, solver)
    if because:
        plan = solve(problem, solver, time_limit=time_limit, seed=seed, **options)
        return replace(plan, notes=(f"auto chose {solver}: {because}",) + plan.notes)
    check_request(problem.objective.kind, solver, time_limit)
    module = get(solver)
    if "progress" not in inspect.signature(module.solve).parameters:
        options.pop("progress", None)
    check_options(solver, options)
    started = time.perf_counter()
    plan = module.solve(problem, time_limit=time_limit, seed=seed, **options)
    return settle_status(plan, time_limit, max(plan.solve_time_s, time.perf_counter() - started))


PROVEN_GAP = 1e-5  # a plan within 0.001% of its proven bound is "optimal" (MILP solvers use 1e-4)
LIMIT_REACHED = 0.9  # a solve that ran this share of its time limit or more 'reached' it


def settle_status(plan, time_limit: float, elapsed: float):
    """The plan with the status that means one thing (README, "Statuses"): ``optimal`` when the solver proved
    it (within the rounding its gap shows) or its objective is within :data:`PROVEN_GAP` of its proven bound,
    whatever the solver said; otherwise ``timeout`` when the run
    reached its time limit, and ``feasible`` when it stopped before it (a note says so where the solver had
    said ``timeout``: one of its parts ran out of its own share of the time). ``infeasible`` stays.

    >>> from diviml.plan import Plan
    >>> settle_status(Plan("latency", (), 1.0, 1.0, "feasible", "heft"), 10, 0.1).status
    'optimal'
    >>> settle_status(Plan("latency", (), 2.0, 1.0, "timeout", "split"), 10, 2.0).status
    'feasible'
    """
    if plan.status in ("infeasible", "optimal"):  # a solver's "optimal" is its proof (gap: its rounding)
        return plan
    if plan.objective <= plan.bound + PROVEN_GAP * abs(plan.objective):
        return replace(plan, status="optimal")
    if elapsed >= LIMIT_REACHED * time_limit:
        return replace(plan, status="timeout")
    notes = plan.notes
    if plan.status == "timeout":
        notes += (f"stopped after {elapsed:.3g} s of its {time_limit:g} s limit: a part of the solve ran out of "
                  "its own share of the time, so the plan is not proven optimal; a longer --time-limit may close "
                  "the gap",)
    return replace(plan, status="feasible", notes=notes)
