"""Solvers, one module each, all behind one interface (:class:`Solver`), found by name in one map.

:data:`REGISTRY` lists the solvers with the objectives they handle; :data:`OPTIONS` lists every option any
solver takes, once, with its type and meaning: the CLI builds its flags from it, and a solver takes the
options its ``solve`` names (:func:`options_of`). :func:`solve` checks the request, runs the solver and
settles its status.

Layout: ``engines/`` (what solvers share, importing no solver), ``baselines/``, ``pipeline/`` (the
max-load objective), ``split/`` (MILP-SPLIT), and ``exact``, ``milp``, ``call_exact`` beside them.
"""

from __future__ import annotations

import importlib
import inspect
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from ..errors import InputError
from ..plan import Plan
from ..problem import Problem


class Solver(Protocol):
    """What a solver module provides. ``solve`` takes the problem, ``time_limit`` (seconds on the clock, for
    the whole solve: bounds and baselines included), ``seed``, and keyword options, each one of
    :data:`OPTIONS`; where it takes ``progress`` (a callable taking a line) it reports as it goes."""

    def solve(self, problem: Problem, *, time_limit: float, seed: int, **options) -> Plan: ...


@dataclass(frozen=True)
class SolverInfo:
    name: str
    module: str  # under diviml.solvers
    objectives: tuple[str, ...]
    summary: str
    deterministic: bool = False  # the same plan for the same seed whenever the solve finishes within its limit


@dataclass(frozen=True)
class Option:
    """A solver option: the keyword ``solve`` takes, its type, choices and meaning. ``cli``: whether the CLI
    has a flag for it (``--name-with-dashes``; a bool that is on by default gets ``--no-name``)."""
    name: str
    type: type
    help: str
    choices: tuple[str, ...] | None = None
    cli: bool = True

    @property
    def flag(self) -> str:
        return ("--no-" if self.type is bool else "--") + self.name.replace("_", "-")


OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("workers", int, "parallel workers: CP-SAT threads (exact, call-exact), module-solve processes "
                           "(split, exact by pieces), MILP threads (milp, ip); default: the CPU count"),
    Option("symmetry", str, "symmetry breaking between identical devices (with +servers: and identical servers)",
           ("tasks", "busy", "none", "tasks+servers", "busy+servers")),
    Option("engine", str, "MILP engine (HiGHS, or Gurobi when licensed)", ("auto", "highs", "gurobi")),
    Option("module_size", int, "most tasks per module; a group between two series points of up to twice this "
                               "stays one module"),
    Option("module_time_limit", float, "seconds of work per module solve, counted by CP-SAT's deterministic "
                                       "time so that a plan does not depend on the machine's load"),
    Option("decompose", bool, "solve piece by piece between series points where it pays; --no-decompose: "
                              "the whole graph as one model"),
    Option("piece_size", int, "merge series pieces up to this many tasks"),
    Option("max_ideals", int, "most ideals (stage candidates) the dynamic program enumerates"),
    Option("max_pairs", int, "most ideal pairs the dynamic program walks"),
    Option("resolution", int, "time steps the makespan is measured in (CP-SAT works in integers)", cli=False),
    Option("on_incumbent", object, "called with each better plan as it is found", cli=False),
)}

RUN_PARAMETERS = ("problem", "time_limit", "seed", "progress")  # what every solve takes besides its options


REGISTRY: dict[str, SolverInfo] = {s.name: s for s in (
    SolverInfo("split", "split", ("latency", "batch"),
               "MILP-SPLIT (DiviML): modules solved exactly in parallel, joined by dynamic programming", True),
    SolverInfo("best-device", "baselines.best_device", ("latency", "batch", "pipeline", "call-latency"),
               "the whole graph on the single device that runs it fastest (baseline)", True),
    SolverInfo("data-parallel", "baselines.data_parallel", ("batch",),
               "data parallelism with unequal shares: every integer split of the batch over the devices (baseline)", True),
    SolverInfo("streamed", "baselines.streamed", ("batch",),
               "a pipeline's placement with the batch streamed through it a sub-batch at a time, GPipe-style (baseline)",
               True),
    SolverInfo("heft", "baselines.heft", ("latency", "batch"),
               "HEFT: upward rank, insertion-based earliest finish time, memory-aware (baseline)", True),
    SolverInfo("list-search", "baselines.list_search", ("latency",),
               "HEFT's plan improved by iterated local search over devices, timed by list scheduling", True),
    SolverInfo("exact", "exact", ("latency", "batch"),
               "CP-SAT: optimal device, order and batch split with a proven bound (default exact engine)"),
    SolverInfo("milp", "milp", ("latency", "batch"),
               "the paper's MILP (HiGHS, or Gurobi when licensed): device, order and batch split with a bound"),
    SolverInfo("dp", "pipeline.dp", ("pipeline",),
               "optimal contiguous pipeline split: dynamic program over ideals (NeurIPS 2020)", True),
    SolverInfo("ip", "pipeline.ip", ("pipeline",),
               "exact pipeline split as an integer program (NeurIPS 2020), contiguous or not; HiGHS or Gurobi"),
    SolverInfo("call-exact", "call_exact", ("call-latency",),
               "CP-SAT: optimal placement under the NeurIPS 2020 latency model (q calls per accelerator), with a bound"),
    SolverInfo("local-search", "baselines.local_search", ("pipeline",),
               "random restarts + best single move over co-location classes (NeurIPS 2020 baseline)"),
    SolverInfo("pipedream", "baselines.pipedream", ("pipeline",),
               "PipeDream-style optimal split of the linearised graph into consecutive stages (baseline)", True),
    SolverInfo("partitioner", "baselines.partitioner", ("latency", "batch", "pipeline"),
               "METIS graph partition with speed-proportional parts, repaired for memory (baseline)", True),
    SolverInfo("uniform", "baselines.uniform", ("latency", "batch", "pipeline"),
               "Megatron/DeepSpeed pipeline split: equal layers per accelerator, server by server (baseline)", True),
    SolverInfo("memory-split", "baselines.memory_split", ("latency", "batch", "pipeline"),
               "consecutive layers per device in proportion to its memory, server by server (baseline)", True),
    SolverInfo("greedy", "baselines.greedy", ("latency", "batch", "pipeline", "call-latency"),
               "memory-aware topological fill of devices, fastest first, towards balanced load (baseline)", True),
)}


