"""Batch plans of models whose result for a sample depends on the batch's other samples.

Three small models that mix samples (a division by the batch's largest activation, CLIP-style logits of every
image against every text, a softmax over the batch) are profiled on cpu-workers-2, which marks their mixing
tasks ``whole_batch``; each is scheduled as a batch of 16 and run, beside the same model's plan made from its
graph with the marks taken out (what every diviml before session 71 made) and the best single device's plan.
A second table times the check itself on zoo models, where it finds nothing. Writes
benchmarks/results/whole_batch.md.

    python benchmarks/whole_batch.py
    python benchmarks/whole_batch.py --zoo resnet18 gpt-tiny
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from runtime_fidelity import diviml  # noqa: E402

OUT = Path(__file__).parent / "results" / "whole_batch.md"
PLATFORM = "cpu-workers-2"
BATCH = 16

MODELS = '''
import torch
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))


class ByLargest(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = mlp(), mlp()

    def forward(self, x):
        h = self.a(x)
        return self.b(h / h.abs().max())


class Contrastive(nn.Module):
    def __init__(self):
        super().__init__()
        self.image, self.text = mlp(), nn.Sequential(nn.Embedding(1000, 1024), nn.Linear(1024, 1024))

    def forward(self, images, ids):
        a = nn.functional.normalize(self.image(images), dim=-1)
        b = nn.functional.normalize(self.text(ids).mean(1), dim=-1)
        return (a @ b.t()).softmax(-1)


class BatchSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = mlp(), mlp()

    def forward(self, x):
        return self.b(torch.softmax(self.a(x), dim=0))


def by_largest():
    return ByLargest().eval(), (torch.randn(16, 1024),)


def contrastive():
    return Contrastive().eval(), (torch.randn(16, 1024), torch.randint(0, 1000, (16, 12)))


def batch_softmax():
    return BatchSoftmax().eval(), (torch.randn(16, 1024),)
'''


def unmarked(graph: Path, out: Path) -> Path:
    data = json.loads(graph.read_text())
    for task in data["tasks"]:
        task.pop("whole_batch", None)
    out.write_text(json.dumps(data))
    return out


def run_or_refusal(model: str, plan: Path, graph: Path) -> tuple[str, str, str]:
    """(measured ms, outputs match, note) of running ``plan``, or its one-line refusal."""
    r = subprocess.run([sys.executable, "-m", "diviml", "run", model, plan, "--graph", graph, "--platform", PLATFORM,
                        "--repeats", "5", "--json", "--quiet"], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        return "-", "-", r.stderr.strip().removeprefix("diviml: error: ")[:110] + "..."
    out = json.loads(r.stdout)
    return f"{out['measured_s'] * 1e3:.3f}", "yes" if out["outputs_match"] else "no", ""


def model_rows(work: Path) -> list[str]:
    (work / "mixing.py").write_text(MODELS)
    rows = []
    for factory in ("by_largest", "contrastive", "batch_softmax"):
        model = f"{work / 'mixing.py'}:{factory}"
        graph = work / f"{factory}.json"
        began = time.perf_counter()
        diviml("profile", model, "--platform", PLATFORM, "--out", graph, "--min-time", 0.5)
        profiled = time.perf_counter() - began
        marked = [t["id"] for t in json.loads(graph.read_text())["tasks"] if t.get("whole_batch")]
        plans = {}
        cases = (("marked", graph, "auto"), ("unmarked", unmarked(graph, work / f"{factory}-u.json"), "auto"),
                 ("single device", graph, "best-device"))
        for label, source, solver in cases:
            plans[label] = work / f"{factory}-{label.replace(' ', '-')}.json"
            diviml("schedule", source, "--platform", PLATFORM, "--objective", "batch", "--batch", BATCH,
                   "--solver", solver, "--time-limit", 20, "--out", plans[label])
            plan = json.loads(plans[label].read_text())
            cut = sum(1 for t in {a["task"] for a in plan["assignments"]}
                      if sum(a["task"] == t for a in plan["assignments"]) > 1)
            measured, match, note = run_or_refusal(model, plans[label], graph)
            rows.append(f"| {factory} | {', '.join(marked) or '-'} | {profiled:.0f} | {label} | {plan['solver']} | "
                        f"{cut} | {plan['objective'] * 1e3:.3f} | {measured} | {match} | {note} |")
            print(rows[-1], flush=True)
    return rows


def zoo_rows(names: list[str]) -> list[str]:
    from diviml.frontends import zoo
    from diviml.frontends.pytorch import capture_at, task_of_nodes
    from diviml.frontends.pytorch._samples import whole_batch_tasks
    rows = []
    for name in names:
        spec = zoo.MODELS[name]
        captured = capture_at(spec.build(), spec.inputs, 2)
        began = time.perf_counter()
        found = whole_batch_tasks(captured)
        tasks = len(set(task_of_nodes(captured).values()))
        rows.append(f"| {name} | {tasks} | {', '.join(found) or 'none'} | {time.perf_counter() - began:.1f} |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", nargs="*", default=["resnet18", "googlenet", "inception_v3", "densenet121",
                                                      "efficientnet_b0", "convnext_tiny", "vit_b_16", "swin_t",
                                                      "gpt-tiny", "gpt2-small", "bert-base"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = model_rows(Path(tmp))
    zoo = zoo_rows(args.zoo)
    text = "\n".join([
        "# Batch plans of models that mix samples", "",
        f"`python {' '.join(sys.argv)}` ({time.strftime('%Y-%m-%d')}; this machine: 2 cores, shared). Batch of "
        f"{BATCH} on {PLATFORM}, plans from `diviml schedule --objective batch` (20 s), each run 5 times after a "
        "warm-up (`diviml run`, median). *marked*: the graph as profiled, its mixing tasks `whole_batch`; "
        "*unmarked*: the same graph with the marks taken out (any diviml before session 71); *single device*: "
        "`best-device`. *cut*: tasks the plan runs in more than one part.", "",
        "| model | tasks marked | profile (s) | graph | solver | cut | predicted (ms) | measured (ms) | outputs match | note |",
        "|---|---|---:|---|---|---:|---:|---:|---|---|", *rows, "",
        "## The check on zoo models", "",
        "Each model captured at a batch of 2; the seconds the check took (one thread of this machine).", "",
        "| model | tasks | tasks marked | check (s) |", "|---|---:|---|---:|", *zoo, ""])
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
