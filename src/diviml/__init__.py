"""diviml: map deep neural networks onto heterogeneous hardware.

Data flow: TaskGraph + Platform + Objective -> Problem -> solver -> Plan -> validate / simulate -> outputs.

>>> import diviml
>>> problem = diviml.load_problem("examples/layered40.json", platform="paper-server")  # doctest: +SKIP
>>> plan = diviml.solve(problem, "heft", time_limit=10)                               # doctest: +SKIP
>>> plan.objective, plan.bound, plan.gap                                              # doctest: +SKIP
"""

from .bounds import lower_bound
from .errors import DivimlError, InfeasibleError, InputError, ValidationError
from .graph import Task, TaskGraph
from .io import load_input, load_problem
from .plan import Assignment, Plan
from .platform import Device, Link, Platform, preset, preset_names
from .problem import Objective, Problem
from .simulate import latency, pipeline_loads, schedule
from .solvers import solve
from .validate import check, validate

__version__ = "0.2.0"  # the one place the version is written (pyproject.toml reads it); see CHANGELOG.md

__all__ = [
    "Assignment", "Device", "DivimlError", "InfeasibleError", "InputError", "Link", "Objective", "Plan",
    "Platform", "Problem", "Task", "TaskGraph", "ValidationError", "check", "latency", "load_input",
    "load_problem", "lower_bound", "pipeline_loads", "preset", "preset_names", "profile", "schedule", "solve",
    "validate",
]


def __getattr__(name: str):
    """``diviml.profile(module, example_inputs)``: imported on first use, so that diviml runs without torch."""
    if name == "profile":
        from .frontends.pytorch import profile_module
        return profile_module
    raise AttributeError(f"module 'diviml' has no attribute {name!r}")
