"""The pipeline's work bound with its hops: what it costs a device to run a task away from its neighbours.

The work LP lets GPT-3's memory-free attention products run on other devices than the weights around them,
for free; a plan pays the hops of the 100 MB tensors they read and write, more than they take to compute.
Here devices of one type are one kind (their loads and memory summed: any plan maps onto that), ``x[t,k]`` is
the share of task t on kind k, and a tensor that enters kind k from another kind (``y[u,k] >= x[v,k] - x[u,k]``
for each consumer v of u) or leaves it (``z[u,k] >= x[u,k] - x[v,k]``) costs the kind the least hop any of its
devices pays for it (a peer link's time where one joins it to another kind; 0 on a host CPU):

    sum_t p[t,k] x[t,k] + sum_u in[u,k] y[u,k] + out[u,k] z[u,k] <= (devices of kind k) * T,
    sum_t m_t x[t,k] <= memory of kind k,   sum_k x[t,k] = 1,   minimise T.

On a platform of several servers, a tensor read on kind k from a kind *far* from it (no device of the one
shares a server or a peer link with a device of the other) crosses the network into the reader's server, which
the simulator charges to the reader: ``w[u,k] >= x[v,k] + sum_{j far from k} x[u,j] - 1`` costs kind k the
tensor's network time (GPT-3 over six-servers: every GPU type is alone on its servers, so a layer's attention
cannot leave its A100s for the idle V100s for its hops alone). Transfers between devices of one kind count as a
floor: each device takes a tensor in and sends one out, at its cheapest (:func:`._hop_floors.floors_of`; ``H[k]`` is at least
that and at least the kind's hops above). The network between kinds that share a server somewhere is left out
(a relaxation). A task of no time and no
memory that is its producer's only reader, and whose tensor costs no more to move than the producer's (a view),
is merged into that producer first: moving it there never raises a kind's load, so the bound stands.

A large model is cut at series points into parts, identical ones (a model's repeated layers) solved once with
their count m, x then the share over the copies. A tensor from one copy to the next (the residual stream
between layers) still costs its crossings, summed over the copies: at least ``m (x[v,k] - x[u,k]) - (m - P)``
into k for P adjacent pairs of copies (:func:`_link_rows`). GPT-3's pipeline over six-servers: 1.6342 ->
1.6378 s; tensors between parts of other kinds, or skipping a copy, are left free.
"""

from __future__ import annotations

import math
from collections import Counter
from time import perf_counter

from ..graph import TaskGraph
from ..problem import Problem
from ._hop_floors import ALL, cheapest_hop, floors_of
from ._lp import _KeyedLP, _unit, server_kinds
from ._packing import packable_memory
from ._series import MAX_TASKS, series_points
from ._simple import _unit_costs

__all__ = ["hop_work_bound"]

MAX_PERIOD = 32  # segments grouped into one part at most: the fewer cuts, the fewer tensors left free
MAX_PART_TASKS = 1000  # tasks in the distinct parts together: the LP's size (Llama 2 70B: 1 s; at 3,000, 9 s)
MAX_GROUPINGS = 4  # ways to cut the graph tried, while the time lasts: the bound is the best of them


def hop_work_bound(problem: Problem, time_limit: float | None = None) -> float:
    """min T of the LP above, or 0 where it does not apply (objectives other than the pipeline's summed
    loads) or does not finish within ``time_limit``."""
    if problem.objective.kind != "pipeline" or (problem.is_training and problem.objective.training == "gpipe"):
        return 0.0
    stop = None if time_limit is None else perf_counter() + time_limit
    kinds = server_kinds(problem)
    hop = _hop_costs(problem, kinds)
    far = _far_kinds(problem, kinds) if problem.platform.network is not None else {}
    owner = _merged_views(problem, hop)
    unit = _unit(_unit_costs(problem))
    floors: dict[str, float] | None = None
    best = 0.0
    for parts in _groupings(problem, owner, hop, stop):
        if stop is not None and perf_counter() > stop:
            break
        floors = floors_of(problem, kinds) if floors is None else floors
        value = _solve(problem, kinds, far, owner, parts, hop, unit, floors, stop)
        best = max(best, value / unit * (1 - 1e-6) if value is not None else 0.0)
    return best


