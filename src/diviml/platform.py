"""Platform: devices, links and groups of identical devices; YAML/JSON files and shipped presets.

Transfer model (one place, used by every solver through :mod:`diviml.simulate`):

- same device: free;
- a direct peer link between the two devices: ``latency + bytes / bandwidth`` of that link;
- otherwise through host memory: one hop out of the sender (free when the sender is a host CPU) and one
  hop into the receiver (free for a host CPU), plus the network between servers when they differ.
  A hop costs the task's ``transfer_time`` when the graph gives one (the NeurIPS 2020 model, where edge
  costs are times), else ``link.latency + bytes / link.bandwidth``;
- a device's ``handoff`` is added to each of its hops, a host CPU's included: what a value costs to leave or
  reach the worker that runs the device beyond any copy (two worker threads of one process hand a tensor over
  by reference, but the receiver must be woken and take the interpreter back: ``cpu-workers-2``).

A tensor sent to several consumers on one device is sent once.

What a transfer occupies (the platform's ``transfers``):

- ``overlapped`` (the default; the DiviML and NeurIPS 2020 papers' model): a transfer delays its consumer
  and occupies no device, so devices compute while values move;
- ``receiver``: the receiving device spends the transfer's time itself, just before the first of its jobs
  that reads the value, and the consumer waits only for its producer to finish. That is how ``diviml run``
  runs a plan (a worker copies or takes over each input before its piece), measured on ``cpu-workers-2``
  (``benchmarks/results/runtime_receiver_busy.md``). A schedule costs at least as much so as overlapped, so
  every bound of the overlapped model holds; the solvers search the overlapped model and the simulator
  times their plans this way (:mod:`diviml.simulate`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Mapping

import yaml

from . import interchangeable
from ._platform_file import device_spec, number, positive, spec_dict
from .catalogue import CATALOGUE, DeviceSpec
from .errors import InputError, in_file
from .graph import Task, known_fields, whole_number


@dataclass(frozen=True)
class Link:
    bandwidth: float  # bytes / second
    latency: float = 0.0  # seconds

    def time(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass(frozen=True)
class Device:
    name: str
    type: str
    memory_bytes: float = math.inf
    server: str = "server0"
    is_host: bool = False  # a CPU whose memory is the host memory: its hops cost only its hand-off
    link: Link | None = None  # device <-> host link (None for a host CPU)
    threads: int | None = None  # a CPU device: the intra-op threads it stands for (profiled and run with them)
    handoff: float = 0.0  # seconds added to each hop into or out of this device (a worker woken), host or not


@dataclass(frozen=True)
class Platform:
    devices: tuple[Device, ...]
    name: str = "platform"
    peer_links: Mapping[frozenset, Link] = field(default_factory=dict)
    network: Link | None = None
    groups: tuple[tuple[str, ...], ...] = ()
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    device_specs: Mapping[str, DeviceSpec] = field(default_factory=dict)  # types the file describes
    transfers: str = "overlapped"  # or "receiver": what a transfer occupies (module docstring)

    def spec_of(self, device_type: str) -> DeviceSpec | None:
        """The roofline spec of a device type: the platform file's own description, else the catalogue's."""
        return self.device_specs.get(device_type) or CATALOGUE.get(device_type)

    @cached_property
    def by_name(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}

    @cached_property
    def index(self) -> dict[str, int]:
        return {d.name: i for i, d in enumerate(self.devices)}

    @cached_property
    def device_types(self) -> frozenset[str]:
        return frozenset(d.type for d in self.devices)

    @cached_property
    def identical_groups(self) -> tuple[tuple[str, ...], ...]:
        """Groups of interchangeable devices: declared ones, else derived (:mod:`.interchangeable`)."""
        return self.groups or interchangeable.identical_devices(self)

    @cached_property
    def identical_servers(self) -> tuple[tuple[tuple[str, ...], ...], ...]:
        """Groups of interchangeable servers, each server its devices in order (:mod:`.interchangeable`)."""
        return interchangeable.identical_servers(self)

    # -- transfers -------------------------------------------------------------------------------
    def hop_time(self, task: Task, device: Device, scale: float = 1.0) -> float:
        """Time to move ``task``'s output between ``device`` and host memory: the device's hand-off, and on a
        device that is not a host CPU its link's time (or the task's ``transfer_time``)."""
        if device.is_host:
            return device.handoff
        if task.transfer_time is not None:
            return device.handoff + task.transfer_time * scale
        if device.link is None:
            raise InputError(f"device {device.name!r} is not a host CPU and has no link: give it a 'link'")
        return device.handoff + device.link.time(task.output_bytes * scale)

    def transfer_time(self, task: Task, src: str, dst: str, scale: float = 1.0) -> float:
        """Time for ``task``'s output (``scale`` x its size) to go from device ``src`` to ``dst``."""
        if src == dst:
            return 0.0
        peer = self.peer_links.get(frozenset((src, dst)))
        if peer is not None:
            return peer.time(task.output_bytes * scale)
        a, b = self.by_name[src], self.by_name[dst]
        t = self.hop_time(task, a, scale) + self.hop_time(task, b, scale)
        if a.server != b.server:
            if self.network is None:
                raise InputError(f"devices {src!r} and {dst!r} are on different servers but the platform "
                                 "has no 'network': add one")
            t += self.network.time(task.output_bytes * scale)
        return t

    def mean_transfer_time(self, task: Task, scale: float = 1.0) -> float:
        """Mean of :meth:`transfer_time` over the ordered pairs of distinct devices (HEFT's rank)."""
        routes, n = self._routes, len(self.devices) * (len(self.devices) - 1)
        return math.fsum([len(r) * self.transfer_time(task, *r[0], scale) for r in routes[0]]) / n if n else 0.0

    def transfer_matrix(self, task: Task, scale: float = 1.0) -> list[list[float]]:
        """:meth:`transfer_time` from each device to each, devices in order, each route priced once (list search)."""
        pairs, matrix = self._routes
        times = [self.transfer_time(task, *route[0], scale) for route in pairs] + [0.0]  # route -1: one device
        return [[times[r] for r in row] for row in matrix]

    @cached_property
    def _routes(self) -> tuple[list[list[tuple[str, str]]], list[list[int]]]:
        """(the ordered device pairs of each route, each pair's route: -1 on one device). Pairs priced by the same
        links (one peer link, or the same two hops and network) cost the same: six-servers' 650 pairs, 25 routes."""
        by_key: dict[tuple, list[tuple[str, str]]] = {}
        for a in self.devices:
            for b in (b for b in self.devices if b.name != a.name):
                peer = self.peer_links.get(frozenset((a.name, b.name)))  # a hop: free from a host, else its link
                key = ("peer", peer) if peer is not None else (a.is_host or a.link, a.handoff, b.is_host or b.link,
                                                                 b.handoff, a.server != b.server)
                by_key.setdefault(key, []).append((a.name, b.name))
        route_of = {pair: r for r, pairs in enumerate(by_key.values()) for pair in pairs}
        return list(by_key.values()), [[route_of.get((a.name, b.name), -1) for b in self.devices] for a in self.devices]

    # -- files -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        def link(l: Link | None):
            return None if l is None else {"bandwidth": l.bandwidth, "latency": l.latency}
        devs = []
        for d in self.devices:
            e = {"name": d.name, "type": d.type, "server": d.server, "host": d.is_host}
            if math.isfinite(d.memory_bytes):
                e["memory"] = d.memory_bytes
            if d.link:
                e["link"] = link(d.link)
            if d.threads:
                e["threads"] = d.threads
            if d.handoff:
                e["handoff"] = d.handoff
            devs.append(e)
        out = {"name": self.name, "description": self.description, "devices": devs}
        if self.transfers != "overlapped":
            out["transfers"] = self.transfers
        if self.peer_links:
            out["peer_links"] = [{"between": sorted(k), **link(v)} for k, v in self.peer_links.items()]
        if self.network:
            out["network"] = link(self.network)
        if self.groups:
            out["groups"] = [list(g) for g in self.groups]
        if self.sources:
            out["sources"] = dict(self.sources)
        if self.device_specs:
            out["device_types"] = {name: spec_dict(spec) for name, spec in self.device_specs.items()}
        return out

    @staticmethod
    def from_dict(data: Mapping, *, origin: str = "platform") -> "Platform":
        if not isinstance(data, Mapping) or "devices" not in data:
            raise InputError(f"{origin}: a platform needs a 'devices' list")
        devices: list[Device] = []
        if not isinstance(data["devices"], list):
            raise InputError(f"{origin}: 'devices' must be a list of devices, each with 'name' and 'type'")
        known_fields(data, PLATFORM_FIELDS, origin)
        try:
            for k, entry in enumerate(data["devices"]):
                if not isinstance(entry, Mapping):
                    raise InputError(f"{origin}: device #{k} must be a mapping with 'name' and 'type', got {entry!r}")
                known_fields(entry, DEVICE_FIELDS, f"{origin}: device {entry.get('name', f'#{k}')!r}")
                count = whole_number(entry.get("count", 1), f"{origin}: count of device #{k}", 1, MAX_COUNT)
                host = entry.get("host", False)
                if not isinstance(host, bool):
                    raise InputError(f"{origin}: 'host' of device #{k} must be true or false, got {host!r}")
                for i in range(count):
                    name = str(entry["name"]) if count == 1 else f"{entry['name']}{i}"
                    mem = entry.get("memory")
                    devices.append(Device(
                        name=name, type=str(entry["type"]),
                        memory_bytes=math.inf if mem is None else positive(number(mem), f"memory of {name}"),
                        server=str(entry.get("server", "server0")), is_host=host,
                        link=_link(entry.get("link"), f"link of {name}"),
                        threads=_threads(entry.get("threads"), name),
                        handoff=_handoff(entry.get("handoff", 0.0), name)))
            peer = _peer_links(data.get("peer_links", []) or [], origin)
            network = _link(data.get("network"), "network")
            groups = tuple(tuple(map(str, g)) for g in data.get("groups", []) or [])
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InputError(f"{origin}: malformed platform ({exc.__class__.__name__}: {exc}); each device "
                             "needs 'name' and 'type', links need 'bandwidth' (bytes/s)") from None
        sources = data.get("sources", {}) or {}
        if not isinstance(sources, Mapping):
            raise InputError(f"{origin}: 'sources' must map each number to where it comes from")
        described = data.get("device_types", {}) or {}
        if not isinstance(described, Mapping):
            raise InputError(f"{origin}: 'device_types' must map each new type's name to its peak_flops and "
                             "memory_bandwidth")
        specs = {str(name): device_spec(str(name), entry, origin) for name, entry in described.items()}
        platform = Platform(tuple(devices), str(data.get("name", origin)), peer, network, groups,
                            str(data.get("description", "")), {str(k): str(v) for k, v in sources.items()}, specs,
                            _transfers(data.get("transfers", "overlapped"), origin))
        platform.check(origin)
        return platform

    def check(self, origin: str = "platform") -> None:
        names = [d.name for d in self.devices]
        if not names:
            raise InputError(f"{origin}: the platform has no devices")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise InputError(f"{origin}: duplicate device names {sorted(dup)}: names must be unique")
        for d in self.devices:
            if d.is_host == (d.link is not None):  # a host reads host memory: its link would be ignored
                raise InputError(f"{origin}: device {d.name!r} " + ("is a host CPU ('host: true') with a 'link' to "
                                 "the host: drop one" if d.is_host else "is neither a host CPU ('host: true') nor "
                                 "has a 'link' to the host: give it one"))
        for pair in self.peer_links:
            for n in pair:
                if n not in self.by_name:
                    raise InputError(f"{origin}: peer link names unknown device {n!r}")
        for g in self.groups:
            for n in g:
                if n not in self.by_name:
                    raise InputError(f"{origin}: group names unknown device {n!r}")
            if len({interchangeable.device_kind(self.by_name[n]) for n in g}) > 1:
                raise InputError(f"{origin}: group {list(g)} mixes devices of different type, memory, host link, "
                                 "threads or hand-off: only identical devices may be grouped")
        if len({d.server for d in self.devices}) > 1 and self.network is None:
            raise InputError(f"{origin}: devices sit on several servers but there is no 'network' link")

    @staticmethod
    def load(path_or_preset: str) -> "Platform":
        """A platform from a YAML/JSON file, or a preset name (see :func:`preset_names`)."""
        if path_or_preset in preset_names():
            return preset(path_or_preset)
        path = Path(path_or_preset)
        if not path.exists():
            raise InputError(f"unknown platform {path_or_preset!r}: give a YAML/JSON file or one of the presets "
                             f"{', '.join(preset_names())} (see 'diviml platforms')")
        try:
            data = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
        except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot parse the platform file ({str(exc).splitlines()[0]})") from None
        except RecursionError:
            raise InputError(f"{path}: nested too deeply to be a platform") from None
        with in_file(path):
            return Platform.from_dict(data, origin=str(path))


