build/smartswap replay bench/results/raw-quick/acc.sstrace --budget 6630400 --plan bench/results/raw-quick/acc.planacc-50 --iters 6 --json --iter-time 0.02 --d2h 1 --h2d 1
