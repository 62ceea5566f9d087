"""A model named where an input file could be: a zoo name, or ``path/to/file.py:factory`` (your own module),
profiled on this CPU at batch 1 into a TaskGraph. Zoo profiles are cached, so a second schedule of the same
name starts at once and sees the same times.

Reading files is :mod:`diviml.io`'s; this module is the one place where naming a model runs a profiler.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from ..errors import InputError
from ..files import read_json, write_text_atomic
from ..graph import TaskGraph
from . import zoo

__all__ = ["cache_dir", "names_a_model", "model_graph", "zoo_graph"]


def cache_dir() -> Path:
    """Where profiled zoo graphs are kept: $DIVIML_CACHE, else $XDG_CACHE_HOME/diviml, else ~/.cache/diviml."""
    if os.environ.get("DIVIML_CACHE"):
        return Path(os.environ["DIVIML_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "diviml"


def names_a_model(spec: str | Path) -> bool:
    """Whether ``spec`` names a model rather than a file: no such file, and a zoo name or ``file.py:factory``.

    >>> names_a_model("resnet50"), names_a_model("examples/layered40.json")
    (True, False)
    """
    text = str(spec)
    if Path(text).exists():
        return False
    return text in zoo.MODELS or text.rpartition(":")[0].endswith(".py")


def model_graph(spec: str, *, refresh: bool = False, progress=None) -> TaskGraph:
    """The profiled graph of the model ``spec`` names (:func:`names_a_model`): a zoo name from the cache
    (:func:`zoo_graph`), your own ``file.py:factory`` profiled at the batch of its example inputs."""
    if spec in zoo.MODELS:
        return zoo_graph(spec, refresh=refresh, progress=progress)
    from ..runtime import model_source
    from .pytorch import profile_module
    source = model_source(spec)
    return profile_module(source.build(), source.inputs(source.example_batch), name=source.name, repeats=3,
                          progress=progress)


def not_a_model_hint(name: str) -> str:
    """What to say about a missing input that may be a mistyped model name ('' when it reads like a file)."""
    close = difflib.get_close_matches(name, list(zoo.MODELS), n=3, cutoff=0.6)
    if not close and Path(name).suffix:
        return ""
    suggestion = f"did you mean {' or '.join(close)}? " if close else ""
    return f", and no zoo model of that name; {suggestion}'diviml models' lists the models"


def zoo_graph(name: str, *, refresh: bool = False, progress=None) -> TaskGraph:
    """The zoo model ``name`` profiled on this CPU at batch 1 (analytic times for the catalogue's other types),
    from the cache when it was profiled before with the same diviml and torch on this host. ``refresh``
    profiles it again."""
    import platform as host

    import torch

    from .. import __version__
    from .pytorch import profile_zoo
    from .pytorch._capture import CAPTURE_REVISION
    key = (f"{name}-b1-cpu-diviml{__version__}-capture{CAPTURE_REVISION}-torch{torch.__version__}-"
           f"{host.node()}").replace("/", "_")
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
