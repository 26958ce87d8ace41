build/smartswap replay bench/results/raw-full/acc.sstrace --budget 6630400 --plan bench/results/raw-full/acc.planacc-50 --iters 12 --json --iter-time 0.02 --d2h 1 --h2d 1
