"""Pipelined throughput (max-load, NeurIPS 2020): the contracted graph and stage checks (:mod:`.common`),
fast load evaluation (:mod:`.evaluate`), the dynamic program over ideals (:mod:`.dp`, kernel in
:mod:`.dp_kernel`) and the integer program (:mod:`.ip`)."""
