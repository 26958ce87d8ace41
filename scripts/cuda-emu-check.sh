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
# Then ("train", a few seconds) the trainer on the cuda device: build/smartswap-cuda-emu (the CLI
# with the kc_* launchers replaced by tests/cuda-emu/kernels-shim.c, which runs the CPU kernels as
# host functions on the compute stream) against the same stand-in: `train --device cuda` in modes
# none, recompute, offload-all, smartswap and smartswap --swap-only (the last two under the state
# plus a quarter of none's activation peak, with plain segments and with 64 KiB virtual-memory
# granules) must give none's losses (bit for bit, per step) and final weights (byte for byte),
# and so must cpu-sim's run: the plumbing (allocation, transfers, streams, events), not the
# GPU kernels, which the "kernels" part covers.
# The train part first runs tests/test-gpt-cuda.c's t_ops_bf16 (the cuda table's bf16 conversions
# and products against the CPU table's path) linked to the shim (build/tests/test-gpt-cuda-shim).
# It then runs `--dtype bf16` (activations stored as bf16, gpt/model.c; the products through the
# cuda table's bf16 entries, the shim's: the CPU's on the widened operands): its losses must
# differ from fp32's, its recompute, offload-all, smartswap, --swap-only and granule runs must
# equal its none bit for bit, and so must cpu-sim's bf16 run (the CPU table, where the model
# widens the operands itself: the two paths give the same bits). It also checks that without a GPU `train --device cuda` fails in one line naming
# CUDA with exit 1 (the real CLI on this machine's missing driver, and the stand-in with
# FAKE_CUDA_DEVICES=0). Last, MoE (--moe 4:2 --seq 32:64) on the cuda device: recompute,
# offload-all and smartswap equal its none bit for bit, and so does cpu-sim's run.
# Part "gpu-check" (about 40 s; in the default list, not in .ci/run's) runs bench/gpu-check.sh
# --quick on the same stand-in (GPU_CHECK_FORCE=1, the build given, build/smartswap-cuda-emu as
# the CLI, small shapes, limits x10): its alloc, trainer (none twice, recompute, smartswap at a
# quarter of none's peak, bit-identical; the bf16 pair and the MoE pair) and replay stages and summary table; the device and
# kernels stages' programs are the parts "device" and "kernels".
#   sh scripts/cuda-emu-check.sh [dir]      (default /tmp/smartswap-cuda-emu)
#   CUDA_EMU_PARTS="device", "train", "kernels" or "gpu-check" runs one part (several: "device train");
#   BUILD=dir the build to use (default build)
set -eu
cd "$(dirname "$0")/.."
d=${1:-/tmp/smartswap-cuda-emu}
mkdir -p "$d"
parts=${CUDA_EMU_PARTS:-device train kernels gpu-check}
b=${BUILD:-build}
case " $parts " in *" device "*|*" train "*|*" gpu-check "*)
    echo 'libcudart.so.13 { global: cuda*; local: *; };' > "$d/fake.map"
    ${CC:-cc} -std=c11 -O1 -g -fPIC -shared -pthread -Wall -Wextra -Werror -I"${CUDA_HOME:-/usr/local/cuda}/include" \
        tests/cuda-emu/fake-cudart.c -o "$d/libcudart.so.13" -Wl,-soname,libcudart.so.13 -Wl,--version-script="$d/fake.map"
    ;;
