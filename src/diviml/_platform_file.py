"""A platform file's numbers and its own device types (``device_types: {name: {...}}``): read and written.

Kept apart from :mod:`diviml.platform`, which reads the rest of the file through these.
"""

from __future__ import annotations

import math
from typing import Mapping

from .catalogue import GPU_LAUNCH, DeviceSpec
from .errors import InputError
from .graph import _num as _json_num
from .graph import known_fields, whole_number

__all__ = ["SPEC_FIELDS", "device_spec", "number", "positive", "spec_dict"]


def number(v) -> float:
    """A number of a platform file; a string that reads as one too, since YAML 1.1 reads 1e9 (no dot) as text."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise ValueError(f"expected a number, got {v!r}") from None
    return _json_num(v)


SPEC_FIELDS = ("peak_flops", "memory_bandwidth", "launch_overhead", "memory", "cores", "fp16_peak_flops",
               "bf16_peak_flops", "source")


def device_spec(name: str, data, origin: str) -> DeviceSpec:
    """A device type a platform file describes (``device_types: {name: {...}}``), costed by the roofline:
    ``peak_flops`` (FLOP/s, dense FP32) and ``memory_bandwidth`` (bytes/s) required; ``launch_overhead``
    (s per operator, default the measured GPU launch), ``memory`` (bytes), ``cores`` (a CPU socket's cores;
    default 1, a GPU), ``fp16_peak_flops`` / ``bf16_peak_flops`` (dense tensor-core FLOP/s) and ``source``
    optional."""
    what = f"{origin}: device type {name!r}"
    if not isinstance(data, Mapping):
        raise InputError(f"{what} must be a mapping with peak_flops and memory_bandwidth")
    known_fields(data, SPEC_FIELDS, what)
    missing = [k for k in ("peak_flops", "memory_bandwidth") if k not in data]
    if missing:
        raise InputError(f"{what} needs {' and '.join(missing)} (FLOP/s, bytes/s) to be costed by the roofline")
    try:
        peak = positive(number(data["peak_flops"]), f"{what}: peak_flops")
        bandwidth = positive(number(data["memory_bandwidth"]), f"{what}: memory_bandwidth")
        memory = positive(number(data["memory"]), f"{what}: memory") if "memory" in data else math.inf
        launch = number(data.get("launch_overhead", GPU_LAUNCH))
        half = {k: positive(number(data[k]), f"{what}: {k}") for k in ("fp16_peak_flops", "bf16_peak_flops")
                if k in data}
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{what}: {exc}") from None
    if not launch >= 0:
        raise InputError(f"{what}: launch_overhead must be at least 0 seconds, got {launch!r}")
    cores = whole_number(data.get("cores", 1), f"{what}: cores", 1, 4096)
    source = str(data.get("source", "given in the platform file, no source stated"))
    return DeviceSpec(name, peak, bandwidth, memory, launch, {"platform file": source}, cores=cores, **half)


def spec_dict(spec: DeviceSpec) -> dict:
    out = {"peak_flops": spec.peak_flops, "memory_bandwidth": spec.memory_bandwidth,
           "launch_overhead": spec.launch_overhead, "cores": spec.cores,
           "source": spec.sources.get("platform file", "")}
    if math.isfinite(spec.memory_bytes):
        out["memory"] = spec.memory_bytes
    for k in ("fp16_peak_flops", "bf16_peak_flops"):
        if getattr(spec, k):
            out[k] = getattr(spec, k)
    return out


def positive(v: float, what: str) -> float:
    if not (v > 0) or math.isnan(v):
        raise InputError(f"{what} must be a positive number, got {v}")
    return v