def _solve(problem: Problem, kinds: dict[str, list[str]], far: dict[str, list[str]], owner: dict[str, str], parts,
           hop, unit: float, floors: dict[str, float], stop: float | None) -> float | None:
    """The LP over ``parts`` (one of each kind, with its count), in the scaled unit; None past ``stop``. A kind's
    hops are at least its floor (:func:`._hop_floors.floors_of`) as well as those its tensors to and from other kinds cost."""
    lp = _KeyedLP()
    lp.col(("T",))
    load: dict[str, dict] = {k: {} for k in kinds}
    held: dict[str, dict] = {k: {} for k in kinds}
    for n, (part, count, links) in enumerate(parts):
        if stop is not None and perf_counter() > stop:
            return None  # building the LP alone outlasts its share: drop it
        _part_rows(problem, lp, kinds, far, owner, set(part), count, hop, unit, load, held, tag=n)
        _link_rows(problem, lp, kinds, far, owner, links, count, hop, unit, load, tag=n)
    memory = {k: packable_memory(problem, devices, None if stop is None else stop - perf_counter())
              for k, devices in kinds.items()}  # what whole tasks can fill, with the validator's tolerance
    scale = max((t.memory_bytes for t in problem.graph.tasks), default=0.0) or 1.0
    for k, devices in kinds.items():
        lp.col(("H", k))  # the kind's hops: those to and from other kinds, and at least its floor
        lp.ub({**{key: v for key, v in load[k].items() if key[0] != "x"}, ("H", k): -1.0})
        if floors.get(k, 0.0) > 0:
            lp.ub({("H", k): -1.0}, -floors[k] * unit)
        lp.ub({**{key: v for key, v in load[k].items() if key[0] == "x"}, ("H", k): 1.0,
               ("T",): -float(len(devices))})
        if math.isfinite(memory[k]) and held[k]:
            lp.ub({key: v / scale for key, v in held[k].items()}, memory[k] / scale)
    if floors.get(ALL, 0.0) > 0:
        lp.ub({("H", k): -1.0 for k in kinds}, -floors[ALL] * unit)
    return lp.minimise(("T",), None if stop is None else stop - perf_counter())


