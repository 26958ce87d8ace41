build/smartswap plan bench/results/raw-quick/acc.sstrace --budget 6630400 --iter-time 0.02 --d2h 1 --h2d 1 --json -o bench/results/raw-quick/acc.planacc-50
