build/bench/bench-train --layers 16 --hidden 32 --heads 4 --kv-heads 1 --ffn 96 --batch 8 --seq 128 --steps 8 --over 1.5,2,4,8 --link both --json
