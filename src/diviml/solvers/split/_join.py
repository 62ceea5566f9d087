"""The Viterbi join over a chain of modules for one batch split (a step per module)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...bounds import MODULE_DP
from ...errors import InfeasibleError
from ...plan import Plan
from ...problem import Problem
from ..engines.jobs import JobGraph
from ..engines.modules import Chain
from ..engines.plans import Stopwatch, plan_from_jobs
from ._messages import NAME, Answer, Partial, Request
from ._partial import (
    Lookahead,
    advance,
    critical_path,
    dominates,
    hoist,
    origin_terms,
    pins,
    releases,
    repair_memory,
    takes_time,
)
from ._pool import Pool


@dataclass
class JoinResult:
    partial: Partial | None
    solves: int = 0
    optimal_solves: int = 0
    heft_solves: int = 0
    repaired: bool = False
    lower: float = 0.0
    share_bound: bool = False  # some solve ended unproven at a limit below module_time_limit
    dominated: int = 0  # states dropped because another one dominated them
    cut_off: int = 0  # solves ended by their cutoff: proven not to improve on a state already reached
    late: int = 0  # of those, by the deadlines of the jobs read later (see solve_late)
    guided: int = 0  # solves started from an earlier module's schedule
    twins: int = 0  # solves of modules without their constants, for the DP on bounds
    out_of_time: tuple[int, int] | None = None  # (module it stopped before, modules) when the time ran out


def exit_options(problem: Problem, exit_task: str, copies: int) -> list[tuple[str, ...] | None]:
    devices = problem.allowed_devices[exit_task]
    uniform = [tuple([d] * copies) for d in devices]
    return uniform if copies == 1 else uniform + [None]


def join(problem: Problem, chain: Chain, sizes: tuple[int, ...], pool: Pool, watch: Stopwatch, *,
          memory_binds: bool, module_time_limit: float, seed: int, progress, label: str,
          bounds: bool = False, scale: float = 1.0) -> JoinResult:
    """The Viterbi walk over the chain for one batch split (``memory_binds``: track memory budgets;
    ``bounds``: the DP on the module solves' bounds bounds the optimum, see :func:`chain_bounds`).

    Each step gets a share of the time left in proportion to its module's size, times ``scale``, spread
    over the solves the pool runs side by side (and never more than the time left)."""
    look = Lookahead(problem, chain, sizes)
    states: dict = {(): Partial(memory_left={d.name: d.memory_bytes for d in problem.platform.devices})}
    result = JoinResult(None)
    n = len(chain.modules)
    remaining = sum(len(m.tasks) for m in chain.modules)
    for i, module in enumerate(chain.modules):
        if watch.expired:  # the rest would run on the pool's round trips alone (50,000 tasks: a minute more)
            result.out_of_time = (i + 1, n)
            return result
        requests = len(states) * len(exit_options(problem, module.exit, len(sizes)))
        # this step's share of the time (in proportion to its size), spread over the solves run side by side
        share = watch.left * len(module.tasks) / remaining
        remaining -= len(module.tasks)
        parallel = min(pool.workers, requests) / requests
        limit = min(module_time_limit, share * scale * parallel, watch.left * parallel)
        before = result.optimal_solves, result.solves
        # chain bounds hold only where memory cannot bind, so the repair below never runs with them
        new_states = step(problem, i, module, sizes, states, pool, limit, time.time() + watch.left, seed,
                           memory_binds, look, result, bounds)
        if limit < module_time_limit and result.optimal_solves - before[0] < result.solves - before[1]:
            result.share_bound = True
        if not new_states and memory_binds:
            # no state can hold this module: place the rest ignoring memory, and repair at the end
            memory_binds, result.repaired = False, True
            new_states = step(problem, i, module, sizes, states, pool, limit, time.time() + watch.left, seed,
                               memory_binds, look, result, bounds)
        if not new_states:
            return result
        states = new_states
        if progress:
            best = min(p.estimate for p in states.values())
            progress(f"  {label}: module {i + 1}/{n} ({len(module.tasks)} tasks), best estimate "
                     f"{best:.6g} at {watch.elapsed:.1f} s")
    result.partial = min(states.values(), key=lambda p: p.makespan)
    result.lower = min(p.lower for p in states.values())
    return result


def step(problem: Problem, index: int, module, sizes, states: dict, pool: Pool, limit: float, deadline: float,
          seed: int, memory_binds: bool, look: Lookahead, result: JoinResult, bounds: bool) -> dict:
    """Solve ``module`` after every state for every exit option, each solve given ``limit`` seconds of work
    and ending by ``deadline`` (time.time()); the best new partial per exit state that no other dominates.

    The best-ranked state goes first. The others' solves then carry a cutoff on the module's makespan: the
    estimate already reached for their exit state, less their origin (and, where the exit closes the
    module, less the exit's fastest path after it, its *tail*). A schedule that cannot end sooner cannot
    improve on the state reached, and CP-SAT stops as soon as it proves there is none (a bound in hand);
    below the cutoff it finds the same optimum, so the cutoffs never change the plan. One whose partial
    alone already reaches that estimate is not solved. Where other jobs are read later, the solve first
    tests whether any schedule ends each of them its tail before the cutoff (:func:`solve_late`), and only then
    runs as above: most end there (densenet121: 107 of 108, 2.2 s of CPU down to 0.4 s). Solving with those
    deadlines instead would cut off as many but find other schedules, and steered the Viterbi join
    elsewhere (randwire-ba-s0's plan fell back to HEFT's, 1.3% worse); the test alone changes no plan.

    Where the chain bounds the optimum (``bounds``) and the module keeps constants that :func:`hoist` could
    not place early, each solve has a twin without them, for the DP on bounds only: the optimum may run a
    constant long before its module, so the module's span there is at least the optimum of the module
    without its constants (their outputs already everywhere), not of the module with them."""
    jobs = [(t, l) for t in module.tasks for l in range(len(sizes))]
    first, _ = origin_terms(problem, module.tasks, sizes, look.constants)
    new_states: dict = {}
    lowest: dict = {}  # state -> the least lower bound over the ways into it (the DP on bounds)
    ranked_keys = list(states)  # best estimate first (see the end of this function)
    tails = {j: look.after(j, index) for j in jobs if look.last_module[j[0]] > index}
    # where the exit ends the module (every other task feeds it) and alone is read later, the same tail for
    # every copy, the estimate is the exit's end plus that tail
    series_tail = None
    if (set(tails) <= {(module.exit, l) for l in range(len(sizes))} and len(set(tails.values())) <= 1
            and all(problem.graph.successors[t] for t in module.tasks if t != module.exit)):
        series_tail = max(tails.values(), default=0.0)
    for batch in (ranked_keys[:1], ranked_keys[1:]):
        requests, keys, settled, twins = [], [], [], []
        for key in batch:
            partial, tasks = hoist(problem, states[key], module, sizes, first, look, index, memory_binds)
            # the module without its constants, where its bound solves need them
            unconstant = tuple(t for t in tasks if t not in look.constants)
            if not bounds or not any(takes_time(problem, t) for t in tasks if t in look.constants):
                unconstant = None
            release_abs = releases(problem, [(t, l) for t in tasks for l in range(len(sizes))], sizes, partial)
            origin = (min(v for ((t, _), _), v in release_abs.items() if t in first)
                      - origin_terms(problem, tasks, sizes, look.constants)[1])
            release = {k: v - origin for k, v in release_abs.items() if v - origin > 0}
            capacity = dict(partial.memory_left) if memory_binds else None
            # what the partial alone sets its successors' estimates to: its makespan, its open tensors' tails
            fixed = max([partial.makespan] + [partial.finish[j] + look.after(j, index) for j in partial.open
                                              if look.last_module[j[0]] > index])
            for option in exit_options(problem, module.exit, len(sizes)):
                reached = new_states[option].estimate if option in new_states else None
                if reached is not None and fixed >= reached:
                    settled.append(((key, partial, tasks, option, release_abs, origin),
                                    Answer(None, None, "cutoff"),
                                    critical_path(problem, unconstant or tasks, sizes, release)))
                    continue
                only = pins(problem, tasks, sizes, partial, module.exit, option)
                # the new partial's estimate is at least its makespan, and at a series exit its makespan
                # plus the exit's tail: a module schedule that cannot end sooner cannot improve on it
                cutoff = None if reached is None else reached - origin - (series_tail or 0.0)
                late = {j: v for j, v in tails.items() if j[0] in tasks}
                requests.append(Request(tasks, sizes, release, only, capacity, limit, deadline, seed, cutoff,
                                         late if cutoff is not None and series_tail is None else None))
                keys.append((key, partial, tasks, option, release_abs, origin))
                twins.append(None if unconstant is None else Request(
                    unconstant, sizes, {k: v for k, v in release.items() if k[0][0] not in look.constants},
                    {j: v for j, v in only.items() if j[0] not in look.constants}, None, limit, deadline, seed))
        answers = pool.map(requests + [t for t in twins if t is not None])
        answers, twin_answers = answers[:len(requests)], iter(answers[len(requests):])
        # the DP on bounds reads each twin's bound where there is a twin, the solve's own otherwise
        twin_of = [None if t is None else next(twin_answers) for t in twins]
        bounds_of = [(t or a).bound for a, t in zip(answers, twin_of)]
        twins_solved = sum(t is not None for t in twin_of)
        result.twins += twins_solved
        result.solves += len(answers) + len(settled) + twins_solved
        result.optimal_solves += sum(t is not None and t.status == "optimal" for t in twin_of)
        for (key, partial, tasks, option, release_abs, origin), answer, bound in (
                list(zip(keys, answers, bounds_of)) + settled):
            result.optimal_solves += answer.status in ("optimal", "cutoff", "late")
            result.heft_solves += answer.status == "heft"
            result.cut_off += answer.status in ("cutoff", "late")
            result.late += answer.status == "late"
            result.guided += answer.guided
            lower = partial.lower + (origin - partial.makespan) + bound
            if answer.device_of is None:
                if option in lowest and answer.status != "infeasible":  # its cutoff's bound (or none) counts
                    lowest[option] = min(lower, lowest[option])
                continue
            nxt = advance(problem, partial, tasks, sizes, release_abs, answer, memory_binds, look, index)
            state = tuple(nxt.device_of[(module.exit, l)] for l in range(len(sizes)))
            lowest[state] = min(lower, lowest.get(state, lower))
            if state not in new_states or nxt.estimate < new_states[state].estimate:
                new_states[state] = nxt
    for state, p in new_states.items():
        p.lower = lowest[state]
    ranked = sorted(new_states.items(), key=lambda kv: kv[1].estimate)
    kept: list = []
    for state, p in ranked:
        if not any(dominates(problem, sizes, q, p, bounds, memory_binds) for _, q in kept):
            kept.append((state, p))
    result.dominated += len(ranked) - len(kept)
    # one state per exit device is the exact DP for one copy; with several copies keep the best few
    beam = len(problem.platform.devices) + 1
    return dict(kept[:beam])


def plan_of(problem: Problem, sizes, res: JoinResult, bounds: bool, watch: Stopwatch,
             notes: list) -> Plan | None:
    """The join's plan (memory repaired where it had to be), or None with a note saying why there is none."""
    if res.partial is None:
        if res.out_of_time is not None:
            stopped, modules = res.out_of_time
            notes.append(f"the join ran out of time before module {stopped} of {modules} ({len(sizes)} "
                         "sub-batch(es)): no plan from it")
        else:
            notes.append(f"the join found no plan for {len(sizes)} sub-batch(es) within the pins and memory")
        return None
    device_of = res.partial.device_of
    if res.repaired:
        try:
            device_of = repair_memory(problem, device_of)
        except InfeasibleError:
            notes.append(f"the plan for {len(sizes)} sub-batch(es) overflowed memory beyond repair")
            return None
    bound = res.lower if bounds and not res.repaired else None
    return plan_from_jobs(JobGraph(problem, sizes), device_of, res.partial.start, solver=NAME,
                               status="feasible", watch=watch, bound=bound, bound_source=MODULE_DP)
