build/smartswap plan bench/results/raw-quick/acc.sstrace --budget 5248122 --iter-time 0.02 -o bench/results/raw-quick/acc.planacc-70
