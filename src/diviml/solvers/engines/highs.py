"""HiGHS for :mod:`.linear`, with a hard stop for large models.

HiGHS checks its clock between steps, and some steps are long on large models: presolve on GPT-3's pipeline
IP over six servers (400,000 columns) ran 123 s of a 45 s limit, and a root step with a warm start on a
6,400-column IP ran 5 s over, and a 2,700-column MILP of 137,000 rows 4 s over a 1 s limit. So a model of
:data:`CHILD_SIZE` columns and rows together, or more, is solved in a child
process that reports every improving solution and, now and then, HiGHS's dual bound; at the deadline the
child is killed and the best of what it reported is the answer (status ``timeout``). Smaller models, whose
steps are short, are solved here, without the child's start-up.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from .linear import LinearModel, LinearResult

__all__ = ["CHILD_SIZE", "process_context", "solve_highs"]

CHILD_SIZE = 5_000  # columns and rows
# presolve does not look at the clock: off above this size (the NeurIPS 2020 IPs stay far below it)
NO_PRESOLVE_COLUMNS = 100_000
HAND_BACK = 0.3  # seconds before the deadline at which the child's HiGHS stops, to send its answer back
BOUND_EVERY = 1.0  # seconds between the child's reports of the dual bound


def process_context():
    """Fork where the platform allows (children start in milliseconds and inherit their data)."""
    return multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")


def solve_highs(model: LinearModel, time_limit: float, seed: int, hint: Sequence[float] | None,
                threads: int | None, rel_gap: float) -> LinearResult:
    """Solve ``model`` with HiGHS within ``time_limit`` seconds (a hard limit from :data:`CHILD_SIZE`)."""
    deadline = time.monotonic() + max(time_limit, 0.01)
    if model.num_vars + len(model.rows) < CHILD_SIZE:
        return _run(model, deadline, seed, hint, threads, rel_gap, report=None)
    return _in_child(model, deadline, seed, hint, threads, rel_gap)


def _in_child(model, deadline, seed, hint, threads, rel_gap) -> LinearResult:
    from .linear import LinearResult
    context = process_context()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(send, model, deadline, seed, hint, threads, rel_gap),
                            name="diviml-highs", daemon=True)
    child.start()
    send.close()
    best: tuple[float, list[float]] | None = None
    bound = -math.inf
    try:
        while receive.poll(max(deadline - time.monotonic(), 0.0)):
            message = receive.recv()
            if message[0] == "done":
                return message[1]
            if message[0] == "solution":
                best = (message[1], message[3])
            reported = message[2] if message[0] == "solution" else message[1]
            bound = max(bound, reported) if math.isfinite(reported) else bound
    except (EOFError, OSError):  # the child died: what it reported stands
        pass
    finally:
        if child.is_alive():  # SIGKILL: a forked child shares the CLI's signal pipe, so SIGTERM would end both
            child.kill()
        child.join(timeout=2.0)
        receive.close()
    if best is None:
        return LinearResult("unknown", None, None, bound, "highs", "HiGHS stopped at the time limit")
    return LinearResult("timeout", best[1], best[0], bound, "highs")


def _child_main(send, model, deadline, seed, hint, threads, rel_gap) -> None:
    def report(message: tuple) -> None:
        send.send(message)
    try:
        send.send(("done", _run(model, deadline - HAND_BACK, seed, hint, threads, rel_gap, report)))
    finally:
        send.close()


def _run(model: LinearModel, deadline: float, seed, hint, threads, rel_gap,
         report: Callable[[tuple], None] | None) -> LinearResult:
    import highspy

    from ...native import native_output_discarded
    from .linear import LinearResult
    h = _highs(model, seed, threads, rel_gap)
    if hint is not None:
        # with presolve on, HiGHS 1.12 can cut off the optimum when it maps a given solution between the
        # presolved and the original model (as in ERGO-Code/HiGHS#2439): a 24-task pipeline IP warm-started
        # so was "optimal" at 0.0089713, its true optimum 0.0089459; with presolve off it proves the latter
        h.setOptionValue("presolve", "off")
        sol = highspy.HighsSolution()
        sol.col_value = list(map(float, hint))
        sol.value_valid = True
        h.setSolution(sol)
    if report is not None:
        _report_progress(h, report)
    # the limit counts from here: handing HiGHS a model of 400,000 columns takes seconds of it
    h.setOptionValue("time_limit", float(max(deadline - time.monotonic(), 0.01)))
    with native_output_discarded():  # output_flag is off, yet its MIP prints a line now and then
        h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2
    values = list(h.getSolution().col_value) if has_solution else None
    objective = info.objective_function_value if has_solution else None
    is_mip = any(model.integer)
    if status == highspy.HighsModelStatus.kOptimal:
        bound = info.mip_dual_bound if is_mip else info.objective_function_value
        return LinearResult("optimal", values, objective, bound, "highs")
    if status == highspy.HighsModelStatus.kInfeasible:
        return LinearResult("infeasible", None, None, math.inf, "highs")
    bound = info.mip_dual_bound if is_mip and math.isfinite(info.mip_dual_bound) else -math.inf
    return LinearResult("timeout" if has_solution else "unknown", values, objective, bound, "highs")


def _report_progress(h: Any, report: Callable[[tuple], None]) -> None:
    """Every improving solution with its objective and dual bound; the dual bound alone every few seconds."""
    last = [time.monotonic()]

    def improving(event) -> None:
        out = event.data_out
        report(("solution", out.objective_function_value, out.mip_dual_bound, list(out.mip_solution)))

    def bound(event) -> None:
        if time.monotonic() - last[0] >= BOUND_EVERY:
            last[0] = time.monotonic()
            report(("bound", event.data_out.mip_dual_bound))
    h.cbMipImprovingSolution.subscribe(improving)
    h.cbMipInterrupt.subscribe(bound)


def _highs(model: LinearModel, seed, threads, rel_gap):
    """A HiGHS instance holding ``model``."""
    import highspy
    import numpy as np

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("random_seed", int(seed))
    h.setOptionValue("mip_rel_gap", rel_gap)
    if threads:
        h.setOptionValue("threads", int(threads))
    if model.num_vars > NO_PRESOLVE_COLUMNS:
        h.setOptionValue("presolve", "off")
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    n = model.num_vars
    lp.num_col_ = n
    lp.num_row_ = len(model.rows)
    lp.col_cost_ = np.array(model.cost, dtype=float)
    lp.col_lower_ = np.array([max(v, -inf) for v in model.lower], dtype=float)
    lp.col_upper_ = np.array([min(v, inf) for v in model.upper], dtype=float)
    lp.row_lower_ = np.array([max(r[2], -inf) for r in model.rows], dtype=float)
    lp.row_upper_ = np.array([min(r[3], inf) for r in model.rows], dtype=float)
    starts, index, value = [0], [], []
    for idx, coef, _, _ in model.rows:
        index.extend(idx)
        value.extend(coef)
        starts.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = len(model.rows)
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                       for i in model.integer]
    h.passModel(lp)
    return h
