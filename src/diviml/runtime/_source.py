"""The model a plan runs: a zoo name, or ``path/to/file.py:factory`` with ``factory() -> (module, inputs)``."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import InputError
from ..frontends.pytorch import batch_first, example_batch, inputs_at_batch


@dataclass(frozen=True)
class ModelSource:
    """A model to run: its name, a builder, and its inputs at a batch size; for a factory, the batch of its
    example inputs, which the profile measures at (None for a zoo model)."""
    name: str
    build: Callable[[], object]
    inputs: Callable[[int], tuple]
    example_batch: int | None = None
    _captures: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def captured(self, batch: int):
        """The model captured at ``batch`` (built with torch's generator seeded, so every rank and process gets
        the same weights), once per source and batch: ``run --compare`` and ``tune`` run several plans of one
        model, and a capture (torch.export) takes seconds. The program is functional (its parameters and
        buffers are placeholders), so plans run one after another may share it."""
        if batch not in self._captures:
            import torch

            from ..frontends.pytorch import capture_at
            torch.manual_seed(0)
            self._captures[batch] = capture_at(self.build(), self.inputs, batch)
        return self._captures[batch]


def model_source(spec: str) -> ModelSource:
    """A zoo name, or ``path/to/file.py:factory`` with ``factory() -> (module, example_inputs)``."""
    from ..frontends import zoo
    if spec in zoo.MODELS:
        m = zoo.get(spec)
        return ModelSource(spec, m.build, m.inputs)
    path, _, attr = spec.rpartition(":")
    if not path or not path.endswith(".py"):
        raise InputError(f"unknown model {spec!r}: give a zoo name (see 'diviml models') or "
                         "path/to/file.py:factory, a function returning (module, example_inputs)")
    if not Path(path).is_file():
        raise InputError(f"model file {path!r} does not exist")
    module_spec = importlib.util.spec_from_file_location(f"diviml_user_{Path(path).stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"cannot import {path}: not a Python module")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file: say what broke
        raise InputError(f"cannot import {path}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"{path} has no function {attr!r}: give path/to/file.py:factory")
    module_obj, example = _call_factory(factory, spec)
    return ModelSource(Path(path).stem, lambda: module_obj, inputs_at_batch(example), example_batch(example))


def _call_factory(factory, spec: str):
    """The factory's (module, inputs), called with torch's generator seeded: every rank of a run (and every
    process: profile, run) builds the same random weights and inputs. A third item, the inputs' batch
    dimension (one for all, or one per tensor input), moves the batch to the front (:func:`batch_first`)."""
    import torch
    torch.manual_seed(0)
    try:
        module, example, *dims = factory()
        example = tuple(example)
        if len(dims) > 1:
            raise ValueError(f"{2 + len(dims)} items")
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"{spec}: the factory must return (module, example_inputs) or (module, example_inputs, "
                         f"batch_dims); it gave {type(exc).__name__}: {exc}") from None
    return batch_first(module, example, dims[0]) if dims else (module, example)
