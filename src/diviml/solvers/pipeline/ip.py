"""Exact pipeline (max-load) partitioning as an integer program (NeurIPS 2020), HiGHS or Gurobi.

Over co-location classes (see :mod:`.common`) and devices:
``x[c,d]`` binary, one device per class; for every producer k (a task whose output reaches another class)
and non-host device d, ``out[k,d] >= x[class(k),d] - x[c',d]`` and ``in[k,d] >= x[c',d] - x[class(k),d]``
for each consuming class c' (its output leaves d once / enters d once), where a consumer or producer on a
peer of d counts as on d; on a platform of several servers, ``net[k,d]`` (the output comes over the network
into d, host CPUs too) and over each peer link ``peer[k,a,c]`` (charged on a and c), exactly as the simulator
charges a placement (:func:`diviml.simulate.pipeline_loads`); load of d = compute + those costs <= T
(GPipe: forward and backward loads against T_f and T_b, objective T_f + T_b); memory per device;
contiguity when asked (per device: ``z >= x``, z propagates along forward edges, and no forward edge
re-enters the set from a node outside it that the set reaches); symmetry breaking for identical devices (and,
with ``+servers``, identical servers).
Warm-started from the best of the DP, the greedy fill, the chain, the layer split, the work MILP's counts and the
layer patterns, polished; never returns anything worse.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from ...bounds import EXACT_DP, IP
from ...plan import Plan
from ...problem import Problem
from ...simulate import pipeline_loads
from .. import PROVEN_GAP
from ..baselines import greedy, local_search
from ..engines.linear import LinearModel, solve_linear
from ..engines.plans import VALIDATE_S_PER_PART, Stopwatch, make_plan, plans_of
from ..engines.symmetry import CRITERIA, base, groups, ordered_pairs, relabel_by_score, server_groups
from . import dp as pipeline_dp
from .chain import split_chain
from .common import Contracted
from .counts import split_counts
from .improve import polished, relieved
from .layers import split_layers
from .patterns import split_patterns

NAME = "ip"
POLISHED = 2  # warm starts polished, the best first


def build(problem: Problem, contracted: Contracted, symmetry: str, unit: float = 1.0):
    """The IP with loads multiplied by ``unit`` (chosen so values are O(1000), clear of solver tolerances).

    In phases: x[c, d] class c on device d (exactly one); T[phase] the max load; each device's compute
    load; o/i[k, d] producer k's output hopped out of / into d, on d's load; loads below T; memory;
    contiguity (z[c, d]: c reached from d; r[d, e]: d reaches e's classes, p[d] d's place in the order of
    the stages); symmetry between identical devices."""
    gpipe = problem.is_training and problem.objective.training == "gpipe"
    phases = ("forward", "backward") if gpipe else ("all",)
    m = LinearModel()
    devices = [d.name for d in problem.platform.devices]
    x = _assignment(m, problem, contracted, devices)
    T = {ph: m.var(0.0, cost=1.0) for ph in phases}

    def phase_of(task_id: str) -> str:
        return problem.graph.by_id[task_id].phase if gpipe else "all"

    load = {(d, ph): [] for d in devices for ph in phases}
    for c, members in enumerate(contracted.members):
        for d in devices:
            if (c, d) in x:
                for t in members:
                    load[d, phase_of(t)].append((x[c, d], problem.time(t, d) * unit))
    comm = _communication(m, problem, contracted, devices, x, load, phase_of, unit)
    for (d, ph), terms in load.items():
        m.row(terms + [(T[ph], -1.0)], upper=0.0)
    _memory(m, problem, contracted, x)
    z = _contiguity(m, contracted, devices, x) if problem.objective.contiguous else {}
    stages = _stage_order(m, contracted, devices, x, z) if z else {}
    if symmetry != "none":
        _symmetry(m, problem, contracted, x, load, phases, symmetry)
    return m, {"x": x, "T": T, "comm": comm, "z": z, "stages": stages, "unit": unit}


def _assignment(m: LinearModel, problem: Problem, contracted: Contracted, devices: list[str]) -> dict:
    """x[c, d]: class c on device d, where every member may run there; exactly one device per class."""
    x = {}
    for c, members in enumerate(contracted.members):
        for d in devices:
            if all(d in problem.allowed_devices[t] for t in members):
                x[c, d] = m.binary()
        m.row([(x[c, d], 1.0) for d in devices if (c, d) in x], 1.0, 1.0)
    return x


def _communication(m: LinearModel, problem: Problem, contracted: Contracted, devices: list[str], x: dict,
                   load: dict, phase_of, unit: float) -> list[tuple]:
    """Indicators of producer k's output crossing devices, each on the loads the simulator charges it to
    (:func:`diviml.simulate.pipeline_loads`), in the producer's phase: staged out of d through host memory (a
    consumer on neither d nor a peer of d), staged into d (the producer on neither), over the network into d
    (the producer on neither d's server nor a peer of d), and over a peer link a -> c (on a and on c).

    Each is written ``v >= [producer in/out of P] + [a consumer in/out of C] - 1`` and returned as (v, k, P,
    producer inside, C, consumer inside), from which :func:`hint_vector` sets it for a placement."""
    graph, platform = problem.graph, problem.platform
    by_name = platform.by_name
    peers = {d: sorted(c for c in devices if frozenset((d, c)) in platform.peer_links) for d in devices}
    alone = {d: frozenset({d}) for d in devices}
    near = {d: frozenset({d, *peers[d]}) for d in devices}  # d and its peers: no staging between them
    local = {d: frozenset(c for c in devices if by_name[c].server == by_name[d].server) | near[d] for d in devices}
    network = platform.network if len({by_name[d].server for d in devices}) > 1 else None
    out = []
    for k, (t, pc, consumers) in enumerate(contracted.producers):
        task = graph.by_id[t]
        charges = []  # (P, producer inside, C, consumer inside, [(device, cost)])
        for d in devices:
            hop = platform.hop_time(task, by_name[d]) * unit
            if hop > 0:
                charges.append((alone[d], True, near[d], False, [(d, hop)]))
                charges.append((near[d], False, alone[d], True, [(d, hop)]))
            if network is not None:
                charges.append((local[d], False, alone[d], True, [(d, network.time(task.output_bytes) * unit)]))
            for c in peers[d]:
                cost = platform.peer_links[frozenset((d, c))].time(task.output_bytes) * unit
                charges.append((alone[d], True, alone[c], True, [(d, cost), (c, cost)]))
        for producer_set, p_in, consumer_set, c_in, costs in charges:
            if all(cost <= 0 for _, cost in costs):
                continue
            v = m.var(0.0, 1.0)
            for c2 in consumers:
                terms, rhs = [(v, 1.0)], -1.0 + (not p_in) + (not c_in)
                terms += [(x[pc, a], -1.0 if p_in else 1.0) for a in producer_set if (pc, a) in x]
                terms += [(x[c2, b], -1.0 if c_in else 1.0) for b in consumer_set if (c2, b) in x]
                m.row(terms, rhs)
            for d, cost in costs:
                load[d, phase_of(t)].append((v, cost))
            out.append((v, k, producer_set, p_in, consumer_set, c_in))
    return out


def _memory(m: LinearModel, problem: Problem, contracted: Contracted, x: dict) -> None:
    """The weights of the classes on a device fit, where they could overflow it: in shares of its memory, for
    coefficients in bytes (10^8 beside loads of 10^3) led Gurobi 13's presolve to a wrong optimum (fuzzing: a
    24-task contiguous split "optimal" at twice the DP's)."""
    graph = problem.graph
    for dev in problem.platform.devices:
        if math.isfinite(dev.memory_bytes) and dev.memory_bytes > 0:
            terms = [(x[c, dev.name], sum(graph.by_id[t].memory_bytes for t in ms) / dev.memory_bytes)
                     for c, ms in enumerate(contracted.members) if (c, dev.name) in x]
            terms = [(v, w) for v, w in terms if w > 0]
            if terms and sum(w for _, w in terms) > 1.0:
                m.row(terms, upper=1.0)


def _contiguity(m: LinearModel, contracted: Contracted, devices: list[str], x: dict) -> dict:
    """z[c, d]: class c reached from device d's classes; nothing reached re-enters d (contiguous splits)."""
    z = {}
    for d in devices:
        for c in range(contracted.num_classes):
            z[c, d] = m.var(0.0, 1.0)
            if (c, d) in x:
                m.row([(z[c, d], 1.0), (x[c, d], -1.0)], 0.0)
        for a, b in contracted.forward_edges:
            m.row([(z[b, d], 1.0), (z[a, d], -1.0)], 0.0)
            m.row([(z[a, d], 1.0)] + ([(x[b, d], 1.0)] if (b, d) in x else [])
                  + ([(x[a, d], -1.0)] if (a, d) in x else []), upper=1.0)
    return z


def _stage_order(m: LinearModel, contracted: Contracted, devices: list[str], x: dict, z: dict) -> dict:
    """The stages run in one order, every tensor flowing forward: r[d, e] >= 1 where a class on e is reached
    from d's classes, and then p[e] >= p[d] + 1 (places 0 .. K-1). Convex sets alone may pass tensors both
    ways between two devices (x1 -> x2, y1 -> y2 with x1, y2 on one and x2, y1 on the other), which no order
    of the stages runs and the DP over ideals never makes."""
    k = len(devices)
    place = {d: m.var(0.0, k - 1.0) for d in devices}
    reach = {}
    for d in devices:
        for e in devices:
            if d == e:
                continue
            reach[d, e] = m.var(0.0, 1.0)
            for c in range(contracted.num_classes):
                if (c, e) in x:
                    m.row([(x[c, e], 1.0), (z[c, d], 1.0), (reach[d, e], -1.0)], upper=1.0)
            m.row([(place[e], 1.0), (place[d], -1.0), (reach[d, e], -float(k))], lower=1.0 - k)
    return {"reach": reach, "place": place}


def _symmetry(m: LinearModel, problem: Problem, contracted: Contracted, x: dict, load: dict, phases,
              symmetry: str) -> None:
    """Identical devices, and identical servers, in order of their classes (``tasks``) or load (``busy``)."""
    classes = range(contracted.num_classes)
    for first, second in ordered_pairs(problem, symmetry):
        if base(symmetry) == "tasks":
            m.row([(x[c, d], 1.0) for d in first for c in classes if (c, d) in x]
                  + [(x[c, d], -1.0) for d in second for c in classes if (c, d) in x], 0.0)
        else:
            m.row([(v, w) for d in first for ph in phases for v, w in load[d, ph]]
                  + [(v, -w) for d in second for ph in phases for v, w in load[d, ph]], 0.0)


def hint_vector(m: LinearModel, maps, problem: Problem, contracted: Contracted, placement: dict[str, str],
                symmetry: str) -> list[float]:
    placement = _relabel(problem, placement, symmetry)
    device_of_class = {c: placement[ms[0]] for c, ms in enumerate(contracted.members)}
    v = [0.0] * m.num_vars
    for (c, d), i in maps["x"].items():
        v[i] = 1.0 if device_of_class[c] == d else 0.0
    for var, k, producer_set, p_in, consumer_set, c_in in maps["comm"]:
        _, pc, consumers = contracted.producers[k]
        v[var] = 1.0 if (device_of_class[pc] in producer_set) == p_in and any(
            (device_of_class[c] in consumer_set) == c_in for c in consumers) else 0.0
    loads = pipeline_loads(problem, placement)
    for ph, i in maps["T"].items():
        v[i] = maps["unit"] * (max(loads.forward.values()) if ph == "forward" else max(loads.backward.values())
                               if ph == "backward" else max(loads.total.values()))
    reached: dict[str, set[str]] = {}  # device -> the other devices whose classes its classes reach
    if maps["z"]:
        import networkx as nx
        g = nx.DiGraph(list(contracted.forward_edges))
        for d in {d for (_, d) in maps["z"]}:
            reach = {c for c, dev in device_of_class.items() if dev == d}
            for c in list(reach):
                if c in g:
                    reach |= nx.descendants(g, c)
            for (c, dd), i in maps["z"].items():
                if dd == d:
                    v[i] = 1.0 if c in reach else 0.0
            reached[d] = {device_of_class[c] for c in reach} - {d}
    if maps["stages"]:
        ahead = nx.DiGraph([(d, e) for d, es in reached.items() for e in es])
        ahead.add_nodes_from(maps["stages"]["place"])
        try:
            for k, d in enumerate(nx.lexicographical_topological_sort(ahead)):
                v[maps["stages"]["place"][d]] = float(k)
        except nx.NetworkXUnfeasible:  # a start whose stages pass tensors round a cycle: not a start
            pass
        for (d, e), i in maps["stages"]["reach"].items():
            v[i] = 1.0 if e in reached.get(d, ()) else 0.0
    return v


def _relabel(problem: Problem, placement: dict[str, str], symmetry: str) -> dict[str, str]:
    """Permute identical devices so the hint satisfies the symmetry order (tasks, or busy time)."""
    if base(symmetry) == "none":
        return placement
    total = pipeline_loads(problem, placement).total
    count = Counter(placement.values())
    return relabel_by_score(placement, groups(problem),
                            count.__getitem__ if base(symmetry) == "tasks" else total.get,
                            server_groups(problem, symmetry))


def warm_start(problem: Problem, watch: Stopwatch, load_bound: float | None = None) -> Plan | None:
    """The best of the DP's contiguous split (in a fifth of the time; optimal for its order of device
    classes), the greedy fill, the chain of tasks cut over the servers (:mod:`.chain`), for a model of
    layers the best split of whole layers (:mod:`.layers`), the work MILP's counts dealt out
    (:mod:`.counts`, where the bound solved it), and for a model of repeated layers their copies by patterns
    (:mod:`.patterns`, in half the time left, the other tasks as the best of the others has them: GPT-3 over
    six-servers 1.685 s where the chain gave 1.737 s); where none of them places the model, the local search's
    random restarts, in a quarter of the time left (fuzzing: a 41-task contiguous split over two servers with
    tight memory that local search placed in 2 s, and the IP, given no start, did not). On GPT-3's pipeline over six servers the chain's
    1.737 s beat the greedy fill's 1.783 s and the DP's 1.993 s. The best :data:`POLISHED` of them are then
    polished (:mod:`.polish`), each in a tenth of the time left: the best start is not always the best polished
    (GPT-3's decoding step over six-servers, before the counts kept views with their producers: the counts'
    0.827 s polished to 0.805 s, the chain's 0.862 s to 0.799 s)."""
    contiguous = replace(problem, objective=replace(problem.objective, contiguous=True))
    candidates = [lambda: greedy.fill_plan(contiguous, Stopwatch(max(watch.left / 4, 0.5)), load_bound),
                  lambda: split_chain(problem, Stopwatch(max(watch.left / 10, 0.5)), solver=NAME),
                  lambda: split_layers(problem, Stopwatch(max(watch.left / 10, 0.5)), solver=NAME),
                  lambda: split_counts(problem, Stopwatch(max(watch.left / 10, 0.5)), solver=NAME)]
    if not (problem.is_training and problem.objective.training == "gpipe"):
        candidates.insert(0, lambda: pipeline_dp.solve(contiguous, time_limit=max(watch.left / 5, 0.5)))
    found: list[Plan] = []
    for candidate in candidates:  # past the limit only until one places the model: each takes seconds at scale
        if not (found and watch.expired):
            found += plans_of([candidate])
    if found and not watch.expired:  # the other tasks of a model of repeated layers as the best start has them
        best = min(found, key=lambda plan: plan.objective)
        found += plans_of([lambda: split_patterns(problem, Stopwatch(max(watch.left / 2, 0.5)), best, solver=NAME)])
    starts = sorted(found, key=lambda plan: plan.objective)[:POLISHED]
    if not starts:  # memory and contiguity left the constructive starts nothing: random restarts may place it
        starts = plans_of([lambda: local_search.solve(problem, time_limit=max(watch.left / 4, 0.5))])
    return min((polished(problem, replace(start, objective_kind="pipeline"), Stopwatch(watch.left / 10))
                if not watch.expired else start for start in starts), key=lambda plan: plan.objective, default=None)


# building the IP and handing it to HiGHS, per column of the estimate (:func:`_columns`): 5.2 s + 1.5 s for
# GPT-3's 349,035 columns on six servers (estimated 412,542) on this 2-core machine; twice that, for a busy one
SECONDS_PER_COLUMN = 3e-5
# of the time left: an IP that takes more to build leaves HiGHS less than twice that for its search, too little
# to improve on its warm start (GPT-3's pipeline over six-servers: 486,247 columns, estimated 16.5 s, built with
# 33 s left, and HiGHS handed back its hint after 23 s), so the time goes to polishing the warm start instead
BUILD_SHARE = 1 / 3


def _columns(problem: Problem, contracted: Contracted) -> int:
    """At most the IP's columns: per class and device x, out and in (and net between servers), and two per
    peer link; for contiguous splits z and the rows that order the stages (counted as columns)."""
    platform = problem.platform
    per_device = 4 if len({d.server for d in platform.devices}) > 1 else 3
    k = len(platform.devices)
    if problem.objective.contiguous:  # z, and a row per class and pair of devices ordering the stages
        per_device += k
    return len(contracted.members) * (per_device * k + 2 * len(platform.peer_links))


def _kept_polished(problem: Problem, start: Plan, columns: int, watch: Stopwatch) -> Plan:
    """The warm start polished in the time left, where building the IP of about ``columns`` columns would
    take more than :data:`BUILD_SHARE` of it."""
    left = watch.left
    start = polished(problem, start, Stopwatch(max(left * 0.9 - VALIDATE_S_PER_PART * len(problem.graph), 0.1)))
    start = relieved(problem, start, Stopwatch(max(watch.left * 0.9 - VALIDATE_S_PER_PART * len(problem.graph), 0.1)))
    return make_plan(problem, placement=start.placement, solver=NAME, status="timeout", watch=watch, notes=[
        f"kept the warm start, polished in the time left: the IP (about {columns:,} columns) would take more "
        f"than {BUILD_SHARE:.0%} of the {left:.1f} s left to build and hand over; a longer --time-limit runs it",
        *start.notes])


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, engine: str = "auto",
          symmetry: str = "busy", workers: int | None = None, progress=None) -> Plan:
    if symmetry not in CRITERIA:
        from ...errors import InputError
        raise InputError(f"unknown symmetry criterion {symmetry!r}: choose {', '.join(CRITERIA)}")
    watch = Stopwatch(time_limit)
    contracted = Contracted(problem, fuse_cycles=problem.objective.contiguous)
    from ...bounds import lower_bound
    # first, while there is time: it is kept with the problem, and every plan below (the warm starts' too) reads it
    generic = lower_bound(problem, watch.left / 4)
    start = warm_start(problem, watch, generic)
    if start is not None and start.objective <= generic + PROVEN_GAP * start.objective:  # optimal, as statuses go
        return make_plan(problem, placement=start.placement, solver=NAME, status="optimal", watch=watch, notes=[
            f"the warm start ({start.solver}) meets the lower bound: optimal without the IP", *start.notes])
    if (start is not None and problem.objective.contiguous and start.status == "optimal"
            and start.bound_source == EXACT_DP):  # the DP solves the same contiguous problem, to optimality
        return make_plan(problem, placement=start.placement, solver=NAME, status="optimal", watch=watch,
                         bound=start.bound, bound_source=EXACT_DP, notes=[
                             "the DP over ideals proved this contiguous split optimal: no IP needed", *start.notes])
    scale = start.objective if start else generic
    columns = _columns(problem, contracted)
    if start is not None and columns * SECONDS_PER_COLUMN > watch.left * BUILD_SHARE:
        return _kept_polished(problem, start, columns, watch)
    m, maps = build(problem, contracted, symmetry, unit=1000.0 / scale if scale > 0 else 1.0)
    hint = hint_vector(m, maps, problem, contracted, start.placement, symmetry) if start else None
    if progress:
        progress(f"  ip: {m.num_vars} variables, {len(m.rows)} rows, warm start "
                 f"{start.objective:.6g} ({start.solver})" if start else "  ip: no warm start")
    # kept back for reading the answer back (HiGHS itself stops at its limit, :mod:`..engines.highs`): 1 s at
    # 350,000 columns (GPT-3 on six servers)
    reserve = 0.2 + 3e-6 * m.num_vars
    result = solve_linear(m, time_limit=max(watch.left - reserve, 0.1), seed=seed, hint=hint, engine=engine,
                          threads=workers)
    notes = [result.note] if result.note else []
    stats = {"ip_variables": float(m.num_vars), "ip_rows": float(len(m.rows)), "ip_engine": result.engine}
    if result.status == "infeasible":
        from ...errors import InfeasibleError
        raise InfeasibleError("no split satisfies the memory, device and contiguity constraints: relax them")
    bound = max(result.bound, 0.0) / maps["unit"] if math.isfinite(result.bound) else 0.0
    candidates = []
    if result.values is not None:
        device_of_class: dict[int, str] = {}  # each class on its device of largest x (one pass over x)
        for (c, d), i in maps["x"].items():
            if c not in device_of_class or result.values[i] > result.values[maps["x"][c, device_of_class[c]]]:
                device_of_class[c] = d
        placement = {t: device_of_class[c] for t, c in contracted.class_of.items()}
        status = "optimal" if result.status == "optimal" else "timeout"
        candidates.append(make_plan(problem, placement=placement, solver=NAME, status=status, watch=watch,
                                    bound=bound, bound_source=IP, notes=notes, stats=stats))
    if start is not None:
        candidates.append(make_plan(problem, placement=start.placement, solver=NAME,
                                    status="optimal" if result.status == "optimal" else "timeout", watch=watch,
                                    bound=bound, bound_source=IP,
                                    notes=[*notes, "kept the warm start", *start.notes], stats=stats))
    if not candidates:
        from ...errors import InfeasibleError
        raise InfeasibleError(f"the IP found no split within {time_limit:g} s: raise the time limit")
    return min(candidates, key=lambda p: p.objective)