def _hop_costs(problem: Problem, kinds: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Per task and kind, the least a device of the kind pays to take the task's output in from another kind,
    or to send it out to one: a hop through host memory, or a peer link's time where one reaches another kind
    (charged on both ends)."""
    platform = problem.platform
    kind_of = {d: k for k, names in kinds.items() for d in names}
    peers: dict[str, list] = {}
    for pair, link in platform.peer_links.items():
        a, b = tuple(pair)
        if kind_of[a] != kind_of[b]:
            peers.setdefault(a, []).append(link)
            peers.setdefault(b, []).append(link)
    return {t.id: {k: min(cheapest_hop(problem, t, d, peers) for d in names) for k, names in kinds.items()}
            for t in problem.graph.tasks}


def _merged_views(problem: Problem, hop: dict[str, dict[str, float]]) -> dict[str, str]:
    """Each task's representative: a task of no time and no memory anywhere that is its producer's only
    reader, allowed wherever the producer is, and whose own output costs no more to move on any kind, joins
    the producer's representative (moving it there saves the producer's tensor what its own may cost
    instead, on every kind)."""
    graph = problem.graph
    owner: dict[str, str] = {}
    for t in graph.topological_order:
        preds = graph.predecessors[t]
        owner[t] = t
        if len(preds) != 1 or graph.by_id[t].memory_bytes != 0:
            continue
        (u,) = preds
        if (len(graph.successors[u]) == 1 and all(problem.time(t, d) == 0 for d in problem.allowed_devices[t])
                and set(problem.allowed_devices[t]) >= set(problem.allowed_devices[u])
                and all(hop[t][k] <= hop[u][k] for k in hop[t])
                and graph.by_id[t].output_bytes <= graph.by_id[u].output_bytes):  # its network time too
            owner[t] = owner[u]
    return owner


def _groupings(problem: Problem, owner: dict[str, str], hop: dict[str, dict[str, float]], stop: float | None):
    """Ways to cut the graph into parts (each as one part of each kind with its count), best first: after
    series points, runs of ``period`` segments from ``phase`` on, those whose cuts leave the least hop cost
    free within :data:`MAX_PART_TASKS` tasks of distinct parts (at most :data:`MAX_GROUPINGS`; which cut
    gives the LP the most is not known before it is solved). The whole graph where it is that small itself;
    nothing where the graph is too large to find its series points."""
    segments = _segments(problem, owner)
    if segments is None:
        return
    if sum(map(len, segments)) <= MAX_PART_TASKS:
        yield [([t for seg in segments for t in seg], 1, {})]
        return
    ids: dict[tuple, int] = {}
    kind = [ids.setdefault(_signature(problem, seg, owner), len(ids)) for seg in segments]
    dropped = _cut_costs(problem, segments, hop)
    ranked = []
    for period in range(1, MAX_PERIOD + 1):
        if stop is not None and perf_counter() > stop:
            break
        for phase in range(min(period, len(segments))):
            starts = ([0] if phase else []) + list(range(phase, len(segments), period))
            groups = [range(a, b) for a, b in zip(starts, starts[1:] + [len(segments)])]
            distinct = {tuple(kind[i] for i in g): g for g in groups}
            size = sum(len(segments[i]) for g in distinct.values() for i in g)
            if size <= MAX_PART_TASKS:
                ranked.append((sum(dropped[g[0]] for g in groups[1:]), size, period, phase, groups))
    ranked.sort(key=lambda r: r[:4])
    for *_, groups in ranked[:MAX_GROUPINGS]:
        keys = [tuple(kind[i] for i in g) for g in groups]
        tasks = [[t for i in g for t in segments[i]] for g in groups]
        copies: dict[tuple, list[list[str]]] = {}
        for key, group_tasks in zip(keys, tasks):
            copies.setdefault(key, []).append(group_tasks)
        links: dict[tuple, Counter] = {key: Counter() for key in copies}
        for key, after, here, there in zip(keys, keys[1:], tasks, tasks[1:]):
            if key == after:
                _link(problem.graph, here, there, copies[key][0], links[key])
        yield [(same[0], len(same), links[key]) for key, same in copies.items()]


def _link(graph: TaskGraph, copy: list[str], after: list[str], first: list[str], links: Counter) -> None:
    """Count in ``links``, by the first copy's names (``first``), each tensor from ``copy`` to the copy right
    ``after`` it whose producer no task but those of ``after`` reads (the copies list their tasks alike)."""
    here, there = {t: i for i, t in enumerate(copy)}, {t: i for i, t in enumerate(after)}
    for u in copy:
        readers = graph.successors[u]
        if readers and all(v in there for v in readers):
            for v in readers:
                links[first[here[u]], first[there[v]]] += 1


def _segments(problem: Problem, owner: dict[str, str]) -> list[list[str]] | None:
    """The tasks in topological order cut after each series point (a merged view with its producer), or None
    where the graph is too large for the series points' bitsets."""
    if len(problem.graph) > MAX_TASKS:
        return None
    order, _, series = series_points(problem)
    segment_of: dict[str, int] = {}
    count = 0
    for t in order:
        segment_of[t] = segment_of[owner[t]] if owner[t] != t else count
        if t in series:
            count += 1
    segments: list[list[str]] = [[] for _ in range(count + 1)]
    for t in order:
        segments[segment_of[t]].append(t)
    return [seg for seg in segments if seg]


