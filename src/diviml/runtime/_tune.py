"""Schedule, run, calibrate, schedule again: the loop that makes a plan answer to the hardware it runs on.

One calibration is not always enough. A plan of many pieces over workers of one process runs slower than its
profile said, calibration charges that to the hand-offs between devices, and the next solve, seeing dearer
hand-offs, cuts fewer pieces; but a plan of fewer pieces meets the slowdown elsewhere. On cpu-workers-2 the
randomly wired network went 242 -> 116 -> 44 -> 1 pieces over four rounds, measured 11.0 -> 9.5 -> 8.8 ->
8.0 ms, the last the one worker alone (``diviml run --calibrate-out`` by hand, session 39). :func:`tune` runs
that loop until a plan comes back that it ran already, and keeps the fastest plan it measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..graph import TaskGraph
from ..plan import Plan
from ..platform import Platform
from ..problem import Problem
from ._calibrate import calibrated_graph, calibrated_platform
from ._run import RunReport, run
from ._source import ModelSource, model_source

__all__ = ["TuneReport", "TuneRound", "tune"]


@dataclass(frozen=True)
class TuneRound:
    """One round: the plan solved on the graph and platform calibrated so far, run and measured."""
    plan: Plan
    graph: TaskGraph  # what the plan was solved on (the profile, or the previous round's calibration)
    platform: Platform
    report: RunReport

    def to_dict(self) -> dict:
        r = self.report
        return {"pieces": r.pieces, "devices": sorted(r.devices), "predicted_s": r.predicted_s,
                "measured_s": r.measured_s, "measured_min_s": r.measured_min_s, "measured_max_s": r.measured_max_s,
                "ratio": r.ratio, "outputs_match": r.outputs_match}


@dataclass(frozen=True)
class TuneReport:
    """Every round in order; ``best``: the round whose plan measured fastest; ``converged``: whether the loop
    ended because the solver returned a plan it had run already (else it ran out of rounds)."""
    model: str
    rounds: tuple[TuneRound, ...]
    best: int
    converged: bool

    @property
    def best_round(self) -> TuneRound:
        return self.rounds[self.best]

    def to_dict(self) -> dict:
        best = self.best_round.report
        return {"model": self.model, "rounds": [r.to_dict() for r in self.rounds], "best_round": self.best,
                "converged": self.converged, "best_measured_s": best.measured_s, "best_predicted_s": best.predicted_s,
                "first_measured_s": self.rounds[0].report.measured_s,
                "speedup_over_first": self.rounds[0].report.measured_s / best.measured_s}


def tune(source: ModelSource | str, problem: Problem, *, solver: str = "split", time_limit: float = 5.0,
         rounds: int = 4, repeats: int = 10, warmup: int = 3, progress=None, **options) -> TuneReport:
    """Solve ``problem`` with ``solver``, run the plan on ``problem.platform``'s devices (in this process), and
    solve again on the graph and platform calibrated by that run (:func:`calibrated_graph`,
    :func:`calibrated_platform`), for at most ``rounds`` runs or until the solver returns a plan already run.
    Every round's outputs are checked against the unsplit module, as :func:`run` does.

    >>> report = tune("googlenet", problem, rounds=3)                    # doctest: +SKIP
    >>> report.best_round.plan, report.best_round.report.measured_s      # doctest: +SKIP
    """
    from ..solvers import solve

    if rounds < 1:
        raise InputError(f"rounds must be >= 1, got {rounds}")
    if problem.objective.kind not in ("latency", "batch"):
        raise InputError(f"tune calibrates from one request's timeline, which a {problem.objective.kind} plan's run "
                         "does not have: tune a latency or batch problem")
    if isinstance(source, str):
        source = model_source(source)
    done: list[TuneRound] = []
    plan = solve(problem, solver, time_limit=time_limit, **options)
    converged = False
    while True:
        if progress:
            progress(f"round {len(done) + 1}: a plan of {len(plan.placement)} tasks on "
                     f"{len(set(plan.placement.values()))} device(s), predicted {plan.objective * 1e3:.4g} ms")
        report = run(source, plan, problem.platform, problem=problem, repeats=repeats, warmup=warmup,
                     progress=progress)
        done.append(TuneRound(plan, problem.graph, problem.platform, report))
        if len(done) == rounds:
            break
        graph = calibrated_graph(report, plan, problem)
        platform = calibrated_platform(report, problem.platform, plan=plan,
                                       problem=Problem(graph, problem.platform, problem.objective))
        problem = Problem(graph, platform, problem.objective)
        plan = solve(problem, solver, time_limit=time_limit, **options)
        if any(_same(plan, r.plan) for r in done):
            converged = True
            break
    best = min(range(len(done)), key=lambda k: done[k].report.measured_s)
    return TuneReport(source.name, tuple(done), best, converged)


def _same(a: Plan, b: Plan) -> bool:
    """The same placement, parts and order on every device: the same program when run."""
    return a.parts == b.parts and a.device_order == b.device_order