def get(name: str) -> Solver:
    """The module implementing solver ``name``."""
    if name not in REGISTRY:
        raise InputError(f"unknown solver {name!r}: choose one of {', '.join(REGISTRY)} (see 'diviml solvers')")
    return importlib.import_module(f"{__name__}.{REGISTRY[name].module}")


def options_of(name: str) -> dict[str, object]:
    """The options solver ``name`` takes, with its defaults (None: chosen by the solver), read from its ``solve``.

    >>> sorted(options_of("split"))
    ['module_size', 'module_time_limit', 'workers']
    """
    parameters = inspect.signature(get(name).solve).parameters
    return {p: v.default for p, v in parameters.items() if p not in RUN_PARAMETERS}


def takes_progress(name: str) -> bool:
    """Whether solver ``name`` reports progress as it goes (the others' result is reported when they end)."""
    return "progress" in inspect.signature(get(name).solve).parameters


def check_request(objective_kind: str, solver: str, time_limit: float) -> None:
    """Raise InputError when ``solver`` does not exist, does not handle the objective, or the limit is bad."""
    get(solver)
    info = REGISTRY[solver]
    if objective_kind not in info.objectives:
        raise InputError(f"solver {solver!r} does not handle objective {objective_kind!r}: "
                         f"it handles {', '.join(info.objectives)}")
    if time_limit is None or not 0 < time_limit < math.inf:  # a plan comes back within the limit: it must end
        raise InputError(f"time limit must be positive and finite, got {time_limit}")


def check_options(solver: str, options: dict) -> None:
    """Raise InputError, in one line, for an option ``solver`` does not take (naming those it takes) or a
    value of the wrong type or outside its choices, before any work."""
    taken = options_of(solver)
    unknown = sorted(set(options) - set(taken) - {"progress"})
    if unknown:
        takes = ", ".join(OPTIONS[o].flag if OPTIONS[o].cli else o for o in taken) or "none"
        raise InputError(f"solver {solver!r} takes no option {', '.join(_spelled(u) for u in unknown)} "
                         f"(the options it takes: {takes})")
    for name, value in options.items():
        if name in OPTIONS and value is not None:
            _check_value(OPTIONS[name], value)


def _spelled(name: str) -> str:
    return OPTIONS[name].flag if name in OPTIONS and OPTIONS[name].cli else "--" + name.replace("_", "-")


