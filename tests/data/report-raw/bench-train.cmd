build/bench/bench-train --layers 8 --hidden 16 --heads 2 --kv-heads 1 --ffn 48 --batch 4 --seq 128 --steps 8 --over 2 --link both --json --quick