PLATFORM_FIELDS = ("name", "description", "devices", "peer_links", "network", "groups", "sources", "device_types",
                   "transfers")
TRANSFERS = ("overlapped", "receiver")
DEVICE_FIELDS = ("name", "type", "count", "host", "memory", "server", "link", "threads", "handoff")
LINK_FIELDS = ("bandwidth", "latency")


# the most devices one platform entry may stand for (a count beyond is a typo, and each device costs memory)
MAX_COUNT = 1024


def _threads(v, name: str) -> int | None:
    if v is None:
        return None
    if int(v) != v or v < 1:
        raise InputError(f"threads of {name} must be a whole number >= 1, got {v!r}")
    return int(v)


def _handoff(v, name: str) -> float:
    """A device's hand-off: seconds, at least 0 and finite (a microsecond is 1e-6)."""
    try:
        seconds = number(v)
    except (ValueError, TypeError):
        seconds = math.nan
    if not (0 <= seconds < math.inf):
        raise InputError(f"handoff of {name} must be a number of seconds >= 0 (a value's hand-off to or from its "
                         f"worker, e.g. 3e-5), got {v!r}")
    return seconds


def _transfers(v, origin: str) -> str:
    if v not in TRANSFERS:
        raise InputError(f"{origin}: 'transfers' must be 'overlapped' (a transfer delays its consumer, no device "
                         f"busy) or 'receiver' (the receiving device spends it), got {v!r}")
    return v


