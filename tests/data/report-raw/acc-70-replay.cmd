build/smartswap replay bench/results/raw-quick/acc.sstrace --budget 5248122 --plan bench/results/raw-quick/acc.planacc-70 --iter-time 0.02 --iters 6 --json
