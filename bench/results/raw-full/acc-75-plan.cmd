build/smartswap plan bench/results/raw-full/acc.sstrace --budget 7160320 --iter-time 0.02 --d2h 1 --h2d 1 --json -o bench/results/raw-full/acc.planacc-75
