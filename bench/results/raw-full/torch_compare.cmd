.venv/bin/python bench/torch_compare.py --threads 1 --steps 8 --detail-runs 3 --json bench/results/raw-full/torch_compare.json
