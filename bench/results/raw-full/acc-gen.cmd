build/smartswap trace gen --layers 4 --hidden 64 --heads 2 --ffn 128 --vocab 256 --seq 256 --dtype-bytes 4 -o bench/results/raw-full/acc.sstrace
