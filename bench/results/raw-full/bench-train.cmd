build/bench/bench-train --layers 16 --hidden 16 --heads 2 --kv-heads 1 --ffn 48 --batch 4 --seq 128 --steps 8 --over 1.5,2,4,8 --link both --json
