"""Symmetry breaking for groups of identical devices (same type, memory, links and server) and of identical
servers (the same devices position by position, peer links alike).

Interchangeable devices multiply equivalent solutions. We order them by a criterion, each device in a
group at least as loaded as the next: ``tasks`` (number of jobs), ``busy`` (busy time), or ``none``; and, with
``tasks+servers`` or ``busy+servers``, identical servers likewise, each server's devices together at least as loaded as the next server's. Both
orders hold at once: swap whole servers into order first, then devices inside each server (which leaves the
servers' totals as they were). Any plan can be relabelled so (identical devices and servers are
interchangeable), so no optimum is lost; :func:`relabel` does that to a hint before it is given to a solver.
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, Mapping

CRITERIA = ("tasks", "busy", "none", "tasks+servers", "busy+servers")
# identical servers are ordered only on request ("+servers"): on layered DAGs over two and three servers
# (benchmarks/results/server_symmetry.md) the order made no CP-SAT solve faster and the MILP's and pipeline
# IP's HiGHS solves slower (3 of 24 solves past a 30 s limit that the unordered ones met)


def base(criterion: str) -> str:
    """The per-device criterion of ``criterion``: "tasks", "busy" or "none"."""
    return criterion.split("+")[0]


def groups(problem) -> tuple[tuple[str, ...], ...]:
    """Groups of interchangeable devices (:attr:`diviml.platform.Platform.identical_groups`)."""
    return problem.platform.identical_groups


def server_groups(problem, criterion: str) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Groups of interchangeable servers (:attr:`diviml.platform.Platform.identical_servers`) where
    ``criterion`` orders them ("...+servers"), else none."""
    return problem.platform.identical_servers if criterion.endswith("+servers") else ()


def ordered_pairs(problem, criterion: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(A, B): the devices of A together at least as loaded as those of B, as the symmetry order asks: each
    identical device against the next, and with "+servers" each identical server (all its devices) against
    the next. The one list every model's symmetry constraints are written from."""
    if base(criterion) == "none":
        return []
    pairs = [((a,), (b,)) for g in groups(problem) for a, b in zip(g, g[1:])]
    return pairs + [(a, b) for g in server_groups(problem, criterion) for a, b in zip(g, g[1:])]


def relabel_by_score(device_of: Mapping[Hashable, str], groups: Iterable[tuple[str, ...]],
                     score: Callable[[str], float],
                     servers: Iterable[tuple[tuple[str, ...], ...]] = ()) -> dict[Hashable, str]:
    """Permute whole ``servers`` (groups of servers, each its devices in order) so that their devices' summed
    ``score`` is non-increasing along each group, then devices inside each group likewise (ties keep the
    order): the one relabelling every solver's hint goes through.

    >>> relabel_by_score({"a": "gpu0", "b": "gpu1", "c": "gpu1"}, [("gpu0", "gpu1")], {"gpu0": 1, "gpu1": 2}.get)
    {'a': 'gpu1', 'b': 'gpu0', 'c': 'gpu0'}
    >>> relabel_by_score({"a": "s0cpu", "b": "s1gpu"}, [], {"s1gpu": 1}.get, [(("s0cpu", "s0gpu"), ("s1cpu", "s1gpu"))])
    {'a': 's1cpu', 'b': 's0gpu'}
    """
    origin: dict[str, str] = {}  # device now -> the device it was
    for g in servers:
        order = sorted(range(len(g)), key=lambda k: (-sum(score(d) or 0.0 for d in g[k]), k))
        for new, old in enumerate(order):
            origin.update(zip(g[new], g[old]))
    moved = {d: now for now, d in origin.items()}
    device_of = {j: moved.get(d, d) for j, d in device_of.items()}
    def now_score(device: str) -> float:
        return score(origin.get(device, device)) or 0.0
    mapping: dict[str, str] = {}
    for group in groups:
        ranked = sorted(group, key=lambda d: (-now_score(d), group.index(d)))
        mapping.update(zip(ranked, group))
    return {j: mapping.get(d, d) for j, d in device_of.items()}


def relabel(device_of: Mapping[Hashable, str], problem, criterion: str,
            weight: Callable[[Hashable, str], float]) -> dict[Hashable, str]:
    """Permute devices inside each group so that the criterion (jobs, or their ``weight``) is non-increasing
    along the group."""
    if base(criterion) == "none":
        return dict(device_of)
    score: dict[str, float] = {}
    for j, d in device_of.items():
        score[d] = score.get(d, 0.0) + (1.0 if base(criterion) == "tasks" else weight(j, d))
    return relabel_by_score(device_of, groups(problem), lambda d: score.get(d, 0.0),
                            server_groups(problem, criterion))
