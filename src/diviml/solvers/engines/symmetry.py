"""Symmetry breaking for groups of identical devices (same type, memory, links and server).

Interchangeable devices multiply equivalent solutions. We order them by a criterion, each device in a
group at least as loaded as the next: ``tasks`` (number of jobs), ``busy`` (busy time), or ``none``.
Any plan can be relabelled to satisfy the order (identical devices are interchangeable), so no optimum is
lost; :func:`relabel` does that to a hint before it is given to a solver.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping

CRITERIA = ("tasks", "busy", "none")


def groups(problem) -> list[tuple[str, ...]]:
    """Groups of identical devices whose members every task treats alike."""
    out = []
    for g in problem.platform.identical_groups:
        out.append(tuple(g))
    return out


def relabel(device_of: Mapping[Hashable, str], problem, criterion: str,
            weight: Callable[[Hashable, str], float]) -> dict[Hashable, str]:
    """Permute devices inside each group so that the criterion is non-increasing along the group."""
    if criterion == "none":
        return dict(device_of)
    mapping: dict[str, str] = {}
    for g in groups(problem):
        score = {d: 0.0 for d in g}
        for j, d in device_of.items():
            if d in score:
                score[d] += 1.0 if criterion == "tasks" else weight(j, d)
        ranked = sorted(g, key=lambda d: (-score[d], g.index(d)))
        mapping.update({old: new for old, new in zip(ranked, g)})
    return {j: mapping.get(d, d) for j, d in device_of.items()}
