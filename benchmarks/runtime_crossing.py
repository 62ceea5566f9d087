"""Benchmark: what a value crossing between two workers of one process costs a plan, as `diviml run` runs it.

A chain of ``layers`` blocks (a linear layer and a tanh, ``width`` wide, a batch of ``batch``) is run on
``cpu-workers-2`` two ways, in turn in one process (``diviml.runtime.run_beside``: blocks A B B A): every
task on worker0, and the tasks dealt out to the two workers in runs of ``k`` tasks, so that the value crosses
between the workers at every run's end. The plans do the same work one task after another (the chain leaves
no room for overlap), so what the second costs more, over its crossings, is what one crossing costs: the
sender's piece ending, the receiver woken and taking the interpreter back, its piece starting. The cost model
charges a crossing the two workers' hand-offs (each device's ``handoff``, paid at each end): the preset's are
half the median of this table's small-operator rows each, and the table gives what the preset predicts for the
dealt-out plan beside what it measured. Prints the table and writes it to benchmarks/results/runtime_crossing.md
(or --out).

    python benchmarks/runtime_crossing.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import diviml
from diviml import Assignment, Objective, Plan, Problem, preset
from diviml.runtime import run_beside
from diviml.simulate import schedule

OUT = Path(__file__).parent / "results" / "runtime_crossing.md"
CHAINS = {"small": (60, 64, 8), "large": (24, 1024, 64)}  # layers, width, batch
RUNS_OF = (20, 10, 5, 2, 1)

MODEL = '''
import torch


class Chain(torch.nn.Module):
    def __init__(self, layers, width):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x
'''


def factory_file(where: Path) -> Path:
    path = where / "chain.py"
    body = [MODEL]
    for name, (layers, width, batch) in CHAINS.items():
        body.append(f"def {name}():\n    return Chain({layers}, {width}), (torch.randn({batch}, {width}),)\n")
    path.write_text("\n\n".join(body))
    return path


def plan_of(problem: Problem, placement: dict[str, str]) -> Plan:
    timed = schedule(problem, {t: [(d, problem.batch_size)] for t, d in placement.items()})
    return Plan("latency", tuple(Assignment(j.task, j.device, j.start) for j in timed.jobs), timed.makespan, 0.0,
                "feasible", "hand", batch_size=problem.batch_size)


def measure_chain(spec: str, repeats: int) -> list[tuple[int, int, float, float, float]]:
    """(k, crossings, one worker's median s, dealt out's median s, dealt out's prediction s) for each run
    length k."""
    from diviml.runtime import model_source
    source = model_source(spec)
    graph = diviml.profile(source.build(), source.inputs(source.example_batch), batches=(source.example_batch,),
                           name="chain", repeats=2, min_time_s=0.3)
    problem = Problem(graph, preset("cpu-workers-2"), Objective("latency"))
    order = list(graph.topological_order)
    alone = plan_of(problem, {t: "worker0" for t in order})
    rows = []
    for k in RUNS_OF:
        placement = {t: ("worker0", "worker1")[(i // k) % 2] for i, t in enumerate(order)}
        crossings = sum(1 for a, b in graph.edges if placement[a] != placement[b])
        plan = plan_of(problem, placement)
        one, dealt = run_beside(spec, (alone, plan), preset("cpu-workers-2"), problem=problem, repeats=repeats,
                                warmup=3)
        rows.append((k, crossings, one.measured_s, dealt.measured_s, plan.objective))
        print(f"  {spec.rpartition(':')[2]} chain, runs of {k}: {crossings} crossings, "
              f"{one.measured_s * 1e3:.3f} -> {dealt.measured_s * 1e3:.3f} ms", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    lines = ["# What a crossing between two workers of one process costs", "",
             f"Command: `python benchmarks/runtime_crossing.py --repeats {args.repeats}`; torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads here, each worker one intra-op thread (`cpu-workers-2`). A chain "
             "of blocks (a linear layer and a tanh) run on one worker and dealt out to both in runs of k tasks, the "
             "two plans in turn in one process (medians of the timed runs); per crossing: the difference over the "
             "crossings; predicted: the dealt-out plan timed with the preset's hand-offs.", "",
             "| chain | layers x width, batch | runs of k | crossings | one worker (ms) | dealt out (ms) | "
             "per crossing (us) | dealt out predicted (ms) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    small = []
    with tempfile.TemporaryDirectory() as where:
        path = factory_file(Path(where))
        for name, (layers, width, batch) in CHAINS.items():
            for k, crossings, one, dealt, predicted in measure_chain(f"{path}:{name}", args.repeats):
                per = (dealt - one) / crossings
                if name == "small":
                    small.append(per)
                lines.append(f"| {name} | {layers} x {width}, {batch} | {k} | {crossings} | {one * 1e3:.3f} | "
                             f"{dealt * 1e3:.3f} | {per * 1e6:.1f} | {predicted * 1e3:.3f} |")
    lines += ["", f"Median per crossing over the small chain's rows: {statistics.median(small) * 1e6:.1f} us."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
