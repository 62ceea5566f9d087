"""Which devices, and which servers, a plan may swap without changing any time: what symmetry breaking orders.

Two devices are interchangeable when they have the same type, memory, host link, threads, hand-off and server,
and any swap of the two leaves the peer links as they were. Two servers are interchangeable when their devices match
position by position, the peer links among them match, and none reaches another server (the one network
joins every server alike): swapping them, devices and all, changes no transfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .platform import Device, Platform

__all__ = ["device_kind", "identical_devices", "identical_servers", "server_kind"]


def device_kind(d: Device) -> tuple:
    """What two interchangeable devices share: type, memory, host flag, host link, threads and hand-off."""
    return d.type, d.memory_bytes, d.is_host, d.link, d.threads, d.handoff


def server_kind(platform: Platform, devices: list[Device] | tuple[Device, ...]) -> tuple:
    """What two interchangeable servers share: their devices' kinds position by position and the peer links
    among them (by position)."""
    index = {d.name: i for i, d in enumerate(devices)}
    links = sorted(((tuple(sorted(index[n] for n in pair)), link) for pair, link in platform.peer_links.items()
                    if pair <= index.keys()), key=lambda e: e[0])
    return tuple(device_kind(d) for d in devices), tuple(links)


def identical_devices(platform: Platform) -> tuple[tuple[str, ...], ...]:
    """Groups of interchangeable devices (same kind and server; peer links alike)."""
    buckets: dict[tuple, list[str]] = {}
    for d in platform.devices:
        buckets.setdefault((device_kind(d), d.server), []).append(d.name)
    return tuple(group for g in buckets.values() for group in _peer_alike(platform, g) if len(group) > 1)


def identical_servers(platform: Platform) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Groups of interchangeable servers, each server as its devices in platform order (position i of one
    stands for position i of the others)."""
    on: dict[str, list[Device]] = {}
    for d in platform.devices:
        on.setdefault(d.server, []).append(d)
    by_name = platform.by_name
    crossing = {by_name[n].server for pair in platform.peer_links for n in pair
                if len({by_name[m].server for m in pair}) > 1}
    buckets: dict[tuple, list[tuple[str, ...]]] = {}
    for name, devices in on.items():
        if name not in crossing and len(on) > 1:
            buckets.setdefault(server_kind(platform, devices), []).append(tuple(d.name for d in devices))
    return tuple(tuple(g) for g in buckets.values() if len(g) > 1)


def _peer_alike(platform: Platform, names: list[str]) -> list[tuple[str, ...]]:
    """``names`` cut into classes whose members any swap of two leaves the peer links unchanged: a and b
    alike when every third device has the same peer link (or none) to a as to b, and, where a class has
    more than two members, the same link between any two of them (an NVLink switch: all alike)."""
    links = platform.peer_links
    classes: list[list[str]] = []
    for n in names:
        for c in classes:
            inside = links.get(frozenset(c[:2])) if len(c) > 1 else None
            if _swappable(platform, c[0], n) and (len(c) == 1 or all(
                    links.get(frozenset((n, m))) == inside for m in c)):
                c.append(n)
                break
        else:
            classes.append([n])
    return [tuple(c) for c in classes]


def _swappable(platform: Platform, a: str, b: str) -> bool:
    links = platform.peer_links
    return all(links.get(frozenset((a, x))) == links.get(frozenset((b, x))) for x in platform.by_name if x not in (a, b))
