"""MILP-SPLIT (DiviML): solve the graph module by module with the exact engine, joined by dynamic programming.

The graph is cut into a chain of modules (:mod:`.modules`). The join walks the chain keeping, for each
device of the current module's *exit* task (per sub-batch for the batch objective), the best partial
schedule that ends there. Each step solves the next module exactly (CP-SAT, :func:`.cpsat.solve_jobs`) for
every (state, exit device) pair, given what the partial schedule fixes: when each outside input arrives on
each device, when each device is free, how much memory it has left, and co-located tasks placed earlier.
The solves of a step are independent and run in a process pool, the best-ranked state's first: the
others' solves then carry a *cutoff* (what their exit state already reached), and most end as soon as
CP-SAT proves they cannot improve on it (:func:`step`; googlenet 2.9 to 1.3 s, same plan and bound); at a
multi-channel cut a feasibility test with deadlines on the jobs read later goes first (:func:`solve_late`;
densenet121 2.2 to 1.1 s, same plan).
Each solve is limited by CP-SAT's deterministic time (its work), not the clock, so the answers, the plan
and its bound are the same on every run with the same seed whatever the machine's load; only the run's
time limit is on the clock.
CP-SAT starts from the better of HEFT's schedule and a *guide*: the latest schedule found for a module of
the same structure (tasks, edges, pins; other costs), re-timed. Repeated blocks of other widths (inception's,
densenet's, randwire stages') then start near their optimum (:func:`guided_schedule`; inception_v3 4.9 to 3.6 s).

At a series point the module only sees its one input, so the join is the exact chain DP of the paper:
O(|K|^2 * modules * T), and with exact module solves the latency plan is optimal; the same DP on the
solves' bounds bounds the optimum (with constants, on twin solves without them: :func:`step`).
A module's constants (weight transposes, masks: no graph input reaches them) are first placed, per state,
in an idle gap of the partial schedule where their outputs reach every device before the module can
start, at no loss (:func:`hoist`; inception_v3's plan 0.42% shorter, at its bound). At a multi-channel cut
the other crossing tensors come from the partial schedule that the state keeps (a Viterbi heuristic); the
states are ranked by an *estimate* of the whole makespan (open tensors' finish plus the fastest path after
them), which at a series point orders them as their makespan does. Measured on randwire-ws-s0: ranking by
the estimate beat ranking by the partial makespan (0.891 vs 0.906 ms); adding the same tails to the module
solves' objective made plans worse (0.928 ms), so they are not used there.
Memory is a per-state budget: each module gets what its partial schedule left on each device, so the plan
fits; when no state can place a module, the rest is placed ignoring memory and a repair pass moves tasks
off over-full devices (:func:`repair_memory`). The final plan is always simulated and validated.

Batch objective: as in :mod:`.exact`, the batch is split into L near-equal sub-batches (the promising L
in 1 .. K, :func:`.search.promising_splits`), each a
copy of the graph; the state is the exit device of every copy, and the exit options are each single
device for all copies or free. The plan is the best of the join's plans and the baselines
(:func:`..search.baseline_plan`: HEFT, best single device, data parallelism, the batch streamed through a
pipeline); its bound is the problem's lower bound. The whole batch's walk (L = 1: every task whole) is the
latency problem of whole tasks (:func:`diviml.problem.whole_tasks`); where its cuts are series points the DP on
its module bounds bounds those plans, which the plan reports (``whole_task_bound``,
:func:`..search.whole_task_note`).
"""

from __future__ import annotations

from ._chain import chain_bounds, separable, solve, solve_chain
from ._messages import NAME
from ._partial import repair_memory

__all__ = ["NAME", "chain_bounds", "repair_memory", "separable", "solve", "solve_chain"]