def _cut_costs(problem: Problem, segments: list[list[str]], hop: dict[str, dict[str, float]]) -> list[float]:
    """Per segment, the hops a cut before it leaves free: each tensor crossing there at its dearest kind."""
    segment_of = {t: i for i, seg in enumerate(segments) for t in seg}
    last_reader: dict[str, int] = {}
    for u, v in problem.graph.edges:
        last_reader[u] = max(last_reader.get(u, -1), segment_of[v])
    change = [0.0] * (len(segments) + 1)
    for u, last in last_reader.items():
        if last > segment_of[u]:
            cost = max(hop[u].values(), default=0.0)
            change[segment_of[u] + 1] += cost
            change[last + 1] -= cost
    crossing, running = [], 0.0
    for i in range(len(segments)):
        running += change[i]
        crossing.append(running)
    return crossing


def _signature(problem: Problem, segment: list[str], owner: dict[str, str]) -> tuple:
    """What the LP sees of a segment, tasks by their place in it: times per device, memory, hop costs, owners
    and the edges inside it (two segments of one signature give the same rows)."""
    graph = problem.graph
    local = {t: i for i, t in enumerate(segment)}
    devices = [d.name for d in problem.platform.devices]
    rows = tuple((tuple(problem.time(t, d) if d in problem.allowed_devices[t] else None for d in devices),
                  graph.by_id[t].memory_bytes, graph.by_id[t].output_bytes, graph.by_id[t].transfer_time,
                  local.get(owner[t], -1)) for t in segment)
    edges = tuple(sorted((local[u], local[v]) for u in segment for v in graph.successors[u] if v in local))
    return rows, edges


def _part_rows(problem: Problem, lp: _KeyedLP, kinds: dict[str, list[str]], far: dict[str, list[str]],
               owner: dict[str, str], part: set[str], count: int, hop: dict[str, dict[str, float]], unit: float,
               load: dict, held: dict, tag: int) -> None:
    """One part's columns (x per representative and kind, y/z per tensor read inside it and kind, w per tensor
    read on a kind from one ``far`` from it), its representatives' rows, and its compute, hops and memory,
    ``count`` times, on each kind's rows."""
    graph, network = problem.graph, problem.platform.network
    kind_of = {d: k for k, names in kinds.items() for d in names}
    allowed: dict[str, set[str]] = {}
    for t in part:
        here = {kind_of[d] for d in problem.allowed_devices[t]}
        r = owner[t]
        allowed[r] = allowed[r] & here if r in allowed else here
    for r, ks in allowed.items():
        for k in sorted(ks):
            lp.col(("x", tag, r, k))
        lp.eq({("x", tag, r, k): 1.0 for k in ks})
    for t in part:
        r = owner[t]
        for k in allowed[r]:
            key = ("x", tag, r, k)
            least = min(problem.time(t, d) for d in kinds[k] if d in problem.allowed_devices[t])
            load[k][key] = load[k].get(key, 0.0) + count * least * unit
            if graph.by_id[t].memory_bytes > 0:
                held[k][key] = held[k].get(key, 0.0) + count * graph.by_id[t].memory_bytes
    for u in part:
        readers = {owner[v] for v in graph.successors[u] if v in part and owner[v] != owner[u]}
        for k in kinds:
            if readers:
                _crossing(lp, load[k], (tag, u, owner[u]), readers, k, count * hop[u][k] * unit)
            if readers and far.get(k) and network is not None:
                cost = count * network.time(graph.by_id[u].output_bytes) * unit
                _network(lp, load[k], (tag, u, owner[u]), readers, k, far[k], cost)


