build/smartswap replay bench/results/raw-full/acc.sstrace --mode off --budget 8738816 --iters 12 --json --iter-time 0.02 --d2h 1 --h2d 1
