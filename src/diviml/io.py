"""Reading an INPUT (diviml graph JSON or NeurIPS 2020 scenario, auto-detected) into a Problem."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError, in_file
from .frontends import neurips2020
from .frontends.derive import complete_for
from .graph import TaskGraph, read_json, write_text_atomic
from .platform import Platform
from .problem import Objective, Problem

DEFAULT_PLATFORM = "paper-server"


@dataclass(frozen=True)
class Input:
    graph: TaskGraph
    platform: Platform | None  # the scenario's own machine, when the file brings one
    format: str  # "diviml" or "neurips2020"


def cache_dir() -> Path:
    """Where profiled zoo graphs are kept: $DIVIML_CACHE, else $XDG_CACHE_HOME/diviml, else ~/.cache/diviml."""
    if os.environ.get("DIVIML_CACHE"):
        return Path(os.environ["DIVIML_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "diviml"


def zoo_graph(name: str, *, refresh: bool = False, progress=None) -> TaskGraph:
    """The zoo model ``name`` profiled on this CPU at batch 1 (analytic times for the catalogue's other types),
    from the cache when it was profiled before with the same diviml and torch on this host: a schedule of a
    zoo name then starts at once, and two runs see the same times. ``refresh`` profiles it again."""
    import platform as host
    import torch

    from . import __version__
    from .frontends.pytorch import profile_zoo
    key = f"{name}-b1-cpu-diviml{__version__}-torch{torch.__version__}-{host.node()}".replace("/", "_")
    path = cache_dir() / "profiles" / f"{key}.json"
    if path.exists() and not refresh:
        try:
            if progress:
                progress(f"{name}: profiled graph from the cache ({path}; --refresh profiles it again)")
            return TaskGraph.from_dict(read_json(path))
        except InputError:
            pass  # a damaged cache entry is profiled again
    graph = profile_zoo(name, repeats=3, progress=progress)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(graph.to_dict()))
    except OSError as exc:  # a cache that cannot be written costs time, not the run
        if progress:
            progress(f"warning: could not cache the profile in {path.parent} ({exc.strerror})")
    return graph


def load_input(path: str | Path, *, accelerators: int | None = None, cpus: int | None = None,
               memory: float | None = None, progress=None, refresh: bool = False) -> Input:
    """A graph file, a NeurIPS scenario, or a model zoo name (profiled on this CPU, batch 1, cached:
    :func:`zoo_graph`)."""
    spec = str(path)
    if spec.rpartition(":")[0].endswith(".py") and not Path(path).exists():  # your own model: file.py:factory
        from .frontends.pytorch import profile_module
        from .runtime import model_source
        source = model_source(spec)
        graph = profile_module(source.build(), source.inputs(source.batch_fixed), name=source.name, repeats=3,
                               progress=progress)
        return Input(graph, None, "model")
    if not Path(path).exists():
        from . import zoo
        if str(path) in zoo.MODELS:
            return Input(zoo_graph(str(path), refresh=refresh, progress=progress), None, "model")
        import difflib
        close = difflib.get_close_matches(str(path), list(zoo.MODELS), n=3, cutoff=0.6)
        if close or not Path(path).suffix:  # reads like a model name, not a file name
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise InputError(f"{path}: no such file, and no zoo model of that name; {hint}'diviml models' lists "
                             "the models")
    data = read_json(path)
    if neurips2020.is_scenario(data):
        with in_file(path):
            graph = neurips2020.graph_from_scenario(data, Path(path).stem)
            platform = neurips2020.platform_from_scenario(data, accelerators=accelerators, cpus=cpus, memory=memory)
        return Input(graph, platform, "neurips2020")
    if isinstance(data, dict) and ("tasks" in data or "schema" in data):
        if any(x is not None for x in (accelerators, cpus, memory)):
            raise InputError("--accelerators/--cpus/--memory apply to NeurIPS 2020 scenarios only; "
                             "give a --platform file for a diviml graph")
        with in_file(path):
            return Input(TaskGraph.from_dict(data), None, "diviml")
    raise InputError(f"{path}: neither a diviml graph (with 'tasks' and 'edges') nor a NeurIPS 2020 scenario "
                     "(with 'maxFPGAs' and 'nodes')")


def load_problem(path: str | Path, *, platform: str | Platform | None = None, objective: Objective | None = None,
                 say=None, **overrides) -> Problem:
    """Problem from an INPUT (graph file, scenario or zoo model name); ``platform`` overrides a scenario's own.
    A device type of the platform the graph has no times for gets times derived from a type it has
    (:func:`.frontends.derive.complete_for`; ``say``, a callable taking a line, is told which)."""
    inp = load_input(path, **overrides)
    if isinstance(platform, Platform):
        plat = platform
    elif platform is not None:
        plat = Platform.load(platform)
    else:
        plat = inp.platform or Platform.load(DEFAULT_PLATFORM)
    graph, derived = complete_for(inp.graph, plat)
    for line in derived if say else ():
        say(line)
    return Problem(graph, plat, objective or Objective())
