"""Optimal contiguous pipeline splits by dynamic programming over ideals (Tarnawski et al., NeurIPS 2020).

The forward graph, with co-location classes contracted, has ideals (down-sets). A contiguous split hands
each device the difference ``J \\ I`` of two nested ideals, so

    dp[J][n] = min over ideals I < J and device classes D with n_D >= 1 of max(dp[I][n - e_D], load_D(J \\ I))

with ``n`` the number of devices of each class still free and ``dp[{}][n] = 0`` (devices may stay idle).
The answer is ``dp[all][counts]``. For each I, the ideals J > I are walked depth-first along a canonical
tree (each J from the J' that lacks J's highest new class), updating compute, memory and the transfer hops
of J \\ I incrementally; subtrees whose compute already exceeds a known plan's value on every device class
are cut. The walk and the update run compiled (:mod:`.dp_kernel`, numba): bert_l-3 training, 51M
pairs, went from 130-196 s in Python to about 4 s. Budgets on ideals and pairs, and the time limit, stop
the run with a clear message instead of exhausting memory or time.
Handles inference and PipeDream training (a device's load = forward + backward); GPipe needs ``ip``.
"""

from __future__ import annotations

import math

import numpy as np

from ...bounds import EXACT_DP, lower_bound
from ...errors import InputError
from ...plan import Plan
from ...problem import Problem
from ..engines.arrays import csr
from ..engines.plans import Stopwatch, make_plan
from .common import Contracted, class_times, device_classes
from .dp_kernel import walk_from

NAME = "dp"
SMALL_GRAPH = 64  # classes; up to this the DP needs no greedy plan's value to cut its walks


class BudgetExceeded(InputError):
    pass


def enumerate_ideals(num: int, edges: set[tuple[int, int]], order: list[int], max_ideals: int, watch: Stopwatch):
    """Ideals as bitmasks (by size), and per ideal its transitions [(position, class, child index)].

    Each ideal keeps the classes that can join it (its frontier): a child's frontier is its parent's less the
    class added, plus that class's successors whose predecessors are now all in. The walk then costs the
    frontier's width per transition, not the number of classes (a 5,000-task layered DAG: 19,284 ideals in
    well under a second, where testing every class of every ideal took 49 s)."""
    pred = [0] * num
    succ: list[list[int]] = [[] for _ in range(num)]
    for a, b in edges:
        pred[b] |= 1 << a
        succ[a].append(b)
    position = {c: i for i, c in enumerate(order)}
    index = {0: 0}
    masks = [0]
    frontier = {0: tuple(c for c in range(num) if pred[c] == 0)}
    level = [0]
    transitions: list[list[tuple[int, int, int]]] = []
    while level:
        nxt = []
        for mask in level:
            out = []
            ready = frontier.pop(mask)
            for c in ready:
                child = mask | (1 << c)
                if child not in index:
                    index[child] = len(masks)
                    masks.append(child)
                    nxt.append(child)
                    frontier[child] = tuple(x for x in ready if x != c) + tuple(
                        s for s in succ[c] if pred[s] & ~child == 0)
                    if len(masks) > max_ideals:
                        raise BudgetExceeded(
                            f"the graph has more than {max_ideals} ideals (down-sets): the DP cannot run within "
                            "its budget: raise --max-ideals or use --solver ip")
                out.append((position[c], c, index[child]))
            out.sort()
            transitions.append(out)
            if watch.expired:
                raise BudgetExceeded("the time limit ran out while enumerating ideals: raise it or use --solver ip")
        level = nxt
    return masks, transitions


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, max_ideals: int = 2_000_000,
          max_pairs: int = 20_000_000_000, progress=None) -> Plan:
    watch = Stopwatch(time_limit)
    if problem.is_training and problem.objective.training == "gpipe":
        raise InputError("the DP handles inference and PipeDream training; for GPipe use --solver ip")
    device_classes(problem)  # a platform it cannot run on is refused before any work (its fallback: 2 s at 3,000 tasks)
    contracted = Contracted(problem, merge_trivial=True)
    upper, fallback = math.inf, None  # small graphs: no cut needed, and finding one costs more than it saves
    if contracted.num_classes > SMALL_GRAPH:
        # the bound first, with a quarter of the time (kept for the plan): computed after a DP that ran out of
        # time it would get none, and a plan would carry only the critical path's (a 99.99% gap at 20k tasks)
        lower_bound(problem, watch.left / 4)
        fallback = _greedy_contiguous(problem, Stopwatch(max(1.0, watch.left / 10)))
        upper = math.inf if fallback is None else fallback[0] * (1 + 1e-9)
    try:
        value, placement, stats = run_dp(problem, contracted, watch, max_ideals, max_pairs, upper, progress)
    except BudgetExceeded as exc:  # out of time or budget: the best plan known, as every solver does
        fallback = fallback or _greedy_contiguous(problem, Stopwatch(1.0))
        if fallback is None:
            raise
        return make_plan(problem, fallback[2], solver=NAME, status="timeout" if watch.expired else "feasible",
                         watch=watch, notes=[f"{exc}; this is the greedy contiguous plan"])
    contiguous = problem.objective.contiguous
    return make_plan(problem, placement=placement, solver=NAME, status="optimal" if contiguous else "feasible",
                     watch=watch, bound=value if contiguous else None, bound_source=EXACT_DP,
                     notes=[] if contiguous else ["optimal among contiguous splits; non-contiguous ones may be better"],
                     stats=stats)


