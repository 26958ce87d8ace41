build/smartswap trace stats bench/results/raw-quick/acc.sstrace