esac
case " $parts " in *" device "*)
    ${MAKE:-make} -s -j2 BUILD="$b" SS_CUDA=1 "$b/tests/test-device" "$b/tests/test-alloc-device" "$b/tests/test-device-cuda-vm"
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
case " $parts " in *" train "*)
    ${MAKE:-make} -s -j2 BUILD="$b" SS_CUDA=1 "$b/smartswap" "$b/smartswap-cuda-emu" "$b/tests/test-gpt-cuda-shim"
    # the cuda table's bf16 entries' test (tests/test-gpt-cuda.c t_ops_bf16) on the shim kernels
    echo "== test-gpt-cuda t_ops_bf16 (gpt/ops-cuda.c's bf16 entries on the shim kernels and the fake runtime)"
    out=$(TEST_GPT_CUDA_ONLY=t_ops_bf16 LD_LIBRARY_PATH="$d" "$b/tests/test-gpt-cuda-shim" 2>&1) &&
        printf '%s\n' "$out" | grep -q '^ok   t_ops_bf16' || { printf '%s\n' "$out"; echo "cuda-emu: t_ops_bf16 on the shim FAILED"; exit 1; }
    printf '%s\n' "$out" | tail -n 1
    # 8 layers: the saved activations dwarf one operator's working set, so a quarter of them
    # (on top of the state) is above the smallest budget
    M="train --layers 8 --hidden 32 --heads 4 --kv-heads 1 --ffn 64 --seq 64 --batch 8 --steps 6 --quiet"
    emu() {   # name, then flags: one run on the cuda device (stand-in runtime, shim kernels)
        name=$1; shift
        timeout 120 env LD_LIBRARY_PATH="$d" "$b/smartswap-cuda-emu" $M --device cuda --log "$d/$name.jsonl" \
            --save-weights "$d/w-$name.bin" "$@" > "$d/$name.out" 2>&1 ||
            { tail -n 20 "$d/$name.out"; echo "cuda-emu: train $name FAILED (exit $?)"; exit 1; }
    }
    same() {   # name [note [reference run, default none]]: losses and weights equal the reference's
        r=${3:-none}
        grep -o '"loss_hex": "[^"]*"' "$d/$r.jsonl" > "$d/$r.loss"
        grep -o '"loss_hex": "[^"]*"' "$d/$1.jsonl" > "$d/$1.loss"
        [ "$(wc -l < "$d/$r.loss")" -eq 6 ] || { echo "cuda-emu: $r logged no 6 steps"; exit 1; }
        cmp -s "$d/$r.loss" "$d/$1.loss" || { diff "$d/$r.loss" "$d/$1.loss" | head; echo "cuda-emu: train $1: losses differ from $r"; exit 1; }
        cmp -s "$d/w-$r.bin" "$d/w-$1.bin" || { echo "cuda-emu: train $1: weights differ from $r"; exit 1; }
        echo "   $1: $(tail -n 1 "$d/$1.loss" | cut -d'"' -f4) = $r's, weights identical${2:-}"
    }
    echo "== train --device cuda (smartswap-cuda-emu: shim kernels on the fake runtime)"
    emu none
    grep -q 'kernels  cuda-emu' "$d/none.out" || { echo "cuda-emu: the run did not use the shim kernels on the cuda device"; exit 1; }
    peak=$(sed -n 's/^totals: .* peak=\([0-9]*\) .*/\1/p' "$d/none.out")
    state=$(sed -n '1s/.*"state_bytes": \([0-9]*\).*/\1/p' "$d/none.jsonl")
    [ -n "$peak" ] && [ -n "$state" ] || { echo "cuda-emu: no peak/state in none's output"; exit 1; }
    q=$((state + (peak - state) / 4))
    echo "   none: peak $peak B, state $state B; the swapping runs get state + 1/4 of the activations = $q B"
    emu recompute --mode recompute; same recompute
    emu offload-all --mode offload-all; same offload-all
    emu smartswap --mode smartswap --budget "$q"
    sw=$(sed -n 's/^totals: .* swapped_out=\([0-9]*\) .*/\1/p' "$d/smartswap.out")
    [ "${sw:-0}" -gt 0 ] || { echo "cuda-emu: smartswap under $q B swapped nothing"; exit 1; }
    same smartswap " (swapped out $sw B)"
    emu swap-only --mode smartswap --swap-only --budget "$q"; same swap-only
    # virtual-memory segments: the smallest budget counts whole granules (docs/allocator.md), so
    # with 64 KiB granules this small model's is above q; the VM runs get the larger of the two
    # (the trainer's own figure, from its refusal at q, which names it in bytes)
    vmq() {   # extra flags: prints the budget for a 64 KiB-granule run
        f=$(SMARTSWAP_GRANULE=65536 LD_LIBRARY_PATH="$d" timeout 120 "$b/smartswap-cuda-emu" $M --device cuda \
            --steps 1 --mode smartswap --budget "$q" "$@" 2>&1 |
            sed -n 's/.*smallest budget that can train this configuration: [^(]*(\([0-9]*\) bytes).*/\1/p' | head -n 1)
        if [ -n "$f" ] && [ "$f" -gt "$q" ]; then echo "$f"; else echo "$q"; fi
    }
    qv=$(vmq)
    [ "$qv" -lt "$peak" ] || { echo "cuda-emu: the 64 KiB-granule smallest budget $qv B is not below none's peak $peak B"; exit 1; }
    SMARTSWAP_GRANULE=65536 emu smartswap-vm --mode smartswap --budget "$qv"
    same smartswap-vm " (64 KiB granules, budget $qv B: the larger of q and the smallest in granules)"
    timeout 120 "$b/smartswap" $M --device cpu-sim --log "$d/cpu-sim.jsonl" --save-weights "$d/w-cpu-sim.bin" \
        > "$d/cpu-sim.out" 2>&1 || { tail -n 20 "$d/cpu-sim.out"; echo "cuda-emu: cpu-sim run FAILED"; exit 1; }
    same cpu-sim " (cpu-sim, the CPU kernels on host memory)"
    # --dtype bf16 (activations stored as bf16, the products on bf16 operands through the cuda
    # table's bf16 entries; the shim's: the CPU's on the widened operands): the losses must move
    # off fp32's, and every mode must reproduce bf16 none's, cpu-sim's bf16 run too
    emu bf16 --dtype bf16
    grep -q '^  dtype    bf16 activations' "$d/bf16.out" || { echo "cuda-emu: --dtype bf16 did not store bf16 activations"; exit 1; }
    grep -o '"loss_hex": "[^"]*"' "$d/bf16.jsonl" > "$d/bf16.loss"
    cmp -s "$d/none.loss" "$d/bf16.loss" && { echo "cuda-emu: --dtype bf16 gave fp32's losses bit for bit: nothing was rounded"; exit 1; }
    s16=$(sed -n '$s/.*"saved_bytes": \([0-9]*\).*/\1/p' "$d/bf16.jsonl"); s32=$(sed -n '$s/.*"saved_bytes": \([0-9]*\).*/\1/p' "$d/none.jsonl")
    [ -n "$s16" ] && [ -n "$s32" ] && [ $((s16 * 100)) -le $((s32 * 55)) ] ||
        { echo "cuda-emu: --dtype bf16 saved $s16 B a step against fp32's $s32 B (not about half)"; exit 1; }
    echo "   bf16 saved a step: $s16 B (fp32: $s32 B)"
    echo "   bf16 none: $(tail -n 1 "$d/bf16.loss" | cut -d'"' -f4) (fp32: $(tail -n 1 "$d/none.loss" | cut -d'"' -f4))"
    emu bf16-recompute --mode recompute --dtype bf16; same bf16-recompute "" bf16
    emu bf16-offload-all --mode offload-all --dtype bf16; same bf16-offload-all "" bf16
    emu bf16-smartswap --mode smartswap --budget "$q" --dtype bf16
    sw=$(sed -n 's/^totals: .* swapped_out=\([0-9]*\) .*/\1/p' "$d/bf16-smartswap.out")
    [ "${sw:-0}" -gt 0 ] || { echo "cuda-emu: bf16 smartswap under $q B swapped nothing"; exit 1; }
    same bf16-smartswap " (swapped out $sw B)" bf16
    emu bf16-swap-only --mode smartswap --swap-only --budget "$q" --dtype bf16; same bf16-swap-only "" bf16
    qv=$(vmq --dtype bf16)
    SMARTSWAP_GRANULE=65536 emu bf16-smartswap-vm --mode smartswap --budget "$qv" --dtype bf16
    same bf16-smartswap-vm " (64 KiB granules, budget $qv B)" bf16
    timeout 120 "$b/smartswap" $M --device cpu-sim --dtype bf16 --log "$d/bf16-cpu-sim.jsonl" \
        --save-weights "$d/w-bf16-cpu-sim.bin" > "$d/bf16-cpu-sim.out" 2>&1 ||
        { tail -n 20 "$d/bf16-cpu-sim.out"; echo "cuda-emu: bf16 cpu-sim run FAILED"; exit 1; }
    same bf16-cpu-sim " (cpu-sim: the model widens the operands, the CPU table has no bf16 products)" bf16
    nogpu() {   # name, then the command: exit 1 and one line naming CUDA
        name=$1; shift
        r=0; out=$("$@" $M --device cuda 2>&1) || r=$?
        [ $r = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && printf '%s\n' "$out" | grep -q 'CUDA' ||
            { printf '%s\n' "$out"; echo "cuda-emu: $name: --device cuda without a GPU gave exit $r, not one line naming CUDA and exit 1"; exit 1; }
        echo "   $name: exit 1, '$out'"
    }
    nogpu "no GPU (this machine's driver)" "$b/smartswap"
    nogpu "no GPU (FAKE_CUDA_DEVICES=0)" env LD_LIBRARY_PATH="$d" FAKE_CUDA_DEVICES=0 "$b/smartswap-cuda-emu"
    # MoE on the cuda device: the router's choices come to the host (one download per MoE layer),
    # the runs are built there and their tables uploaded (gpt/model.c op_moe_route); lengths vary
    # per step (--seq 32:64), so the runs, tiles and operator sequence vary too. Every mode equals
    # cuda none, which equals cpu-sim's run (the shim's MoE launchers are the CPU's k_moe_*).
    M="train --layers 4 --hidden 32 --heads 4 --kv-heads 1 --ffn 32 --moe 4:2 --seq 32:64 --batch 8 --steps 6 --quiet"
    echo "== train --device cuda --moe 4:2 --seq 32:64"
    emu moe
    peak=$(sed -n 's/^totals: .* peak=\([0-9]*\) .*/\1/p' "$d/moe.out")
    state=$(sed -n '1s/.*"state_bytes": \([0-9]*\).*/\1/p' "$d/moe.jsonl")
    er=$(sed -n '1s/.*"experts_run": \([0-9]*\).*/\1/p' "$d/moe.jsonl")
    [ -n "$peak" ] && [ -n "$state" ] && [ "${er:-0}" -gt 0 ] || { echo "cuda-emu: moe none: no peak/state or no expert ran"; exit 1; }
    mq() {   # extra env (name=value ...): the larger of state + 1/4 of the activations and the smallest budget
        q=$((state + (peak - state) / 4))
        f=$(env "$@" LD_LIBRARY_PATH="$d" timeout 120 "$b/smartswap-cuda-emu" $M --device cuda \
            --steps 1 --mode smartswap --budget "$q" 2>&1 |
            sed -n 's/.*smallest budget that can train this configuration: [^(]*(\([0-9]*\) bytes).*/\1/p' | head -n 1)
        if [ -n "$f" ] && [ "$f" -gt "$q" ]; then echo "$f"; else echo "$q"; fi
    }
    mqp=$(mq SMARTSWAP_GRANULE=0)
    [ "$mqp" -lt "$peak" ] || { echo "cuda-emu: moe: the swapping budget $mqp B is not below none's peak $peak B"; exit 1; }
    echo "   moe none: peak $peak B, state $state B, $er expert MLPs run in step 1; smartswap under $mqp B"
    emu moe-recompute --mode recompute; same moe-recompute "" moe
    emu moe-offload-all --mode offload-all; same moe-offload-all "" moe
    emu moe-smartswap --mode smartswap --budget "$mqp"
    sw=$(sed -n 's/^totals: .* swapped_out=\([0-9]*\) .*/\1/p' "$d/moe-smartswap.out")
    [ "${sw:-0}" -gt 0 ] || { echo "cuda-emu: moe smartswap under $mqp B swapped nothing"; exit 1; }
    same moe-smartswap " (budget $mqp B, swapped out $sw B)" moe
    timeout 120 "$b/smartswap" $M --device cpu-sim --log "$d/moe-cpu-sim.jsonl" --save-weights "$d/w-moe-cpu-sim.bin" \
        > "$d/moe-cpu-sim.out" 2>&1 || { tail -n 20 "$d/moe-cpu-sim.out"; echo "cuda-emu: moe cpu-sim run FAILED"; exit 1; }
    same moe-cpu-sim " (cpu-sim, the CPU kernels on host memory)" moe
    ;;
esac
case " $parts " in *" gpu-check "*)
    ${MAKE:-make} -s -j2 BUILD="$b" SS_CUDA=1 "$b/smartswap-cuda-emu" "$b/tests/test-alloc-device"
    echo "== bench/gpu-check.sh --quick on the stand-in runtime (alloc, trainer, replay)"
    # 16 thin layers: a quarter of none's peak is above the smallest budget; the replay's model
    # fits the stand-in's 512 MiB
    OUT="$d/gpu-check" LD_LIBRARY_PATH="$d" FAKE_CUDA_MIB=512 GPU_CHECK_FORCE=1 GPU_CHECK_BUILD="$b" \
        GPU_CHECK_CLI="$b/smartswap-cuda-emu" GPU_CHECK_LIMIT_SCALE=10 GPU_CHECK_STAGES="alloc trainer replay" GPU_CHECK_TRAIN_BF16=1 GPU_CHECK_TRAIN_MOE=1 \
        GPU_CHECK_TRAIN_ARGS="--layers 16 --hidden 32 --heads 4 --kv-heads 1 --ffn 64 --seq 64 --batch 16 --steps 4" \
        GPU_CHECK_REPLAY_ARGS="--layers 4 --hidden 256 --heads 4 --ffn 688 --vocab 1024 --batch 4 --seq 512" \
        GPU_CHECK_REPLAY_BUDGET=96MiB GPU_CHECK_REPLAY_HOST=64MiB bash bench/gpu-check.sh --quick > "$d/gpu-check.out" 2>&1 ||
        { tail -n 30 "$d/gpu-check.out"; echo "cuda-emu: gpu-check on the stand-in FAILED"; exit 1; }
    sed -n '/^======== summary/,$p' "$d/gpu-check.out"
    grep -q '^trainer  PASS .*bit-identical to none (and none to itself): yes' "$d/gpu-check.out" ||
        { echo "cuda-emu: gpu-check's trainer stage did not pass"; exit 1; }
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
$CC -std=c11 -O2 -g -D_GNU_SOURCE -DSS_GPT_CUDA=1 -DSS_GPT_NO_OPS=1 -Igpt -Iinclude -Isrc -Wall -Wextra -c tests/test-gpt-cuda.c -o "$d/test.o"
$CC -std=c11 -O2 -g -Igpt -Wall -Wextra -Wno-unknown-pragmas -c gpt/kernels-cpu.c -o "$d/kernels-cpu.o"
$CXX -o "$d/test-gpt-cuda-emu" "$d/test.o" "$d/kernels-emu.o" "$d/kernels-cpu.o" -lm
echo "== fibers in order"
"$d/test-gpt-cuda-emu"
echo "== fibers in reverse order (CUDA_EMU_ORDER=reverse)"
CUDA_EMU_ORDER=reverse "$d/test-gpt-cuda-emu"
