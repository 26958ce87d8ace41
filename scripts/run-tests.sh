#!/bin/sh
# Runs each test binary given, prints its output, and a total. Exits non-zero if any failed.
# Each test prints its own "N passed, N failed[, N skipped]" line; this adds them up.
set -u
tp=0; tf=0; ts=0; bad=""
for t in "$@"; do
    [ -x "$t" ] || { echo "missing test binary $t (did it fail to build?)"; bad="$bad $t"; continue; }
    echo "== $(basename "$t")"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(printf '%s' "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p'); p=${p:-0}
    f=$(printf '%s' "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p'); f=${f:-0}
    s=$(printf '%s' "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p'); s=${s:-0}
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s))
    if [ $rc -ne 0 ] || [ -z "$line" ]; then bad="$bad $(basename "$t")"; [ "$f" = 0 ] && tf=$((tf + 1)); fi
done
echo "== total"
[ -n "$bad" ] && echo "failing:$bad"
echo "$tp passed, $tf failed, $ts skipped"
[ -z "$bad" ]
