/work/main/.venv/bin/python bench/torch_compare.py --threads 1 --steps 6 --detail-runs 2 --json bench/results/raw-quick/torch_compare.json --hidden 256 --layers 2