def _far_kinds(problem: Problem, kinds: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per kind, the kinds none of whose devices shares a server or a peer link with one of its devices: a
    tensor between the two always crosses the network."""
    platform = problem.platform
    servers = {k: {platform.by_name[d].server for d in names} for k, names in kinds.items()}
    kind_of = {d: k for k, names in kinds.items() for d in names}
    linked = {frozenset((kind_of[a], kind_of[b])) for a, b in map(tuple, platform.peer_links)}
    return {k: [j for j in kinds if j != k and not servers[j] & servers[k] and frozenset((j, k)) not in linked]
            for k in kinds}


def _network(lp: _KeyedLP, load: dict, producer: tuple[int, str, str], readers: set[str], k: str, far: list[str],
             cost: float) -> None:
    """The rows that charge kind k the network time of a producer's tensor read on k and made on a kind far
    from k (``w >= x[v,k] + sum_j x[r,j] - 1``, j over the far kinds)."""
    tag, u, r = producer
    sources = {("x", tag, r, j): 1.0 for j in far if lp.has(("x", tag, r, j))}
    targets = [("x", tag, v, k) for v in readers if lp.has(("x", tag, v, k))]
    if cost <= 0 or not sources or not targets:
        return
    lp.col(("w", tag, u, k))
    load[("w", tag, u, k)] = cost
    for target in targets:
        lp.ub({("w", tag, u, k): -1.0, target: 1.0, **sources}, 1.0)


def _crossing(lp: _KeyedLP, load: dict, producer: tuple[int, str, str], readers: set[str], k: str,
              cost: float) -> None:
    """The rows that charge kind k for a producer's tensor (task u of representative r) coming in (a reader
    on k, r elsewhere) and going out (r on k, a reader elsewhere)."""
    tag, u, r = producer
    here = ("x", tag, r, k)

    def x(v: str):
        return ("x", tag, v, k)
    if cost > 0 and any(lp.has(x(v)) for v in readers):
        lp.col(("y", tag, u, k))
        load[("y", tag, u, k)] = cost
        for v in readers:
            if lp.has(x(v)):
                lp.ub({("y", tag, u, k): -1.0, x(v): 1.0, **({here: -1.0} if lp.has(here) else {})})
    if cost > 0 and lp.has(here):
        lp.col(("z", tag, u, k))
        load[("z", tag, u, k)] = cost
        for v in readers:
            lp.ub({("z", tag, u, k): -1.0, here: 1.0, **({x(v): -1.0} if lp.has(x(v)) else {})})


def _link_rows(problem: Problem, lp: _KeyedLP, kinds: dict[str, list[str]], far: dict[str, list[str]],
               owner: dict[str, str], links: Counter, count: int, hop: dict[str, dict[str, float]], unit: float,
               load: dict, tag: int) -> None:
    """The tensors from each copy of a part to the next (``links``: producer, reader -> pairs P of adjacent
    copies that have it), which the part's own rows leave free. Over the m copies a reader on kind k whose
    producer is not sums at least ``m (x[v,k] - x[u,k]) - (m - P)`` crossings into k (the P readers' copies
    hold at least m x[v,k] - (m - P) of them, the producers at most m x[u,k]); out of k, and over the
    network from a kind far from k, likewise. Each crossing costs what one tensor does in the part's rows."""
    graph, network = problem.graph, problem.platform.network
    for (u, v), pairs in links.items():
        ru, rv, left = owner[u], owner[v], float(count - pairs)
        if ru == rv:
            continue
        for k in kinds:
            here, there = ("x", tag, ru, k), ("x", tag, rv, k)
            xu = {here: float(count)} if lp.has(here) else {}
            xv = {there: float(count)} if lp.has(there) else {}
            for name, row in (("Y", {**xv, **{c: -a for c, a in xu.items()}}),
                              ("Z", {**xu, **{c: -a for c, a in xv.items()}})):
                if any(a > 0 for a in row.values()) and hop[u][k] > 0:
                    _add(lp, load[k], (name, tag, u, k), hop[u][k] * unit, row, left)
            farther = {("x", tag, ru, j): float(count) for j in far.get(k, []) if lp.has(("x", tag, ru, j))}
            if xv and farther and network is not None:
                _add(lp, load[k], ("W", tag, u, k), network.time(graph.by_id[u].output_bytes) * unit,
                     {**xv, **farther}, left + count)


def _add(lp: _KeyedLP, load: dict, column: tuple, cost: float, row: dict, rhs: float) -> None:
    """A column of ``cost`` on the kind's load that is at least ``row - rhs`` (and 0)."""
    if not lp.has(column):
        lp.col(column)
        load[column] = cost
    lp.ub({**row, column: -1.0}, rhs)