def _peer_links(entries, origin: str) -> dict[frozenset, Link]:
    """Direct device-to-device links: ``between: [a, b]`` for one pair, ``among: [a, b, c, ...]`` for every pair
    of a switched fabric (NVLink through NVSwitch), each with ``bandwidth`` and ``latency``."""
    if not isinstance(entries, list):
        raise InputError(f"{origin}: 'peer_links' must be a list of links, each with 'between' or 'among'")
    peer: dict[frozenset, Link] = {}
    for k, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or ("between" in entry) == ("among" in entry):
            raise InputError(f"{origin}: peer link #{k} needs either 'between: [a, b]' or 'among: [a, b, ...]'")
        names = [str(n) for n in entry.get("between") or entry.get("among") or []]
        if "between" in entry and len(names) != 2 or len(set(names)) < 2:
            raise InputError(f"{origin}: peer link #{k} must name two different devices in 'between' "
                             "(or several in 'among')")
        link = _link(entry, f"peer link #{k}", also=("between", "among"))
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                peer[frozenset((a, b))] = link
    return peer


def _link(d, what: str, also: tuple[str, ...] = ()) -> Link | None:
    if d is None:
        return None
    if not isinstance(d, Mapping):
        raise InputError(f"{what} must be a mapping with 'bandwidth' (bytes/s) and optional 'latency' (s), got {d!r}")
    known_fields(d, (*also, *LINK_FIELDS), what)
    lat = number(d.get("latency", 0.0))
    if lat < 0 or math.isnan(lat):
        raise InputError(f"{what}: latency must be >= 0, got {lat}")
    bandwidth = positive(number(d["bandwidth"]), f"{what}: bandwidth")
    if bandwidth < 1.0:  # below a byte per second a transfer's time overflows every sum
        raise InputError(f"{what}: bandwidth must be at least 1 byte/s, got {bandwidth:g}")
    return Link(bandwidth, lat)


