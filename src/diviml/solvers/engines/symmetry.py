"""Symmetry breaking for groups of identical devices (same type, memory, links and server).

Interchangeable devices multiply equivalent solutions. We order them by a criterion, each device in a
group at least as loaded as the next: ``tasks`` (number of jobs), ``busy`` (busy time), or ``none``.
Any plan can be relabelled to satisfy the order (identical devices are interchangeable), so no optimum is
lost; :func:`relabel` does that to a hint before it is given to a solver.
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, Mapping

CRITERIA = ("tasks", "busy", "none")


def groups(problem) -> tuple[tuple[str, ...], ...]:
    """Groups of interchangeable devices (:attr:`diviml.platform.Platform.identical_groups`)."""
    return problem.platform.identical_groups


def relabel_by_score(device_of: Mapping[Hashable, str], groups: Iterable[tuple[str, ...]],
                     score: Callable[[str], float]) -> dict[Hashable, str]:
    """Permute devices inside each group so that ``score`` is non-increasing along the group (ties keep the
    group's order): the one relabelling every solver's hint goes through.

    >>> relabel_by_score({"a": "gpu0", "b": "gpu1", "c": "gpu1"}, [("gpu0", "gpu1")], {"gpu0": 1, "gpu1": 2}.get)
    {'a': 'gpu1', 'b': 'gpu0', 'c': 'gpu0'}
    """
    mapping: dict[str, str] = {}
    for g in groups:
        ranked = sorted(g, key=lambda d: (-score(d), g.index(d)))
        mapping.update(zip(ranked, g))
    return {j: mapping.get(d, d) for j, d in device_of.items()}


def relabel(device_of: Mapping[Hashable, str], problem, criterion: str,
            weight: Callable[[Hashable, str], float]) -> dict[Hashable, str]:
    """Permute devices inside each group so that the criterion (jobs, or their ``weight``) is non-increasing
    along the group."""
    if criterion == "none":
        return dict(device_of)
    score: dict[str, float] = {}
    for j, d in device_of.items():
        score[d] = score.get(d, 0.0) + (1.0 if criterion == "tasks" else weight(j, d))
    return relabel_by_score(device_of, groups(problem), lambda d: score.get(d, 0.0))
