"""The Viterbi join over a chain of modules for one batch split (a step per module)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

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
class Counts:
    """What a walk's module solves came to: the join adds to it, the driver sums the walks, the plan's note and
    stats read it (:meth:`stats`)."""
    solves: int = 0
    optimal: int = 0  # proven: optimal, or proven unable to improve on a state (cutoff, late)
    heft: int = 0  # CP-SAT found nothing: the first schedule was kept
    dominated: int = 0  # states dropped because another one dominated them
    cut_off: int = 0  # solves ended by their cutoff: proven not to improve on a state already reached
    late: int = 0  # of those, by the deadlines of the jobs read later (see solve_late)
    guided: int = 0  # solves started from an earlier module's schedule
    twins: int = 0  # solves of modules without their constants, for the DP on bounds

    def __iadd__(self, other: Counts) -> Counts:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def stats(self) -> dict[str, float]:
        return {"module_solves": float(self.solves), "module_solves_optimal": float(self.optimal),
                "module_solves_heft": float(self.heft), "dominated_states": float(self.dominated),
                "module_solves_cut_off": float(self.cut_off), "module_solves_late": float(self.late),
                "module_solves_guided": float(self.guided)}


@dataclass
class JoinResult:
    partial: Partial | None
    counts: Counts = field(default_factory=Counts)
    repaired: bool = False
    lower: float = 0.0
    share_bound: bool = False  # some solve ended unproven at a limit below module_time_limit
    out_of_time: tuple[int, int] | None = None  # (module it stopped before, modules) when the time ran out
    needed: float | None = None  # where it gave up early: the seconds it would have needed at its pace


@dataclass(frozen=True)
class Candidate:
    """A state's partial schedule with one exit option for the module: what a solve's answer extends."""
    key: tuple  # the state
    partial: Partial  # its partial schedule, constants hoisted
    tasks: tuple[str, ...]  # the module's tasks left to solve
    option: tuple[str, ...] | None  # the exit devices asked for (None: free)
    release_abs: dict  # (job, device) -> earliest start, absolute
    origin: float  # what the solve's times are relative to


def exit_options(problem: Problem, exit_task: str, copies: int) -> list[tuple[str, ...] | None]:
    devices = problem.allowed_devices[exit_task]
    uniform = [tuple([d] * copies) for d in devices]
    return uniform if copies == 1 else uniform + [None]


# a join is given up once it has had this share of its time, is not halfway, and at its pace would need this many
# times its time: it cannot end, and its plan is all or nothing (GPT-3 over six-servers at 60 s: 74 of 289 modules
# when the time ran out, its two workers taking the cores from the baselines and the bound beside it). A join
# behind its time gives its later steps less (a step's share is of the time left), hence the wide margin (against
# 3x the time left, joins of googlenet's batch splits were given up a module before their end)
GIVE_UP_AFTER = 0.1
GIVE_UP_PACE = 2.5
GIVE_UP_MODULES = 3  # walked before its pace is judged: the first carries the pool's start


def join(problem: Problem, chain: Chain, sizes: tuple[int, ...], pool: Pool, watch: Stopwatch, *,
          memory_binds: bool, module_time_limit: float, seed: int, progress, label: str,
          bounds: bool = False, scale: float = 1.0) -> JoinResult:
    """The Viterbi walk over the chain for one batch split (``memory_binds``: track memory budgets;
    ``bounds``: the DP on the module solves' bounds bounds the optimum, see :func:`chain_bounds`).

    Each step gets a share of the time left in proportion to its module's size, times ``scale``, spread
    over the solves the pool runs side by side (and never more than the time left). A join whose pace shows that
    it cannot end in time is given up (:data:`GIVE_UP_PACE`)."""
    began = time.perf_counter()
    look = Lookahead(problem, chain, sizes)
    states: dict = {(): Partial(memory_left={d.name: d.memory_bytes for d in problem.platform.devices})}
    result = JoinResult(None)
    n = len(chain.modules)
    remaining = total = sum(len(m.tasks) for m in chain.modules)
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
        before = result.counts.optimal, result.counts.solves
        # chain bounds hold only where memory cannot bind, so the repair below never runs with them
        new_states = step(problem, i, module, sizes, states, pool, limit, time.time() + watch.left, seed,
                           memory_binds, look, result, bounds)
        if limit < module_time_limit and result.counts.optimal - before[0] < result.counts.solves - before[1]:
            result.share_bound = True
        if not new_states and watch.expired:  # the solves asked after the deadline were not worked out
            result.out_of_time = (i + 1, n)
            return result
        if not new_states and memory_binds:
            # no state can hold this module: place the rest ignoring memory, and repair at the end
            memory_binds, result.repaired = False, True
            new_states = step(problem, i, module, sizes, states, pool, limit, time.time() + watch.left, seed,
                               memory_binds, look, result, bounds)
        if not new_states:
            return result
        states = new_states
        spent = time.perf_counter() - began
        needed = spent * total / max(total - remaining, 1)
        if (i + 1 >= GIVE_UP_MODULES and spent > GIVE_UP_AFTER * watch.limit and needed > GIVE_UP_PACE * watch.limit
                and remaining > total / 2):
            result.out_of_time, result.needed = (i + 2, n), needed
            return result
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
    tests whether any schedule ends each of them its tail before the cutoff (:func:`solve_late`), and only
    then runs as above: most end there (densenet121: 107 of 108, 2.2 s of CPU down to 0.4 s). Solving with
    those deadlines instead would cut off as many but find other schedules, and steered the Viterbi join
    elsewhere (randwire-ba-s0's plan fell back to HEFT's, 1.3% worse); the test alone changes no plan.

    Where the chain bounds the optimum (``bounds``) and the module keeps constants that :func:`hoist` could
    not place early, each solve has a twin without them, for the DP on bounds only: the optimum may run a
    constant long before its module, so the module's span there is at least the optimum of the module
    without its constants (their outputs already everywhere), not of the module with them."""
    first, _ = origin_terms(problem, module.tasks, sizes, look.constants)
    tails = {(t, l): look.after((t, l), index) for t in module.tasks for l in range(len(sizes))
             if look.last_module[t] > index}
    series_tail = _series_tail(problem, module, sizes, tails)
    new_states: dict = {}
    lowest: dict = {}  # state -> the least lower bound over the ways into it (the DP on bounds)
    ranked_keys = list(states)  # best estimate first (see _undominated)
    for batch in (ranked_keys[:1], ranked_keys[1:]):
        requests, candidates, settled, twins = [], [], [], []
        for key in batch:
            partial, tasks = hoist(problem, states[key], module, sizes, first, look, index, memory_binds)
            unconstant, release_abs, origin, fixed = _inputs(problem, partial, tasks, sizes, first, look, index, bounds)
            release = {k: v - origin for k, v in release_abs.items() if v - origin > 0}
            capacity = dict(partial.memory_left) if memory_binds else None
            for option in exit_options(problem, module.exit, len(sizes)):
                candidate = Candidate(key, partial, tasks, option, release_abs, origin)
                reached = new_states[option].estimate if option in new_states else None
                if reached is not None and fixed >= reached:
                    settled.append((candidate, Answer(None, None, "cutoff"),
                                    critical_path(problem, unconstant or tasks, sizes, release)))
                    continue
                only = pins(problem, tasks, sizes, partial, module.exit, option)
                # the new partial's estimate is at least its makespan, and at a series exit its makespan
                # plus the exit's tail: a module schedule that cannot end sooner cannot improve on it
                cutoff = None if reached is None else reached - origin - (series_tail or 0.0)
                late = {j: v for j, v in tails.items() if j[0] in tasks}
                requests.append(Request(tasks, sizes, release, only, capacity, limit, deadline, seed, cutoff,
                                        late if cutoff is not None and series_tail is None else None))
                candidates.append(candidate)
                twins.append(None if unconstant is None else Request(
                    unconstant, sizes, {k: v for k, v in release.items() if k[0][0] not in look.constants},
                    {j: v for j, v in only.items() if j[0] not in look.constants}, None, limit, deadline, seed))
        answered = _answers(pool, candidates, requests, twins, result.counts) + settled
        for candidate, answer, bound in answered:
            _extend(problem, candidate, answer, bound, sizes, module, memory_binds, look, index, result.counts,
                    new_states, lowest)
    for state, p in new_states.items():
        p.lower = lowest[state]
    return _undominated(problem, sizes, new_states, bounds, memory_binds, result.counts)


def _inputs(problem: Problem, partial: Partial, tasks: tuple[str, ...], sizes, first: frozenset, look: Lookahead,
            index: int, bounds: bool) -> tuple[tuple[str, ...] | None, dict, float, float]:
    """What the module's solves after ``partial`` start from: the module without its constants where its bound
    solves need them (else None), each job's absolute release per device, the origin the solves are timed
    from, and what the partial alone sets its successors' estimates to (its makespan, its open tensors' tails)."""
    unconstant = tuple(t for t in tasks if t not in look.constants)
    if not bounds or not any(takes_time(problem, t) for t in tasks if t in look.constants):
        unconstant = None
    release_abs = releases(problem, [(t, l) for t in tasks for l in range(len(sizes))], sizes, partial)
    origin = (min(v for ((t, _), _), v in release_abs.items() if t in first)
              - origin_terms(problem, tasks, sizes, look.constants)[1])
    fixed = max([partial.makespan] + [partial.finish[j] + look.after(j, index) for j in partial.open
                                      if look.last_module[j[0]] > index])
    return unconstant, release_abs, origin, fixed


def _series_tail(problem: Problem, module, sizes, tails: dict) -> float | None:
    """Where the exit ends the module (every other task feeds it) and alone is read later, with the same tail
    for every copy: that tail (the state's estimate is then the exit's end plus it); else None."""
    if (set(tails) <= {(module.exit, l) for l in range(len(sizes))} and len(set(tails.values())) <= 1
            and all(problem.graph.successors[t] for t in module.tasks if t != module.exit)):
        return max(tails.values(), default=0.0)
    return None


def _answers(pool: Pool, candidates: list[Candidate], requests: list[Request], twins: list[Request | None],
             counts: Counts) -> list[tuple[Candidate, Answer, float]]:
    """The pool's answers to ``requests`` (one per candidate, and their twins), each with the bound the DP on bounds reads: its
    twin's where there is a twin, its own otherwise. Twins are counted here, the rest by :func:`_extend`."""
    answers = pool.map(requests + [t for t in twins if t is not None])
    answers, twin_answers = answers[:len(requests)], iter(answers[len(requests):])
    twin_of = [None if t is None else next(twin_answers) for t in twins]
    solved = sum(t is not None for t in twin_of)
    counts.twins += solved
    counts.solves += solved
    counts.optimal += sum(t is not None and t.status == "optimal" for t in twin_of)
    return [(c, a, (t or a).bound) for c, a, t in zip(candidates, answers, twin_of)]


def _extend(problem: Problem, candidate: Candidate, answer: Answer, bound: float, sizes, module,
            memory_binds: bool, look: Lookahead, index: int, counts: Counts, new_states: dict, lowest: dict) -> None:
    """Count the answer, and keep the candidate's partial extended by it where it is the best into its exit
    state (``lowest``: the least bound into each state, for the DP on bounds)."""
    counts.solves += 1
    counts.optimal += answer.status in ("optimal", "cutoff", "late")
    counts.heft += answer.status == "heft"
    counts.cut_off += answer.status in ("cutoff", "late")
    counts.late += answer.status == "late"
    counts.guided += answer.guided
    partial = candidate.partial
    lower = partial.lower + (candidate.origin - partial.makespan) + bound
    if answer.device_of is None:
        if candidate.option in lowest and answer.status != "infeasible":  # its cutoff's bound (or none) counts
            lowest[candidate.option] = min(lower, lowest[candidate.option])
        return
    nxt = advance(problem, partial, candidate.tasks, sizes, candidate.release_abs, answer, memory_binds, look, index)
    state = tuple(nxt.device_of[(module.exit, l)] for l in range(len(sizes)))
    lowest[state] = min(lower, lowest.get(state, lower))
    if state not in new_states or nxt.estimate < new_states[state].estimate:
        new_states[state] = nxt


def _undominated(problem: Problem, sizes, new_states: dict, bounds: bool, memory_binds: bool,
                 counts: Counts) -> dict:
    """The new states by estimate, best first, less those another one dominates; one per exit device is the
    exact DP for one copy, with several copies the best few."""
    ranked = sorted(new_states.items(), key=lambda kv: kv[1].estimate)
    kept: list = []
    for state, p in ranked:
        if not any(dominates(problem, sizes, q, p, bounds, memory_binds) for _, q in kept):
            kept.append((state, p))
    counts.dominated += len(ranked) - len(kept)
    beam = len(problem.platform.devices) + 1
    return dict(kept[:beam])


def plan_of(problem: Problem, sizes, res: JoinResult, bounds: bool, watch: Stopwatch,
             notes: list) -> Plan | None:
    """The join's plan (memory repaired where it had to be), or None with a note saying why there is none."""
    if res.partial is None:
        if res.needed is not None:
            stopped, modules = res.out_of_time
            notes.append(f"the join was given up before module {stopped} of {modules} ({len(sizes)} sub-batch(es)): "
                         f"at its pace it would have needed {res.needed:.0f} s; no plan from it")
        elif res.out_of_time is not None:
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
