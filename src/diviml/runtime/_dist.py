"""Ranks on torch.distributed: which rank runs which plan device, point-to-point values, the launcher.

One rank per server of the platform (or one per device, for a one-server platform run as several
processes); ranks meet through the usual ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` variables,
set by ``torchrun`` or by :func:`launch` (``diviml run --nproc N``). Tensors cross ranks by gloo
``isend``/``recv`` on the host (a GPU tensor is staged through host memory), each value with a tag of its own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from typing import NamedTuple

from ..errors import DivimlError, InputError

TIMEOUT_S = 30.0  # a rank that waits this long for a peer gives up (a dead peer ends the run, no hang)


class ValueMeta(NamedTuple):
    """A value's shape, dtype and memory order as the unsplit program makes it (shape None, dtype int: a size)."""
    shape: tuple[int, ...] | None
    dtype: object
    order: tuple[int, ...] = ()  # dimensions from outermost to innermost in memory


def memory_order(shape, stride) -> tuple[int, ...]:
    """A dense tensor's dimensions from outermost to innermost in memory; the plain order for any other.

    A value crosses ranks as one contiguous buffer; sent in this order and permuted back on arrival it keeps
    the layout it was made with, as a copy between devices of one process does (``Tensor.to``), so an
    operator after it that needs that layout (``view`` of a permuted value) runs on the other rank too.

    >>> memory_order((2, 3, 4), (12, 1, 3))
    (0, 2, 1)
    >>> memory_order((2, 3), (0, 1))  # expanded: not dense, sent contiguous
    (0, 1)
    """
    dims = sorted(range(len(shape)), key=lambda i: (-stride[i], i))
    expected = 1
    for i in reversed(dims):
        if shape[i] != 1 and stride[i] != expected:
            return tuple(range(len(shape)))
        expected *= shape[i]
    return tuple(dims)


def rank_of_devices(platform, world: int) -> dict[str, int]:
    """Plan device -> rank: all on rank 0 for one process, else one rank per server, else one per device."""
    names = [d.name for d in platform.devices]
    if world == 1:
        return {n: 0 for n in names}
    servers = list(dict.fromkeys(d.server for d in platform.devices))
    if world == len(servers):
        return {d.name: servers.index(d.server) for d in platform.devices}
    if world == len(names):
        return {n: i for i, n in enumerate(names)}
    raise InputError(f"world size {world} does not match platform {platform.name!r}: it has {len(servers)} "
                     f"server(s) and {len(names)} device(s); run with --nproc {len(servers)} (a rank per server)"
                     + (f" or --nproc {len(names)} (a rank per device)" if len(names) != len(servers) else ""))


def env_world() -> tuple[int, int]:
    """(rank, world size) from the environment torchrun sets; (0, 1) outside it."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def init(rank: int, world: int) -> None:
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=TIMEOUT_S))


class Comm:
    """Send and receive the values that cross ranks; tags number them in one order on every rank."""

    def __init__(self, program, rank_of: dict[str, int], rank: int, meta: dict):
        self.rank = rank
        self.needs: dict[str, set[int]] = {}  # value -> ranks (other than its producer's) that read it
        for device, pieces in program.pieces.items():
            for p in pieces:
                for v in p.inputs:
                    src = program.producer.get(v)
                    if src is not None and rank_of[src] != rank_of[device]:
                        self.needs.setdefault(v, set()).add(rank_of[device])
        self.tag = {v: i for i, v in enumerate(sorted(self.needs))}
        self.src = {v: rank_of[program.producer[v]] for v in self.needs}
        for v in self.needs:
            if v not in meta:
                raise InputError(f"value {v!r} crosses ranks but is neither a tensor nor an int: put its producer "
                                 "and readers on one server")
        self.meta = meta

    def send(self, name: str, value) -> list:
        import torch.distributed as dist
        if name not in self.needs or self.src[name] != self.rank:
            return []
        import torch
        order = self.meta[name].order
        host = torch.tensor([value]) if isinstance(value, int) else value.detach().permute(order).cpu().contiguous()
        return [_Sent(dist.isend(host, r, tag=self.tag[name]), host) for r in sorted(self.needs[name])]

    def recv(self, name: str):
        import torch
        import torch.distributed as dist
        shape, dtype, order = self.meta[name]
        if dtype is int:
            size = torch.empty((1,), dtype=torch.int64)
            dist.recv(size, self.src[name], tag=self.tag[name])
            return int(size[0])
        buffer = torch.empty([shape[i] for i in order], dtype=dtype)
        dist.recv(buffer, self.src[name], tag=self.tag[name])
        return buffer.permute(sorted(range(len(order)), key=order.__getitem__))  # back to the value's own order


class _Sent:
    def __init__(self, work, tensor):
        self.work, self.tensor = work, tensor  # the tensor lives until the send is done

    def wait(self) -> None:
        self.work.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], nproc: int, poll_s: float = 0.05) -> str:
    """Run ``diviml ARGV`` as ``nproc`` ranks on this host (as torchrun would); rank 0's standard output.

    A rank that exits with an error ends the others at once; the error names it and its last message."""
    port = free_port()
    logs, procs = [], []
    for rank in range(nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nproc))
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        logs.append((out, err))
        procs.append(subprocess.Popen([sys.executable, "-m", "diviml", *argv], env=env, stdout=out, stderr=err,
                                      stdin=subprocess.DEVNULL))
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r = failed[0]
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                logs[r][1].seek(0)
                lines = [x for x in logs[r][1].read().decode(errors="replace").splitlines() if x.strip()]
                last = lines[-1].removeprefix("diviml: error: ") if lines else "no message"
                raise DivimlError(f"rank {r} of {nproc} failed (exit status {codes[r]}): {last}")
            if all(c == 0 for c in codes):
                break
            time.sleep(poll_s)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    logs[0][0].seek(0)
    text = logs[0][0].read().decode(errors="replace")
    for out, err in logs:
        out.close()
        err.close()
    return text
