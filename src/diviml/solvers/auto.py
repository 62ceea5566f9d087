"""What ``--solver auto`` runs: a rule on what can be seen of a problem before solving it.

The rule was read off ``benchmarks/auto_choice.py`` (results/auto_choice.md), where ``exact``, ``exact``
without decomposition and ``split`` ran at the same time limit (20 s) on layered and randomly wired DAGs and
zoo models: on graphs with series points throughout (layered, 20-320 tasks) exact by pieces and split gave
the same proven plans; on randomly wired DAGs of 48-96 tasks one exact model beat split by 2-6%; at 136-177
tasks (gpt-tiny, resnet50) they tied, and at 198 (googlenet) split was 6-10% better. The table's last column
is this rule's loss against the best of the three.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..problem import Problem
from .engines.modules import detect, piece_sizes

__all__ = ["Features", "features", "choose", "EXACT_TASKS"]

PIPELINE = {"pipeline": "ip", "call-latency": "call-exact"}
EXACT_TASKS = 120  # up to this many tasks (constants not counted) exact is at least as good as split


@dataclass(frozen=True)
class Features:
    """``tasks``: tasks that take part in the schedule (not constants); ``pieces``: the pieces between series
    points that ``exact`` would solve one by one; ``largest_share``: the largest piece's share of ``tasks``;
    ``decomposes``: whether ``exact`` solves by pieces (:func:`.exact.pays_to_decompose`)."""
    tasks: int
    pieces: int
    largest_share: float
    decomposes: bool


def features(problem: Problem) -> Features:
    from . import exact  # exact imports the engines this module is imported beside

    sizes = piece_sizes(detect(problem.graph, 1, cut_large=False))
    tasks = sum(sizes)
    decomposes = exact.pays_to_decompose(problem, detect(problem.graph, exact.PIECE_SIZE, cut_large=False))
    return Features(tasks, len(sizes), max(sizes) / max(tasks, 1), decomposes)


def choose(problem: Problem) -> tuple[str, str]:
    """The solver ``auto`` runs on ``problem`` and why, in words.

    >>> from diviml import Problem, Objective, preset
    >>> from diviml.generators import layered_dag
    >>> choose(Problem(layered_dag(20), preset("paper-server"), Objective("latency")))[0]
    'exact'
    """
    kind = problem.objective.kind
    if kind in PIPELINE:
        return PIPELINE[kind], f"{PIPELINE[kind]} is the exact solver for objective {kind}"
    f = features(problem)
    if f.tasks <= EXACT_TASKS:
        how = "piece by piece between series points" if f.decomposes else "as one model"
        return "exact", (f"{f.tasks} tasks (at most {EXACT_TASKS}): exact solves them {how} and does at least as "
                         "well as split in the same time (benchmarks/results/auto_choice.md)")
    return "split", (f"{f.tasks} tasks (more than {EXACT_TASKS}): split's modules, solved exactly and joined, do at "
                     "least as well as exact in the same time (benchmarks/results/auto_choice.md)")