def _check_value(option: Option, value) -> None:
    flag = option.flag if option.cli else option.name
    if option.type is object:
        return
    if option.type in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))
                                        or (option.type is int and not isinstance(value, int))):
        raise InputError(f"{flag} must be a {'whole ' if option.type is int else ''}number, got {value!r}")
    if option.type is int and value < 1:
        raise InputError(f"{flag} must be a whole number >= 1, got {value!r} (leave it out for the default)")
    if option.type is float and not value > 0:
        raise InputError(f"{flag} must be positive, got {value!r} (leave it out for the default)")
    if option.type is bool and not isinstance(value, bool):
        raise InputError(f"{flag}: expected true or false, got {value!r}")
    if option.choices and value not in option.choices:
        raise InputError(f"{flag} must be one of {', '.join(option.choices)}, got {value!r}")


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

    ``progress`` (a callable taking one line) hears a solver that reports progress as it goes, and the result
    of one that does not.
    """
    solver, because = resolve(problem, solver)
    if because:
        plan = solve(problem, solver, time_limit=time_limit, seed=seed, **options)
        return replace(plan, notes=(f"auto chose {solver}: {because}",) + plan.notes)
    check_request(problem.objective.kind, solver, time_limit)
    progress: Callable[[str], None] | None = options.pop("progress", None)
    check_options(solver, options)
    if progress and takes_progress(solver):
        options["progress"] = progress
    started = time.perf_counter()
    plan = get(solver).solve(problem, time_limit=time_limit, seed=seed, **options)
    plan = one_device_if_faster(problem, plan)
    plan = settle_status(plan, time_limit, max(plan.solve_time_s, time.perf_counter() - started))
    if progress and not takes_progress(solver):
        progress(f"  {solver}: {plan.objective:.6g}, bound {plan.bound:.6g} ({plan.bound_source}) in "
                 f"{plan.solve_time_s:.2f} s")
    return plan


def one_device_if_faster(problem, plan):
    """On a platform whose transfers occupy the receiver (``transfers: receiver``), the plan of the best single
    device where it is faster than ``plan``, else ``plan``. The solvers search the overlapped model there (a
    bound of it holds) and the simulator times their plans as the receiver spends each transfer, so a plan that
    spreads a model of small operators over devices may come out slower than one device, as it runs."""
    if (problem.platform.transfers != "receiver" or problem.objective.kind not in ("latency", "batch")
            or len({a.device for a in plan.assignments}) < 2):
        return plan
    from .baselines import best_device
    from .engines.plans import Stopwatch, make_plan
    watch = Stopwatch(0.0)  # the cheap bounds only: the solver's time is spent
    found = best_device.fastest(problem)
    if found is None or found[0] >= plan.objective:
        return plan
    value, device, _ = found
    single = make_plan(problem, best_device.on(problem, device), solver=plan.solver, status=plan.status, watch=watch,
                       bound=plan.bound, bound_source=plan.bound_source, stats=plan.stats, notes=plan.notes + (
                           f"kept every task on {device} ({value:.6g} {plan.time_unit}): the plan found spreads "
                           f"the graph and takes {plan.objective:.6g} as the receiving devices spend its transfers "
                           "(transfers: receiver), which its solver does not model",))
    return replace(single, solve_time_s=plan.solve_time_s + watch.elapsed)


PROVEN_GAP = 2e-6  # a plan within 0.0002% of its proven bound is "optimal": twice the margin the LP bounds keep below
# their optimum (1e-6, for HiGHS's tolerances), so a plan at an LP bound is proven and one a hair above it is not
ROUNDING_GAP = 1e-4  # a solver's own "optimal" stands within this gap (its model's rounding of times)
LIMIT_REACHED = 0.9  # a solve that ran this share of its time limit or more 'reached' it


def meets_its_bound(plan) -> bool:
    """Whether ``plan`` (None: no plan) is within :data:`PROVEN_GAP` of its proven bound: optimal, whatever its
    solver said, and no further search can better it."""
    return plan is not None and plan.objective <= plan.bound + PROVEN_GAP * abs(plan.objective)


def settle_status(plan, time_limit: float, elapsed: float):
    """The plan with the status that means one thing (README, "Statuses"): ``optimal`` when the solver proved
    it and its gap is within :data:`ROUNDING_GAP` (the solver's rounding of times; a model's optimum that the
    simulator times further from the bound is not proven), or its objective is within :data:`PROVEN_GAP` of
    its proven bound, whatever the solver said; otherwise ``timeout`` when the run
    reached its time limit, and ``feasible`` when it stopped before it (a note says so where the solver had
    said ``timeout``: one of its parts ran out of its own share of the time). ``infeasible`` stays.

    >>> from diviml.plan import Plan
    >>> settle_status(Plan("latency", (), 1.0, 1.0, "feasible", "heft"), 10, 0.1).status
    'optimal'
    >>> settle_status(Plan("latency", (), 2.0, 1.0, "timeout", "split"), 10, 2.0).status
    'feasible'
    >>> settle_status(Plan("latency", (), 2.0, 1.0, "optimal", "exact"), 10, 2.0).status
    'feasible'
    """
    if plan.status == "infeasible" or (plan.status == "optimal" and plan.gap <= ROUNDING_GAP):
        return plan  # a solver's "optimal" is its proof (the gap: its rounding of times)
    if plan.status == "optimal":  # its model's optimum, timed by the simulator, is further from the bound
        plan = replace(plan, status="feasible", notes=plan.notes + (
            f"the solver proved its model optimal, but the simulator times its plan {plan.gap:.2%} above the "
            "bound: not proven optimal",))
    if meets_its_bound(plan):
        return replace(plan, status="optimal")
    if elapsed >= LIMIT_REACHED * time_limit:
        return replace(plan, status="timeout")
    notes = plan.notes
    if plan.status == "timeout":
        notes += (f"stopped after {elapsed:.3g} s of its {time_limit:g} s limit: a part of the solve ran out of "
                  "its own share of the time, so the plan is not proven optimal; a longer --time-limit may close "
                  "the gap",)
    return replace(plan, status="feasible", notes=notes)