def run_dp(problem: Problem, contracted: Contracted, watch: Stopwatch, max_ideals: int, max_pairs: int,
           upper: float, progress=None) -> tuple[float, dict[str, str], dict]:
    """(optimal contiguous value, placement, stats) over the given contraction; ``upper``: a known plan's
    value, which cuts the walks (see :func:`.dp_kernel.walk_from`)."""
    dclasses = device_classes(problem)
    num = contracted.num_classes
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(range(num))
    g.add_edges_from(contracted.forward_edges)  # acyclic: cycles are fused into one class
    order = list(nx.lexicographical_topological_sort(g))
    masks, transitions = enumerate_ideals(num, contracted.forward_edges, order, max_ideals, watch)
    if progress:
        progress(f"  dp: {num} classes, {len(masks)} ideals")
    times, sizes, hop, produced_by, consumed_by = _class_data(problem, contracted, dclasses)

    # states: devices still free per class, as a mixed-radix index
    nd = len(dclasses)
    counts = [len(dc.devices) for dc in dclasses]
    radix = np.cumprod([1] + [c + 1 for c in counts[:-1]]).astype(np.int64)
    n_states = int(np.prod([c + 1 for c in counts]))
    state_ok = np.array([[(s // radix[d]) % (counts[d] + 1) >= 1 for s in range(n_states)] for d in range(nd)])
    dp = np.full((len(masks), n_states), math.inf)
    dp[0, :] = 0.0
    arg_prev = np.full((len(masks), n_states), -1, dtype=np.int64)
    arg_class = np.full((len(masks), n_states), -1, dtype=np.int8)
    num_prod = len(contracted.producers)
    graph_arrays = (
        *csr(transitions, 3),  # pointers, positions, classes, child ideals
        np.array(times, dtype=np.float64).reshape(nd, num), np.array(sizes, dtype=np.float64),
        np.array([dc.memory for dc in dclasses], dtype=np.float64),
        np.array([any(row) for row in hop]), np.array(hop, dtype=np.float64).reshape(nd, num_prod),
        *csr(produced_by), *csr(consumed_by),
        np.array([pc for _, pc, _ in contracted.producers], dtype=np.int64),
        np.array([len(consumers) for _, _, consumers in contracted.producers], dtype=np.int64),
        state_ok, radix)
    scratch = (np.zeros(num, dtype=np.bool_), np.zeros(num_prod, dtype=np.int64), np.zeros(nd), np.zeros(nd),
               np.zeros(nd, dtype=np.int64), np.zeros(num + 1, dtype=np.int64), np.zeros(num + 1, dtype=np.int64),
               np.zeros(num + 1, dtype=np.int64), np.zeros((num + 1, nd)))
    full, top = len(masks) - 1, n_states - 1
    pairs = 0
    for i in range(len(masks)):
        if watch.expired:
            raise BudgetExceeded(f"the DP ran out of time after {i} of {len(masks)} ideals ({pairs} pairs): raise "
                                 "the time limit")
        if np.isfinite(dp[i]).any():
            pairs += walk_from(i, *graph_arrays, upper, dp, arg_prev, arg_class, *scratch)
        if pairs > max_pairs:
            raise BudgetExceeded(f"the DP passed its budget of {max_pairs} ideal pairs: raise --max-pairs or use "
                                 "--solver ip")
        if progress and i % 5000 == 4999:
            progress(f"  dp: {i + 1}/{len(masks)} ideals, {pairs} pairs at {watch.elapsed:.1f} s")
    value = dp[full, top]
    if not math.isfinite(value):
        from ...errors import InfeasibleError
        raise InfeasibleError("no contiguous split fits the memory limits and device restrictions: raise the "
                              "memory or use --solver ip --no-contiguous")
    placement = _reconstruct(masks, arg_prev, arg_class, radix, dclasses, contracted, full, top)
    return float(value), placement, {"ideals": float(len(masks)), "pairs": float(pairs), "dp_value": float(value)}


def _class_data(problem: Problem, contracted: Contracted, dclasses) -> tuple[list, list, list, list, list]:
    """Per device class each class's time and each producer's hop cost; per class its weights, the producers
    it holds and the producers it reads."""
    graph, num = problem.graph, contracted.num_classes
    times = [class_times(problem, contracted, dc) for dc in dclasses]
    sizes = [sum(graph.by_id[t].memory_bytes for t in ms) for ms in contracted.members]
    hop = []
    for dc in dclasses:
        dev = problem.platform.by_name[dc.devices[0]]
        hop.append([problem.platform.hop_time(graph.by_id[t], dev) for t, _, _ in contracted.producers])
    produced_by: list[list[int]] = [[] for _ in range(num)]
    consumed_by: list[list[int]] = [[] for _ in range(num)]
    for k, (_, pc, consumers) in enumerate(contracted.producers):
        produced_by[pc].append(k)
        for c in consumers:
            consumed_by[c].append(k)
    return times, sizes, hop, produced_by, consumed_by


def _greedy_contiguous(problem: Problem, watch: Stopwatch):
    """(value, factor, parts) of the best contiguous greedy fill, or None: its value cuts hopeless pairs, and
    it is the plan returned when the DP does not finish."""
    from dataclasses import replace

    from ..baselines import greedy
    contiguous = replace(problem, objective=replace(problem.objective, contiguous=True))
    return greedy.best_fill(contiguous, watch)


def _reconstruct(masks, arg_prev, arg_class, radix, dclasses, contracted, j, s) -> dict[str, str]:
    placement: dict[str, str] = {}
    used = [0] * len(dclasses)
    while j != 0:
        i, d = int(arg_prev[j, s]), int(arg_class[j, s])
        diff = masks[j] & ~masks[i]
        device = dclasses[d].devices[used[d]]
        used[d] += 1
        c = 0
        while diff:
            if diff & 1:
                for t in contracted.members[c]:
                    placement[t] = device
            diff >>= 1
            c += 1
        s -= int(radix[d])
        j = i
    return placement
