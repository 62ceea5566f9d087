"""Fast max-load evaluation of class placements (numpy), for search-based pipeline baselines.

Gives the same loads as :func:`diviml.simulate.pipeline_loads` for host-staged transfers (the DP's model);
final plans still go through the simulator and the validator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...errors import InfeasibleError
from ...problem import Problem
from .common import Contracted


@dataclass(frozen=True)
class ClassEvaluator:
    problem: Problem
    contracted: Contracted

    @cached_property
    def devices(self) -> list[str]:
        return [d.name for d in self.problem.platform.devices]

    @cached_property
    def time(self) -> np.ndarray:
        """(classes, devices) compute, inf where not allowed."""
        p, c = self.problem, self.contracted
        out = np.full((c.num_classes, len(self.devices)), math.inf)
        for k, members in enumerate(c.members):
            for j, d in enumerate(self.devices):
                if all(d in p.allowed_devices[t] for t in members):
                    out[k, j] = sum(p.time(t, d) for t in members)
        return out

    def require_placeable(self) -> None:
        """Refuse, in one line, where a class may run on no device: a contiguous split's cycle of units
        (a co-location group and the tasks on a path between its members) whose tasks share no device."""
        for k in np.flatnonzero(~np.isfinite(self.time).any(axis=1)):
            members = self.contracted.members[k]
            shown = ", ".join(repr(t) for t in members[:4]) + (" ..." if len(members) > 4 else "")
            raise InfeasibleError(f"no contiguous split: tasks {shown} must share a device (a co-location group "
                                  "and the tasks on a path between its members) but no device may run them all: "
                                  "drop --contiguous or relax the group")

    @cached_property
    def fastest(self) -> np.ndarray:
        """Each class's time on the fastest device that may run it (0 where none may)."""
        return np.nan_to_num(np.nanmin(np.where(np.isfinite(self.time), self.time, np.nan), axis=1))

    @cached_property
    def size(self) -> np.ndarray:
        g = self.problem.graph
        return np.array([sum(g.by_id[t].memory_bytes for t in ms) for ms in self.contracted.members])

    @cached_property
    def capacity(self) -> np.ndarray:
        return np.array([d.memory_bytes for d in self.problem.platform.devices])

    @cached_property
    def _edges(self):
        """(producer index, producer class, consumer class) triples and hop costs (producers, devices)."""
        p = self.problem
        ks, pcs, ccs = [], [], []
        hop = np.zeros((len(self.contracted.producers), len(self.devices)))
        for k, (t, pc, consumers) in enumerate(self.contracted.producers):
            for c in consumers:
                ks.append(k)
                pcs.append(pc)
                ccs.append(c)
            for j, d in enumerate(self.devices):
                hop[k, j] = p.platform.hop_time(p.graph.by_id[t], p.platform.by_name[d])
        return np.array(ks, dtype=np.int64), np.array(pcs, dtype=np.int64), np.array(ccs, dtype=np.int64), hop

    def loads(self, dev: np.ndarray) -> np.ndarray:
        """Load of every device for classes placed on device indices ``dev``."""
        n = len(self.devices)
        load = np.bincount(dev, weights=self.time[np.arange(len(dev)), dev], minlength=n)
        ks, pcs, ccs, hop = self._edges
        if len(ks):
            dp, dc = dev[pcs], dev[ccs]
            cross = dp != dc
            if cross.any():
                k_out = np.unique(ks[cross])
                np.add.at(load, dev[self._producer_class[k_out]], hop[k_out, dev[self._producer_class[k_out]]])
                pairs = np.unique(ks[cross] * n + dc[cross])
                kk, jj = pairs // n, pairs % n
                np.add.at(load, jj, hop[kk, jj])
        return load

    @cached_property
    def _producer_class(self) -> np.ndarray:
        return np.array([pc for _, pc, _ in self.contracted.producers], dtype=np.int64)

    def value(self, dev: np.ndarray) -> float:
        """Max load (inf when memory is exceeded)."""
        used = np.bincount(dev, weights=self.size, minlength=len(self.devices))
        if (used > self.capacity * (1 + 1e-12)).any():
            return math.inf
        return float(self.loads(dev).max())

    def placement(self, dev: np.ndarray) -> dict[str, str]:
        return {t: self.devices[dev[c]] for t, c in self.contracted.class_of.items()}
