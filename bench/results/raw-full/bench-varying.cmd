build/bench/bench-varying --json --steps 40
