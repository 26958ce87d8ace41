#!/bin/sh
# fuzz.sh: builds the libFuzzer harnesses (tests/fuzz/fuzz-*.c) with clang
# -fsanitize=fuzzer,address against a library built the same way in $FUZZ_BUILD, then runs each
# for FUZZ_SECONDS (default 60) on a copy of its seed corpus tests/fuzz/<harness>/ (new inputs
# go to $FUZZ_BUILD/corpus/<harness>/, crashes to $FUZZ_BUILD/crash-<harness>-*). One harness at
# a time. Prints one summary line per harness and fails on any crash, leak or timeout.
#   FUZZ_SECONDS=N       seconds per harness (default 60)
#   FUZZ_HARNESSES="a b" a subset (default: every tests/fuzz/fuzz-*.c)
#   FUZZ_OPTIONAL=1      exit 0 with a message when clang/libFuzzer is missing (CI); else exit 1
#   FUZZ_CC=clang        the compiler (needs Debian's clang and libclang-rt-14-dev, see
#                        scripts/deps.sh --fuzz)
#   FUZZ_BUILD=dir       build dir (default build-fuzz); FUZZ_JOBS=N make -j (default 2)
set -u
cd "$(dirname "$0")/.."
CCF=${FUZZ_CC:-clang}
B=${FUZZ_BUILD:-build-fuzz}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
skip() {
    echo "fuzz: $1"
    if [ "${FUZZ_OPTIONAL:-0}" = 1 ]; then echo "fuzz: skipped (FUZZ_OPTIONAL=1)"; exit 0; fi
    echo "  install: sudo apt-get install clang libclang-rt-14-dev   (or: sudo sh scripts/deps.sh --fuzz)"
    exit 1
}
command -v "$CCF" >/dev/null 2>&1 || skip "no $CCF on this machine"
mkdir -p "$B/fuzz"
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$B/fuzz/probe.c"
"$CCF" -fsanitize=fuzzer,address "$B/fuzz/probe.c" -o "$B/fuzz/probe" >"$B/fuzz/probe.log" 2>&1 ||
    skip "$CCF cannot link -fsanitize=fuzzer,address (libFuzzer missing: $(head -1 "$B/fuzz/probe.log"))"

# the library, instrumented for coverage and ASan (no CUDA, no OpenMP: neither is read by a reader)
make -j"$JOBS" BUILD="$B" CC="$CCF" SANITIZE=address SS_CUDA=0 NO_OMP=1 \
     CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" "$B/libsmartswap.a" >"$B/fuzz/lib.log" 2>&1 ||
    { tail -20 "$B/fuzz/lib.log"; echo "fuzz: building the library with $CCF failed"; exit 1; }
LIBS="-pthread -lm"
[ -f /usr/include/cjson/cJSON.h ] && LIBS="$LIBS -lcjson"
[ -n "$(ls /usr/lib/*/libopenblas.so 2>/dev/null)" ] && LIBS="$LIBS -lopenblas"

HARNESSES=${FUZZ_HARNESSES:-$(ls tests/fuzz/fuzz-*.c | sed 's|tests/fuzz/fuzz-||; s|\.c$||')}
fail=0
for h in $HARNESSES; do
    bin="$B/fuzz/fuzz-$h"
    "$CCF" -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address -Wall -Wextra -Iinclude -Isrc \
        "tests/fuzz/fuzz-$h.c" "$B/libsmartswap.a" $LIBS -o "$bin" || { echo "fuzz-$h: build failed"; fail=1; continue; }
    mkdir -p "$B/corpus/$h" "tests/fuzz/$h"
    log="$B/fuzz/fuzz-$h.log"
    t0=$(date +%s)
    "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$B/crash-$h-" "$B/corpus/$h" "tests/fuzz/$h" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1)
    seeds=$(ls "tests/fuzz/$h" | wc -l)
    echo "fuzz-$h: rc $rc, $(( $(date +%s) - t0 )) s, ${execs:-?} executions, $cov, $corp, $seeds seeds"
    if [ $rc != 0 ]; then
        fail=1
        grep -E 'ERROR|SUMMARY|fuzz property|Test unit written' "$log" | head -8
        echo "  full log: $log"
    fi
done
[ $fail = 0 ] && echo "fuzz: every harness ran ${SECS} s without a crash" || echo "fuzz: FAILED"
exit $fail
