#!/bin/sh
# Runs each benchmark given; each prints its own ratios and writes bench/results/<name>.txt.
set -u
rc=0
for b in "$@"; do
    name=$(basename "$b")
    echo "== $name"
    "$b" | tee "bench/results/$name.txt" || rc=1
done
exit $rc
