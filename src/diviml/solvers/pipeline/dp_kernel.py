"""The inner loop of the pipeline DP, compiled with numba: every ideal J above one ideal I, and the DP update.

From ideal ``i`` the ideals J > I are walked depth-first along the canonical tree (a child adds one class
whose position in the topological order is after the last one added), keeping S = J \\ I's compute per
device class, its transfer hops (a producer's output enters S once if consumed there and produced
outside; leaves S once if produced there and consumed outside) and its memory incrementally. Each J
updates ``dp[J, s]`` for every state ``s`` with a free device of class d:
``max(dp[I, s - radix[d]], load_d(S))``. A branch stops when S's compute exceeds ``upper`` on every device
class (compute only grows along a branch), or S no longer fits any class's memory.

All inputs are flat arrays (CSR lists), so the loop runs at compiled speed; the Python DP in
:mod:`.dp` prepares them and reconstructs the plan.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def walk_from(i, trans_ptr, trans_pos, trans_class, trans_child, times, sizes, memory, comm_class, hop,
              prod_ptr, prod_list, cons_ptr, cons_list, producer_class, need, state_ok, radix, upper,
              dp, arg_prev, arg_class, in_set, count, comp, comm, barred, stack_ideal, stack_next, stack_class,
              stack_delta):
    """Walk every J > ideal ``i`` and update ``dp``; returns the number of (I, J) pairs visited. ``comp``
    sums S's finite times per device class and ``barred`` counts its classes that may not run there: a
    running sum with infinite times would give inf - inf = nan when a class leaves S, and a nan load passes
    every comparison."""
    nd = times.shape[0]
    n_states = dp.shape[1]
    pairs = 0
    size = 0.0
    depth = 0
    stack_ideal[0] = i
    stack_next[0] = trans_ptr[i]
    delta = np.zeros(nd)
    while depth >= 0:
        ideal = stack_ideal[depth]
        t = stack_next[depth]
        if t >= trans_ptr[ideal + 1]:
            if depth > 0:  # leave this frame: take its class out of S
                c = stack_class[depth]
                size -= sizes[c]
                for d in range(nd):
                    if times[d, c] == np.inf:
                        barred[d] -= 1
                    else:
                        comp[d] -= times[d, c]
                    comm[d] -= stack_delta[depth, d]
                for q in range(cons_ptr[c], cons_ptr[c + 1]):
                    count[cons_list[q]] -= 1
                in_set[c] = False
            depth -= 1
            continue
        stack_next[depth] = t + 1
        c = trans_class[t]
        child = trans_child[t]
        # add class c to S, with the change in transfer hops
        for d in range(nd):
            delta[d] = 0.0
        for q in range(prod_ptr[c], prod_ptr[c + 1]):
            k = prod_list[q]
            before = 1 if count[k] > 0 else 0
            after = 1 if count[k] < need[k] else 0
            if before != after:
                for d in range(nd):
                    if comm_class[d]:
                        delta[d] += hop[d, k] * (after - before)
        in_set[c] = True
        for q in range(cons_ptr[c], cons_ptr[c + 1]):
            k = cons_list[q]
            if in_set[producer_class[k]]:
                old = 1 if count[k] < need[k] else 0
                count[k] += 1
                new = 1 if count[k] < need[k] else 0
            else:
                old = 1 if count[k] > 0 else 0
                count[k] += 1
                new = 1 if count[k] > 0 else 0
            if old != new:
                for d in range(nd):
                    if comm_class[d]:
                        delta[d] += hop[d, k] * (new - old)
        size += sizes[c]
        alive = False
        for d in range(nd):
            if times[d, c] == np.inf:
                barred[d] += 1
            else:
                comp[d] += times[d, c]
            comm[d] += delta[d]
        pairs += 1
        for d in range(nd):
            if barred[d] > 0 or size > memory[d]:
                continue
            if comp[d] <= upper:
                alive = True
            load = comp[d] + comm[d]
            for s in range(n_states):
                if state_ok[d, s]:
                    before_state = s - radix[d]
                    cand = dp[i, before_state]
                    if load > cand:
                        cand = load
                    if cand < dp[child, s]:
                        dp[child, s] = cand
                        arg_prev[child, s] = i
                        arg_class[child, s] = d
        # go down to the child: along its transitions after position trans_pos[t] while S can still be part
        # of a plan, else none (the next step leaves the frame and takes c out of S again)
        depth += 1
        stack_ideal[depth] = child
        stack_class[depth] = c
        for d in range(nd):
            stack_delta[depth, d] = delta[d]
        lo, hi = trans_ptr[child], trans_ptr[child + 1]
        if not alive:
            lo = hi
        pos = trans_pos[t]
        while lo < hi:  # first transition of the child with a larger position
            mid = (lo + hi) // 2
            if trans_pos[mid] <= pos:
                lo = mid + 1
            else:
                hi = mid
        stack_next[depth] = lo
    return pairs
