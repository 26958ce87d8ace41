build/bench/bench-profile
