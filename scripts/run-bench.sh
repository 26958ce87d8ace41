#!/bin/sh
# Runs each benchmark given; each prints its own ratios and writes bench/results/<name>.txt.
set -u
rc=0
mkdir -p bench/results
for b in "$@"; do
    name=$(basename "$b")
    echo "== $name"
    { echo "# $name, $(date -u +%Y-%m-%d), $(uname -m), $(nproc) cores"; "$b"; } > "bench/results/$name.txt" 2>&1 || rc=1
    cat "bench/results/$name.txt"
done
exit $rc