# -- presets ---------------------------------------------------------------------------------------
def preset_names() -> list[str]:
    files = resources.files("diviml") / "presets"
    return ["localhost"] + sorted(p.name.rsplit(".", 1)[0] for p in files.iterdir() if p.name.endswith(".yaml"))


def preset(name: str) -> Platform:
    if name == "localhost":
        return localhost()
    files = resources.files("diviml") / "presets"
    path = files / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown platform preset {name!r}: choose one of {', '.join(preset_names())}")
    return Platform.from_dict(yaml.safe_load(path.read_text()), origin=f"preset {name}")


def localhost() -> Platform:
    """This machine's CPU cores, each a device of type 'host' (times measured here) sharing host memory
    (no copy), each paying the hand-off of a worker of one process that ``cpu-workers-2`` measured."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = math.inf
    workers = preset("cpu-workers-2")
    handoff = workers.devices[0].handoff
    devices = tuple(Device(f"cpu{i}", "host", float(memory), "localhost", True, handoff=handoff) for i in range(cores))
    return Platform(devices, "localhost", description=f"this machine: {cores} CPU cores as devices of type "
                    "'host', sharing host memory (each core's capacity is the whole RAM; a tensor handed over "
                    "by reference, each end paying a worker's hand-off, which the receiver spends)",
                    sources={"cores, memory": "read from this machine (sched_getaffinity, sysconf)",
                             "handoff": f"cpu-workers-2's: {workers.sources.get('handoff', '')}",
                             "transfers": f"cpu-workers-2's: {workers.sources.get('transfers', '')}"},
                    transfers=workers.transfers)
