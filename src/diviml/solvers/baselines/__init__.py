"""The baselines people compare against, each a registered solver: the best single device, unequal data
parallelism, HEFT, a greedy fill, a METIS partition, local search and PipeDream's chain split."""
