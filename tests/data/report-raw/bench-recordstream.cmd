build/bench/bench-recordstream
