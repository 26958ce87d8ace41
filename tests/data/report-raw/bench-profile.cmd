build/bench/bench-profile 20000 10
