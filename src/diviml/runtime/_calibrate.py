"""Calibration from runs: the graph's times scaled to what the hardware did, for a second solve.

Each task's time on its device's type (and that type's batch-table row) is multiplied by its piece's
measured / predicted duration: the pieces' sums then equal what was measured, and the split of a piece's
time among its tasks keeps the profile's proportions. Types no task ran on are left as they were.
"""

from __future__ import annotations

from ..graph import TaskGraph


def calibrated_graph(report, plan, problem) -> TaskGraph:
    factor: dict[str, float] = {}  # task -> measured / predicted of its piece
    pieces = {(p.device, p.index): p for p in report.piece_reports}
    order = plan.device_order or {}
    for device, tasks in order.items():
        runs = sorted((p for (d, _), p in pieces.items() if d == device), key=lambda p: p.index)
        position = {t: k for k, (t, _) in enumerate(tasks)}
        for p in runs:
            if not p.predicted_s or p.predicted_s <= 0:
                continue
            first = position[p.first_task]
            for t, _ in tasks[first:first + p.tasks]:
                factor[t] = p.measured_s / p.predicted_s
    data = problem.graph.to_dict()
    placement = plan.placement
    for task in data["tasks"]:
        k = factor.get(task["id"])
        if k is None:
            continue
        dtype = problem.platform.by_name[placement[task["id"]]].type
        if dtype in task["time"]:
            task["time"][dtype] *= k
        row = task.get("time_by_batch", {}).get(dtype)
        if row:
            task["time_by_batch"][dtype] = {b: v * k for b, v in row.items()}
    data["name"] = f"{problem.graph.name} (calibrated by a run)"
    return TaskGraph.from_dict(data)
