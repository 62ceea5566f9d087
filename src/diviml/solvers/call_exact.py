"""Exact placement under the NeurIPS 2020 latency model (``call-latency``), solved by CP-SAT.

Every accelerator d makes at most q calls U = (d, j), j < q, one after another; a call takes its outside
inputs in, computes its tasks and sends out the outputs that leave it; host CPU tasks run as soon as their
inputs are in host memory, all in parallel (see :func:`diviml.simulate.call_latency`). Variables:

- ``a[t,U]`` task t runs in call U; ``h[t,c]`` t runs on host CPU c;
- ``inp[u,U]`` / ``out[u,U]``: u's output enters / leaves call U (one hop each, whoever consumes it);
- ``z[t,U]``: t is reached from U, so that every call is a convex node set (contiguity);
- start ``S[U]``, completion ``C[t]`` (when t's output is in host memory), ready time ``R[t]``, makespan Z.

Constraints: duration D[U] = sum p(t,d) a[t,U] + sum hop(u,d) (inp[u,U] + out[u,U]); S[d,j+1] >= S[d,j] +
D[d,j]; C[t] >= S[U] + D[U] if a[t,U]; R[t] >= C[u] on every edge (u,t); C[t] >= R[t] + sum p(t,c) h[t,c];
S[U] >= C[u] if inp[u,U]; Z >= C[t] and Z >= the end of every accelerator's last call; memory per
accelerator and host; co-location; identical accelerators ordered by their first task in topological order.
Redundant, for the bound: every task completes no earlier than its fastest path from a source, and every
accelerator's calls fit below Z. Hinted with the best of greedy and best-device; never returns worse.

Time scale as in :mod:`.cpsat`: integer ticks of UB / resolution, durations and hops rounded down, so the
integer model is a relaxation and its bound in ticks is a valid bound. The plan is re-timed by the
simulator, which cuts each accelerator's tasks into calls itself; with q = 1 these are the model's calls.
With q > 1 the simulator may cut them differently: its value is then the plan's, and the bound stays valid
(no cut of any placement beats the model's optimum).
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

from ortools.sat.python import cp_model

from ..bounds import CP_SAT, serial_upper_bound
from ..errors import DivimlError, InfeasibleError, InputError
from ..graph import longest_paths
from ..plan import Plan
from ..problem import Problem
from ..simulate import call_latency
from .baselines import best_device, greedy
from .engines.cpsat import Progress, seconds_for
from .engines.plans import Stopwatch, best_of, make_plan
from .engines.symmetry import groups, relabel_by_score

NAME = "call-exact"


def host_options(problem: Problem) -> dict[str, list[str]]:
    """The hosts each task may need in the model: hosts run their tasks in parallel and are reached at the
    same hop, so a task on a host whose memory never binds (all it may run fits) is as well off on the
    fastest such host; only hosts faster than that one stay beside it (all hosts where memory binds on every
    host, or for a task co-located with others, which cannot move alone).

    >>> from diviml import Device, Objective, Platform, Task, TaskGraph
    >>> hosts = (Device("big", "cpu", is_host=True), Device("fast", "xeon", 1e9, is_host=True),
    ...          Device("also", "cpu", is_host=True))
    >>> graph = TaskGraph.create([Task("t", {"cpu": 2.0, "xeon": 1.0}, memory_bytes=2e9)], [])
    >>> host_options(Problem(graph, Platform(hosts), Objective("call-latency")))
    {'t': ['fast', 'big']}
    """
    graph, platform = problem.graph, problem.platform
    hosts = [d.name for d in platform.devices if d.is_host]
    held = {c: sum(graph.by_id[t].memory_bytes for t in graph.topological_order if c in problem.allowed_devices[t])
            for c in hosts}
    free = {c for c in hosts if held[c] <= platform.by_name[c].memory_bytes}
    grouped = {t for members in problem.colocation_groups.values() if len(members) > 1 for t in members}
    options = {}
    for t in graph.topological_order:
        allowed = [c for c in hosts if c in problem.allowed_devices[t]]
        roomy = min((c for c in allowed if c in free), key=lambda c: problem.time(t, c), default=None)
        if roomy is not None and t not in grouped:
            allowed = [c for c in allowed if c == roomy or problem.time(t, c) < problem.time(t, roomy)]
        options[t] = allowed
    return options


class CallModel:
    """The CP-SAT model of one problem, its variables, and the conversions between plans and its values."""

    def __init__(self, problem: Problem, upper: float, resolution: int = 1_000_000):
        self.problem = problem
        graph, platform = problem.graph, problem.platform
        self.tick = max(upper, 1e-300) / resolution
        self.horizon = resolution
        self.order = list(graph.topological_order)
        self.position = {t: i for i, t in enumerate(self.order)}
        self.accelerators = [d.name for d in platform.devices if not d.is_host]
        self.q = problem.objective.max_calls
        self.units = [(d, j) for d in self.accelerators for j in range(self.q)]
        self.hosts = [d.name for d in platform.devices if d.is_host]
        self.host_options = host_options(problem)
        self.producers = [u for u in self.order if graph.successors[u]]
        self.m = cp_model.CpModel()
        # the model in phases: where each task runs, which tensors cross each call, when calls and tasks end
        self._assignment()
        self._colocation()
        self._crossings()
        self._timing()
        self._memory()
        self._symmetry()
        self.m.minimize(self.Z)

    def _lit(self, t: str, U) -> object:
        """Whether task ``t`` runs in call ``U`` (0 where it may not)."""
        return self.a.get((t, U), 0)

    def _assignment(self) -> None:
        """a[t, U]: task t in call U (an accelerator and its j-th call); h[t, c]: t on host c; exactly one."""
        m, allowed = self.m, self.problem.allowed_devices
        self.a = {(t, U): m.new_bool_var(f"a[{t},{U[0]},{U[1]}]") for t in self.order for U in self.units
                  if U[0] in allowed[t]}
        self.h = {(t, c): m.new_bool_var(f"h[{t},{c}]") for t in self.order for c in self.host_options[t]}
        for t in self.order:
            lits = ([self.a[t, U] for U in self.units if (t, U) in self.a]
                    + [self.h[t, c] for c in self.host_options[t]])
            if not lits:
                raise InfeasibleError(f"task {t!r} may run on no device of this platform")
            m.add_exactly_one(lits)

    def _colocation(self) -> None:
        """One call (or one host) for every member of a co-location group."""
        for members in self.problem.colocation_groups.values():
            first, *rest = members
            for t in rest:
                pairs = [(self.a.get((first, U)), self.a.get((t, U))) for U in self.units]
                pairs += [(self.h.get((first, c)), self.h.get((t, c))) for c in self.hosts]
                for x, y in pairs:
                    if x is not None and y is not None:
                        self.m.add(x == y)
                    elif x is not None or y is not None:
                        self.m.add((x if x is not None else y) == 0)

    def _crossings(self) -> None:
        """inp/out[u, U]: u's output hopped into / out of call U; z[t, U]: t reached from U, so that nothing
        reached from a call re-enters it (contiguity)."""
        m, graph, lit = self.m, self.problem.graph, self._lit
        self.inp, self.out, self.z = {}, {}, {}
        for U in self.units:
            for u in self.producers:
                self.inp[u, U] = m.new_bool_var(f"inp[{u},{U[0]},{U[1]}]")
                self.out[u, U] = m.new_bool_var(f"out[{u},{U[0]},{U[1]}]")
                for v in graph.successors[u]:
                    m.add(self.inp[u, U] + lit(u, U) >= lit(v, U))
                    m.add(self.out[u, U] + lit(v, U) >= lit(u, U))
            for t in self.order:
                self.z[t, U] = m.new_bool_var(f"z[{t},{U[0]},{U[1]}]")
                m.add(self.z[t, U] >= lit(t, U))
            for u, v in graph.edges:
                m.add(self.z[v, U] >= self.z[u, U])
                m.add(lit(v, U) + self.z[u, U] - lit(u, U) <= 1)

    def _timing(self) -> None:
        """S[U], D[U]: a call's start and duration (its tasks and hops); C[t], R[t]: a task's end and when its
        inputs are ready; Z: the makespan, after every call, every sink and each accelerator's calls in turn."""
        m, graph, platform, ticks, H = self.m, self.problem.graph, self.problem.platform, self.ticks, self.horizon
        problem = self.problem
        self.S = {U: m.new_int_var(0, H, f"S[{U[0]},{U[1]}]") for U in self.units}
        self.C = {t: m.new_int_var(0, H, f"C[{t}]") for t in self.order}
        self.R = {t: m.new_int_var(0, H, f"R[{t}]") for t in self.order}
        self.Z = m.new_int_var(0, H, "makespan")
        self.D = {}
        for U in self.units:
            d = platform.by_name[U[0]]
            terms = [ticks(problem.time(t, U[0])) * self.a[t, U] for t in self.order if (t, U) in self.a]
            for u in self.producers:
                hop = ticks(platform.hop_time(graph.by_id[u], d))
                if hop > 0:
                    terms += [hop * self.inp[u, U], hop * self.out[u, U]]
            self.D[U] = m.new_int_var(0, H, f"D[{U[0]},{U[1]}]")
            m.add(self.D[U] == sum(terms))
        for d in self.accelerators:
            for j in range(1, self.q):
                m.add(self.S[d, j] >= self.S[d, j - 1] + self.D[d, j - 1])
            m.add(self.Z >= self.S[d, self.q - 1] + self.D[d, self.q - 1])
            m.add(self.Z >= sum(self.D[d, j] for j in range(self.q)))
        for (t, U), x in self.a.items():
            m.add(self.C[t] >= self.S[U] + self.D[U]).only_enforce_if(x)
        for (u, U), x in self.inp.items():
            m.add(self.S[U] >= self.C[u]).only_enforce_if(x)
        for u, v in graph.edges:
            m.add(self.R[v] >= self.C[u])
        fastest = {t: min([ticks(problem.time(t, U[0])) for U in self.units if (t, U) in self.a]
                          + [ticks(problem.time(t, c)) for c in self.host_options[t]]) for t in self.order}
        head = longest_paths(self.order, graph.predecessors.__getitem__, fastest.__getitem__, release=lambda t: 0)
        for t in self.order:
            m.add(self.C[t] >= head[t])
            m.add(self.C[t] >= self.R[t] + sum(ticks(problem.time(t, c)) * self.h[t, c]
                                               for c in self.host_options[t]))
            if not graph.successors[t]:
                m.add(self.Z >= self.C[t])

    def _memory(self) -> None:
        """Each accelerator holds the weights of the tasks in its calls, and each host those of the tasks it
        runs, where that can bind (a device's literals over all its calls)."""
        graph, platform = self.problem.graph, self.problem.platform
        on: dict[str, list[tuple[str, object]]] = {d: [] for d in self.accelerators + self.hosts}
        for (t, U), x in self.a.items():
            on[U[0]].append((t, x))
        for (t, c), x in self.h.items():
            on[c].append((t, x))
        for d, pairs in on.items():
            limit, weight = platform.by_name[d].memory_bytes, {t: graph.by_id[t].memory_bytes for t, _ in pairs}
            if math.isfinite(limit) and sum(weight.values()) > limit:  # every task it may run would not fit
                self.m.add(sum(int(math.ceil(weight[t])) * x for t, x in pairs if weight[t] > 0)
                           <= int(math.floor(limit)))

    def _symmetry(self) -> None:
        """Identical accelerators: each one's first task comes after the previous one's first task
        (prefix[t, d]: how many of the first tasks up to t run on d)."""
        m, lit, n = self.m, self._lit, len(self.order)
        self.groups = [g for g in (tuple(d for d in g if d in self.accelerators) for g in groups(self.problem))
                       if len(g) > 1]
        self.prefix = {}
        for g in self.groups:
            for d in g[:-1]:
                for i, t in enumerate(self.order):
                    self.prefix[t, d] = m.new_int_var(0, n, f"prefix[{t},{d}]")
                    here = sum(lit(t, (d, j)) for j in range(self.q))
                    m.add(self.prefix[t, d] == here + (self.prefix[self.order[i - 1], d] if i else 0))
            for d1, d2 in zip(g, g[1:]):
                for i, t in enumerate(self.order):
                    used = [self.a[t, (d2, j)] for j in range(self.q) if (t, (d2, j)) in self.a]
                    if used:
                        m.add(sum(used) <= (self.prefix[self.order[i - 1], d1] if i else 0))

    def ticks(self, x: float) -> int:
        return int(math.floor(x / self.tick + 1e-9))

    def placement(self, solver: cp_model.CpSolver) -> dict[str, str]:
        out = {}
        for t in self.order:
            hosts = [c for c in self.host_options[t] if solver.value(self.h[t, c])]
            out[t] = hosts[0] if hosts else next(U for U in self.units
                                                 if (t, U) in self.a and solver.value(self.a[t, U]))[0]
        return out

    def relabel(self, placement: dict[str, str]) -> dict[str, str]:
        """Identical accelerators renamed so that their first tasks come in the order the symmetry asks."""
        first = {d: min((self.position[t] for t, dd in placement.items() if dd == d), default=math.inf)
                 for g in self.groups for d in g}
        return relabel_by_score(placement, self.groups, lambda d: -first[d])

    def add_hint(self, placement: dict[str, str]) -> bool:
        """Hint the placement's assignment (its calls as the simulator cuts them); False if it has none here."""
        graph, options = self.problem.graph, self.host_options
        placement = {t: max(options[t], key=lambda c: self.problem.time(t, c))  # the roomy host: as fast, no worse
                     if d in self.hosts and d not in options[t] and options[t] else d
                     for t, d in self.relabel(placement).items()}
        try:
            schedule = call_latency(self.problem, placement)
        except DivimlError:
            return False
        unit_of, made = {}, {d: 0 for d in self.accelerators}
        for call in schedule.calls:
            if call.device in made:
                for t in call.tasks:
                    unit_of[t] = (call.device, made[call.device])
                made[call.device] += 1
        if any(k > self.q for k in made.values()):
            return False
        for t in self.order:
            if (t, unit_of.get(t, placement[t])) not in (self.a if t in unit_of else self.h):
                return False  # a device the task may not use: not a point of this model
        for (t, U), x in self.a.items():
            self.m.add_hint(x, unit_of.get(t) == U)
        for (t, c), x in self.h.items():
            self.m.add_hint(x, t not in unit_of and placement[t] == c)
        members = {U: {t for t, W in unit_of.items() if W == U} for U in self.units}
        for (u, U), x in self.inp.items():
            inside = u in members[U]
            self.m.add_hint(x, not inside and any(w in members[U] for w in graph.successors[u]))
            self.m.add_hint(self.out[u, U], inside and any(w not in members[U] for w in graph.successors[u]))
        for U in self.units:
            reached = set(members[U])
            for t in self.order:
                if t in reached or any(u in reached for u in graph.predecessors[t]):
                    reached.add(t)
                self.m.add_hint(self.z[t, U], t in reached)
        return True


