#!/bin/sh
# cuda-emu-check.sh: runs tests/test-gpt-cuda against gpt/kernels-cuda.cu compiled for the CPU
# with the lockstep emulator of tests/cuda-emu/ (no GPU, no nvcc needed), twice: fibers in order
# and in reverse order; about two minutes on 2 cores. Each <<<grid, block>>> launch becomes
# emu_launch(...); the rest of the .cu is compiled as it is. What it proves and what it cannot:
# tests/cuda-emu/cuda_runtime.h.
#   sh scripts/cuda-emu-check.sh [dir]      (default /tmp/smartswap-cuda-emu)
set -eu
cd "$(dirname "$0")/.."
d=${1:-/tmp/smartswap-cuda-emu}
mkdir -p "$d"
python3 - "$d/kernels-emu.cpp" <<'PY'
import re, sys
s = open('gpt/kernels-cuda.cu').read()
s, n = re.subn(r'(\w+)<<<(.*?)>>>\((.*?)\);', lambda m: 'emu_launch([&]{ %s(%s); }, %s);' % (m.group(1), m.group(3), m.group(2)), s, flags=re.S)
assert n == s.count('emu_launch(') and '<<<' not in s, 'a launch was not translated'
open(sys.argv[1], 'w').write(s)
print('cuda-emu: %d launches translated' % n)
PY
CXX=${CXX:-g++}
CC=${CC:-cc}
$CXX -O1 -g -std=c++17 -Itests/cuda-emu -Igpt -w -c "$d/kernels-emu.cpp" -o "$d/kernels-emu.o"
$CC -std=c11 -O2 -g -D_GNU_SOURCE -DSS_GPT_CUDA=1 -Igpt -Iinclude -Isrc -Wall -Wextra -c tests/test-gpt-cuda.c -o "$d/test.o"
$CC -std=c11 -O2 -g -Igpt -Wall -Wextra -Wno-unknown-pragmas -c gpt/kernels-cpu.c -o "$d/kernels-cpu.o"
$CXX -o "$d/test-gpt-cuda-emu" "$d/test.o" "$d/kernels-emu.o" "$d/kernels-cpu.o" -lm
echo "== fibers in order"
"$d/test-gpt-cuda-emu"
echo "== fibers in reverse order (CUDA_EMU_ORDER=reverse)"
CUDA_EMU_ORDER=reverse "$d/test-gpt-cuda-emu"
