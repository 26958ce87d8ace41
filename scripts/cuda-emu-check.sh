#!/bin/sh
# cuda-emu-check.sh: runs tests/test-gpt-cuda against gpt/kernels-cuda.cu compiled for the CPU
# with the lockstep emulator of tests/cuda-emu/ (no GPU, no nvcc needed), twice: fibers in order
# and in reverse order; about two minutes on 2 cores. Each <<<grid, block>>> launch becomes
# emu_launch(...); the rest of the .cu is compiled as it is. What it proves and what it cannot:
# tests/cuda-emu/cuda_runtime.h.
# Then (first, a few seconds) the cuda device itself: src/device-cuda.c in the programs built with
# SS_CUDA=1, run against tests/cuda-emu/fake-cudart.c loaded as libcudart.so.13: the conformance
# suite (test-device's cuda part), the allocator (test-alloc-device), the virtual-memory slots
# (test-device-cuda-vm, with and without virtual memory).
#   sh scripts/cuda-emu-check.sh [dir]      (default /tmp/smartswap-cuda-emu)
#   CUDA_EMU_PARTS="device" or "kernels" runs one part; BUILD=dir the build to use (default build)
set -eu
cd "$(dirname "$0")/.."
d=${1:-/tmp/smartswap-cuda-emu}
mkdir -p "$d"
parts=${CUDA_EMU_PARTS:-device kernels}
case " $parts " in *" device "*)
    b=${BUILD:-build}
    ${MAKE:-make} -s -j2 BUILD="$b" SS_CUDA=1 "$b/tests/test-device" "$b/tests/test-alloc-device" "$b/tests/test-device-cuda-vm"
    echo 'libcudart.so.13 { global: cuda*; local: *; };' > "$d/fake.map"
    ${CC:-cc} -std=c11 -O1 -g -fPIC -shared -pthread -Wall -Wextra -Werror -I"${CUDA_HOME:-/usr/local/cuda}/include" \
        tests/cuda-emu/fake-cudart.c -o "$d/libcudart.so.13" -Wl,-soname,libcudart.so.13 -Wl,--version-script="$d/fake.map"
    run() {   # name, then the command; a skip of the cuda part is a failure here
        name=$1; shift
        echo "== $name"
        out=$(LD_LIBRARY_PATH="$d" "$@" 2>&1) || { printf '%s\n' "$out"; echo "cuda-emu: $name FAILED"; exit 1; }
        printf '%s\n' "$out" | tail -n 3
        printf '%s\n' "$out" | grep -q '^skip.*no GPU' && { echo "cuda-emu: $name did not open the fake cuda device"; exit 1; }
        return 0
    }
    run "test-device (conformance on cuda = device-cuda.c + fake-cudart)" env SMARTSWAP_TEST_BACKEND=cuda "$b/tests/test-device"
    LD_LIBRARY_PATH="$d" SMARTSWAP_TEST_BACKEND=cuda "$b/tests/test-device" 2>&1 | grep -q '^ok   t_compute' || { echo "cuda-emu: no cuda conformance run"; exit 1; }
    run "test-alloc-device on cuda" env SMARTSWAP_TEST_DEVICE=cuda "$b/tests/test-alloc-device"
    run "test-device-cuda-vm (virtual memory)" env SMARTSWAP_TEST_EXPECT_VM=1 "$b/tests/test-device-cuda-vm"
    run "test-device-cuda-vm (cuMemCreate fails: plain segments)" env FAKE_CUDA_NO_VMM=1 "$b/tests/test-device-cuda-vm"
    ;;
esac
case " $parts " in *" kernels "*) ;; *) exit 0 ;; esac
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
