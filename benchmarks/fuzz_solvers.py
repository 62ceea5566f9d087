"""Fuzzing: every solver against every other on random problems, the checks of tests/solvers/test_cross_check.py
over many more seeds and larger graphs, and training pipelines (a random forward graph mirrored into a backward
one, each backward task co-located with its forward twin; PipeDream and GPipe, contiguous or not).

For each problem, every registered solver that takes its objective runs with the same short limit; a finding
(tests/solvers/test_cross_check.cross_check, the check the seeded test runs) is a plan the validator rejects, a
solver past 1.5 x its limit + 1 s, a crash (an exception that is not diviml's own), a bound above a valid plan,
a plan called optimal that another beats, an exact solver calling infeasible what another placed, or no plan at
all without an exact solver refusing. Prints each finding as it comes, then a table of counts, written to
benchmarks/results/fuzz_solvers.md (fuzz_solvers_training.md with --training). This is how the defects in the
CHANGELOG's "found by fuzzing" were found.

    python benchmarks/fuzz_solvers.py --seeds 1000:1040 --tasks 10:40         # the 0.2.0 campaign's sizes
    python benchmarks/fuzz_solvers.py --seeds 7000:7025 --tasks 4:15 --training
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

from diviml import DivimlError, Objective, Problem, Task, TaskGraph

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "solvers"))
from test_cross_check import KINDS, cross_check, random_graph, random_platform, random_problem  # noqa: E402

OUT = Path(__file__).parent / "results" / "fuzz_solvers.md"
TRAINING = ("pipedream", "gpipe")


def training_problem(seed: int, training: str, contiguous: bool, tasks: tuple[int, int]) -> Problem:
    """A random forward graph (as the cross-check draws it) and its mirror as the backward pass: each backward
    task 1-2.5x its twin's time, co-located with it (mostly), edges reversed; every forward sink feeds its own
    backward twin."""
    rng = random.Random(seed)
    while True:
        platform = random_platform(rng)
        forward = random_graph(rng, rng.randint(*tasks), sorted({d.type for d in platform.devices}), 1)
        nodes, edges = [], list(forward.edges)
        for t in forward.tasks:
            group = f"c{t.id}" if rng.random() < 0.8 else t.colocation
            nodes.append(Task(t.id, t.time, memory_bytes=t.memory_bytes, output_bytes=t.output_bytes,
                              colocation=group, allowed_types=t.allowed_types))
            nodes.append(Task("b" + t.id, {k: v * rng.uniform(1, 2.5) for k, v in t.time.items()},
                              output_bytes=t.output_bytes, colocation=group, allowed_types=t.allowed_types,
                              phase="backward"))
            if not forward.successors[t.id]:
                edges.append((t.id, "b" + t.id))
        edges += [("b" + v, "b" + u) for u, v in forward.edges]
        try:
            return Problem(TaskGraph.create(nodes, edges, name="training"), platform,
                           Objective("pipeline", training=training, contiguous=contiguous))
        except DivimlError:
            continue


def problems(seeds: range, tasks: tuple[int, int], batches: tuple[int, int], training: bool):
    for seed in seeds:
        if training:
            for mode in TRAINING:
                for contiguous in (False, True):
                    yield seed, f"{mode}{'-contiguous' if contiguous else ''}", training_problem(
                        seed, mode, contiguous, tasks)
        else:
            for kind in KINDS:
                yield seed, kind, random_problem(seed, kind, tasks=tasks, batches=batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1000:1040", help="first:last (exclusive)")
    parser.add_argument("--tasks", default="10:40", help="least:most tasks of a (forward) graph")
    parser.add_argument("--batches", default="2:8", help="least:most requests of a batch problem")
    parser.add_argument("--limit", type=float, default=2.0, help="seconds per solve")
    parser.add_argument("--training", action="store_true", help="training pipelines instead of the five objectives")
    args = parser.parse_args()
    first, last = map(int, args.seeds.split(":"))
    tasks = tuple(map(int, args.tasks.split(":")))
    batches = tuple(map(int, args.batches.split(":")))
    counts: Counter = Counter()
    solved = 0
    for seed, kind, problem in problems(range(first, last), tasks, batches, args.training):  # type: ignore[arg-type]
        solved += 1
        for finding, what in cross_check(problem, args.limit):
            counts[finding] += 1
            print(f"seed {seed} {kind}: {finding}: {what}", flush=True)
    lines = ["# Fuzzing every solver against every other", "",
             f"`python benchmarks/fuzz_solvers.py --seeds {args.seeds} --tasks {args.tasks} --batches {args.batches} "
             f"--limit {args.limit:g}{' --training' if args.training else ''}`: {solved} problems.", "",
             "| finding | problems |", "|---|---|"]
    lines += [f"| {finding} | {n} |" for finding, n in counts.most_common()] or ["| none | 0 |"]
    print("\n".join(lines))
    out = OUT.with_name("fuzz_solvers_training.md") if args.training else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
