"""Plan: what a solver decided (device, start and sub-batch of every task part) and what it proved."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .errors import InputError
from .files import read_json, write_text_atomic
from .graph import whole_number

SCHEMA = "diviml.plan/1"
STATUSES = ("optimal", "feasible", "timeout", "infeasible")


def format_gap(gap: float) -> str:
    """A gap as a percentage that never reads 0 when it is not: two significant digits below 0.1%. A gap under
    1e-12 is the rounding of two sums of floats that agree (a plan and a bound found as one), and reads 0.

    >>> format_gap(0.0), format_gap(3.2e-6), format_gap(4e-7), format_gap(0.0421), format_gap(1.7e-16)
    ('0%', '0.00032%', '0.00004%', '4.21%', '0%')
    """
    if gap < 1e-12:
        return "0%"
    percent = 100 * gap
    if gap >= 1e-3:
        return f"{percent:.2f}%"
    digits = 1 - math.floor(math.log10(percent))  # two significant digits, never in exponent form
    return f"{percent:.{digits}f}".rstrip("0").rstrip(".") + "%"


@dataclass(frozen=True)
class Assignment:
    task: str
    device: str
    start: float | None = None
    batch: int | None = None  # samples in this part (None: the whole batch)


@dataclass(frozen=True)
class Plan:
    objective_kind: str
    assignments: tuple[Assignment, ...]
    objective: float
    bound: float
    status: str
    solver: str
    solve_time_s: float = 0.0
    time_unit: str = "s"
    batch_size: int = 1
    notes: tuple[str, ...] = ()
    stats: Mapping[str, float | str] = field(default_factory=dict)  # counters, and names such as a baseline's
    bound_source: str = ""  # what proved the bound (one of bounds.BOUND_SOURCES); "" where it is not known

    @property
    def gap(self) -> float:
        """(objective - bound) / objective, 0 when proven optimal, never negative."""
        if self.objective <= 0:
            return 0.0
        return max(0.0, (self.objective - self.bound) / self.objective)

    @property
    def placement(self) -> dict[str, str]:
        """Task -> device; for a split task, the device running its largest part."""
        out: dict[str, tuple[int, str]] = {}
        for a in self.assignments:
            b = a.batch or self.batch_size
            if a.task not in out or b > out[a.task][0]:
                out[a.task] = (b, a.device)
        return {t: d for t, (_, d) in out.items()}

    @property
    def parts(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        for a in self.assignments:
            out.setdefault(a.task, []).append((a.device, a.batch or self.batch_size))
        return out

    @property
    def device_order(self) -> dict[str, list[tuple[str, int]]] | None:
        """Device -> [(task, part index)] by start time, or None when the plan has no start times."""
        if any(a.start is None for a in self.assignments):
            return None
        seen: dict[str, int] = {}
        keyed = []
        for a in self.assignments:
            k = seen.get(a.task, 0)
            seen[a.task] = k + 1
            keyed.append((a.start, a.device, a.task, k))
        order: dict[str, list[tuple[str, int]]] = {}
        for start, dev, task, k in sorted(keyed, key=lambda x: (x[0], x[1])):
            order.setdefault(dev, []).append((task, k))
        return order

    def summary(self) -> dict:
        return {"objective": self.objective, "bound": self.bound, "bound_source": self.bound_source,
                "gap": self.gap, "status": self.status,
                "solver": self.solver, "solve_time_s": self.solve_time_s, "objective_kind": self.objective_kind,
                "time_unit": self.time_unit, "batch_size": self.batch_size,
                "devices_used": sorted({a.device for a in self.assignments}), "notes": list(self.notes),
                "stats": dict(self.stats)}

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, **self.summary(),
                "assignments": [{k: v for k, v in a.__dict__.items() if v is not None} for a in self.assignments]}

    @staticmethod
    def from_dict(d: Mapping) -> "Plan":
        if not isinstance(d, Mapping) or d.get("schema") != SCHEMA:
            raise InputError(f"not a diviml plan (expected schema {SCHEMA!r}): give a file written by "
                             "'diviml schedule --out'")
        try:
            return Plan(
                objective_kind=str(d["objective_kind"]),
                assignments=tuple(_assignment(a) for a in d["assignments"]),
                objective=_value(d["objective"], "objective"), bound=_value(d["bound"], "bound"),
                status=str(d["status"]), solver=str(d["solver"]),
                solve_time_s=_value(d.get("solve_time_s", 0.0), "solve_time_s"),
                time_unit=str(d.get("time_unit", "s")),
                batch_size=whole_number(d.get("batch_size", 1), "the plan's batch_size"),
                notes=tuple(map(str, d.get("notes", ()))), stats=dict(d.get("stats", {})),
                bound_source=str(d.get("bound_source", "")))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InputError(f"malformed plan ({exc.__class__.__name__}: {exc})") from None

    def save(self, path: str | Path) -> None:
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1))

    @staticmethod
    def load(path: str | Path) -> "Plan":
        return Plan.from_dict(read_json(path))


def _value(v, what: str, finite: bool = False) -> float:
    """A number of a plan file (an objective may be infinite: nothing placed), else ValueError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)) or (
            finite and math.isinf(float(v))):
        raise ValueError(f"{what} must be a {'finite ' if finite else ''}number, got {v!r}")
    return float(v)


def _assignment(a: Mapping) -> Assignment:
    """One assignment of a plan file: its start a finite number where given, its batch a whole number >= 1."""
    start, batch = a.get("start"), a.get("batch")
    return Assignment(str(a["task"]), str(a["device"]), None if start is None else _value(start, "a start", True),
                      None if batch is None else whole_number(batch, f"the batch of a part of {a['task']!r}"))