def warm_start(problem: Problem, watch: Stopwatch, workers: int | None) -> Plan | None:
    """The better of greedy and best-device (each given a small share of the time); with q > 1 calls also
    this solver's plan for one call (half the time), which q > 1 allows, on a model q times smaller."""
    attempts = [lambda module=module: module.solve(problem, time_limit=max(watch.left / 10, 0.5))
                for module in (greedy, best_device)]
    if problem.objective.max_calls > 1:
        one = replace(problem, objective=replace(problem.objective, max_calls=1))
        attempts.append(lambda: solve(one, time_limit=max(watch.left / 2, 0.5), workers=workers))
    return best_of(attempts)


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, workers: int | None = None,
          progress=None) -> Plan:
    if problem.objective.kind != "call-latency":
        raise InputError(f"solver {NAME!r} handles objective call-latency only")
    watch = Stopwatch(time_limit)
    start = warm_start(problem, watch, workers)
    model = CallModel(problem, start.objective if start and start.objective > 0 else serial_upper_bound(problem))
    hinted = start is not None and model.add_hint(start.placement)
    if progress:
        progress(f"  call-exact: {len(model.units)} calls, warm start "
                 + (f"{start.objective:.6g} ({start.solver}{'' if hinted else ', not a hint'})" if start else "none"))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(seconds_for(model.m, watch.left), 0.05)
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = workers or max(os.cpu_count() or 1, 1)
    code = solver.solve(model.m, Progress(progress, model.tick)) if progress else solver.solve(model.m)
    stats = {"tick": model.tick, "cp_sat_branches": float(solver.num_branches)}
    if code == cp_model.INFEASIBLE and start is None:
        raise InfeasibleError("no placement satisfies the memory, device and call constraints: allow more calls "
                              "per accelerator or more memory")
    found = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    status = "optimal" if code == cp_model.OPTIMAL else "timeout"
    bound = max(solver.best_objective_bound, 0) * model.tick if found else 0.0
    notes, candidates, rejected = [], [], None
    if found:
        try:
            candidates.append(make_plan(problem, placement=model.placement(solver), solver=NAME, status=status,
                                        watch=watch, bound=bound, bound_source=CP_SAT, stats=stats))
        except DivimlError as exc:  # the simulator cut the calls differently (q > 1) and rejects them
            rejected = f"the model's placement was not kept: {exc}"
            notes.append(rejected)
    if start is not None:
        candidates.append(make_plan(problem, placement=start.placement, solver=NAME, status=status, watch=watch,
                                    bound=bound, bound_source=CP_SAT,
                                    notes=notes + [f"kept the warm start ({start.solver})"], stats=stats))
    if not candidates:
        raise InfeasibleError(rejected or f"no placement found within {time_limit:g} s: raise the time limit")
    return min(candidates, key=lambda p: p.objective)
