#!/usr/bin/env bash
# gpu-check.sh: the one prepared check for a machine with an NVIDIA GPU (docs/cuda.md "The GPU
# check"). Uses the machine's own nvcc, python3 and torch; downloads nothing. At most 5 minutes
# on one H200; --quick (smaller trainer and replay, the PyTorch part skipped) under 2.
#   bash bench/gpu-check.sh [--quick]
# Stages, each under its own timeout; a failure is reported in the table and the rest still run:
#   build    make SS_CUDA=1 (build-gpu/): the library, the cuda device, the .cu, the CLI, tests
#   device   test-device (the conformance suite on cuda; a skip is a failure), test-device-cuda
#            (a copy overlaps a spin kernel, events order copies and data), test-device-cuda-vm
#            (virtual memory, SMARTSWAP_TEST_EXPECT_VM=1)
#   alloc    test-alloc-device on cuda (allocator and host pool)
#   kernels  test-gpt-cuda (the trainer's kernels against the CPU, each GPU run twice)
#   trainer  smartswap train on cuda: none twice (the plain runs must agree bit for bit), then
#            recompute and smartswap under a quarter of none's peak; losses (hex) and final
#            weights bit-identical to none, peaks within the budget; tokens/s of the three;
#            then (not in --quick) --dtype bf16 (activations stored as bf16, gpt/model.c) none and
#            smartswap under the same budget: identical to each other; bf16 none's peak against fp32's
#            and (not in --quick) MoE (--moe 4:2) none and smartswap under a quarter of its none's
#            peak: identical to each other (the router's choices cross to the host per MoE layer)
#   replay   a Llama-3.2-1B-shaped profile (batch 4 x 4096; --quick 4 x 1024) replayed on cuda
#            under a 24 GiB budget with the pinned host pool capped at 16 GiB: the real peak,
#            step time and stall against `smartswap simulate`'s prediction (relative errors)
#   torch    bench/gpu-torch.sh (the PyTorch adapter on cuda)
# Writes $OUT (when set, else bench/results/; without a GPU /tmp/)/gpu-check-<date>.log with each
# stage's output and the summary table at the end. Exit status: 0 all passed (or no GPU:
# everything skipped), 1 a stage failed or timed out, 2 a stage reported TODO (not implemented;
# none does now).
#   bash bench/gpu-check.sh --plan [--quick]   prints the stages, limits and commands; runs nothing
# Knobs for trying the stages' logic without a GPU: GPU_CHECK_DEVICE (default cuda; cpu-sim runs
# trainer and replay on the simulated device), GPU_CHECK_FORCE=1 (run the GPU stages even when
# nvidia-smi finds no GPU), GPU_CHECK_TRAIN_ARGS, GPU_CHECK_REPLAY_ARGS (override the shapes),
# GPU_CHECK_BUILD=dir (use that existing SS_CUDA=1 build instead of building build-gpu/),
# GPU_CHECK_CLI=path (the CLI the trainer and replay stages run; default <build>/smartswap),
# GPU_CHECK_STAGES="trainer replay" (run only those of the stages after build),
# GPU_CHECK_LIMIT_SCALE=N (every stage limit times N, for slow stand-ins; a GPU run uses 1),
# GPU_CHECK_TRAIN_BF16=0|1 (the trainer's --dtype bf16 pair; default 1, --quick 0),
# GPU_CHECK_TRAIN_MOE=0|1 (the trainer's MoE pair; default 1, --quick 0), GPU_CHECK_TRAIN_MOE_ARGS
# (its shapes; default the trainer's plus --moe 4:2),
# GPU_CHECK_DEBS=dir (the carried cJSON packages; default .gpu-debs).
#   bash bench/gpu-check.sh --fetch-debs       (where Debian's registry is reachable) downloads
#                                              libcjson1 and libcjson-dev into .gpu-debs/
# scripts/cuda-emu-check.sh part "gpu-check" runs it on the stand-in CUDA runtime this way.
set -u -o pipefail
cd "$(dirname "$0")/.."
quick=0 plan=0 fetch=0
for a in "$@"; do
    case $a in
    --quick) quick=1 ;;
    --plan) plan=1 ;;
    --fetch-debs) fetch=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$a' (--quick, --plan, --fetch-debs or nothing)" >&2; exit 2 ;;
    esac
done
# The GPU machine has no package registry: the build's one required library, cJSON, travels as
# Debian packages in $debs (fetched here with --fetch-debs, where Debian's registry is reachable,
# and carried along); the build stage unpacks them when the machine lacks cJSON, copying only
# files that are not there yet, and builds with SS_DEPS=0 when any package of scripts/deps.sh is
# missing (the others are optional for this check: without OpenBLAS the CPU reference multiplies
# in plain loops, without the texts the trainer reads the project's sources).
debs=${GPU_CHECK_DEBS:-.gpu-debs}
deb_pkgs="libcjson1 libcjson-dev"
if [ $fetch = 1 ]; then
    mkdir -p "$debs" && (cd "$debs" && apt-get download $deb_pkgs) || { echo "gpu-check: apt-get download $deb_pkgs into $debs/ failed" >&2; exit 1; }
    ls -l "$debs"
    echo "gpu-check: carry $debs/ to the GPU machine (it is ignored by git)"
    exit 0
fi
all_stages="device alloc kernels trainer replay torch"
want=${GPU_CHECK_STAGES:-$all_stages}
for s in $want; do
    case " $all_stages " in *" $s "*) ;; *) echo "gpu-check: GPU_CHECK_STAGES: unknown stage '$s' (the stages: $all_stages)" >&2; exit 2 ;; esac
done
B=${GPU_CHECK_BUILD:-build-gpu}
CLI=${GPU_CHECK_CLI:-$B/smartswap}
DEV=${GPU_CHECK_DEVICE:-cuda}
# the trainer's shapes: activations well above state + one operator's working set, so a quarter
# of none's peak trains in both modes (on cpu-sim, 2026-12-02: quick: none's peak 197 MiB, a
# quarter 49 MiB, smallest budget 23.7 MiB, recompute's 41.4 MiB; full: none's peak 1.01 GiB, a
# quarter 260 MiB, smallest budget 104 MiB, recompute's 191 MiB)
if [ $quick = 1 ]; then train_args="--layers 12 --hidden 64 --heads 4 --kv-heads 2 --ffn 172 --batch 16 --seq 256 --steps 5"
else train_args="--layers 16 --hidden 128 --heads 4 --kv-heads 2 --ffn 344 --batch 16 --seq 512 --steps 8"; fi
train_args=${GPU_CHECK_TRAIN_ARGS:-$train_args}
# --dtype bf16 none and smartswap too (not in --quick): GPU_CHECK_TRAIN_BF16=0|1 overrides
train_bf16=${GPU_CHECK_TRAIN_BF16:-$([ $quick = 1 ] && echo 0 || echo 1)}
# MoE (the trainer's shapes plus --moe 4:2) none and smartswap too (not in --quick):
# GPU_CHECK_TRAIN_MOE=0|1 overrides, GPU_CHECK_TRAIN_MOE_ARGS replaces the shapes
train_moe=${GPU_CHECK_TRAIN_MOE:-$([ $quick = 1 ] && echo 0 || echo 1)}
train_moe_args=${GPU_CHECK_TRAIN_MOE_ARGS:-$train_args --moe 4:2}
if [ $quick = 1 ]; then replay_shape="--model llama-3.2-1b --batch 4 --seq 1024"; else replay_shape="--model llama-3.2-1b --batch 4 --seq 4096"; fi
replay_shape=${GPU_CHECK_REPLAY_ARGS:-$replay_shape}
replay_budget=${GPU_CHECK_REPLAY_BUDGET:-24GiB} replay_host=${GPU_CHECK_REPLAY_HOST:-16GiB}
# the limits add up to 295 s (--quick: 116 s); a stage over its limit is reported TIMEOUT
if [ $quick = 1 ]; then set -- 45 12 8 10 30 10 1; else set -- 60 25 15 15 60 40 80; fi
sc=${GPU_CHECK_LIMIT_SCALE:-1}
case $sc in ''|*[!0-9]*|0) echo "gpu-check: GPU_CHECK_LIMIT_SCALE must be a positive integer, not '$sc'" >&2; exit 2 ;; esac
lim_build=$(($1 * sc)) lim_device=$(($2 * sc)) lim_alloc=$(($3 * sc)) lim_kernels=$(($4 * sc))
lim_trainer=$(($5 * sc)) lim_replay=$(($6 * sc)) lim_torch=$(($7 * sc))
if [ $plan = 1 ]; then
    echo "gpu-check plan$([ $quick = 1 ] && echo ' (--quick)'): log in ${OUT:-bench/results}/gpu-check-<date>.log; limits add up to $((lim_build + lim_device + lim_alloc + lim_kernels + lim_trainer + lim_replay + lim_torch)) s"
    if [ -n "${GPU_CHECK_BUILD:-}" ]; then echo "build    ${lim_build} s  $CLI info (existing build $B/)"
    else echo "build    ${lim_build} s  make -j$(nproc) BUILD=$B SS_CUDA=1 all; $CLI info"; fi
    for s in $want; do
        case $s in
        device)  echo "device   ${lim_device} s  $B/tests/test-device (cuda part), $B/tests/test-device-cuda, SMARTSWAP_TEST_EXPECT_VM=1 $B/tests/test-device-cuda-vm" ;;
        alloc)   echo "alloc    ${lim_alloc} s  SMARTSWAP_TEST_DEVICE=cuda $B/tests/test-alloc-device" ;;
        kernels) echo "kernels  ${lim_kernels} s  $B/tests/test-gpt-cuda" ;;
        trainer) echo "trainer  ${lim_trainer} s  $CLI train --device $DEV $train_args --mode none (twice), recompute, smartswap (--budget <none's peak / 4>); losses and weights = none's$([ "$train_bf16" = 1 ] && echo "; --dtype bf16 none and smartswap, equal")$([ "$train_moe" = 1 ] && echo "; $train_moe_args none and smartswap (--budget <its none's peak / 4>), equal")" ;;
        replay)  echo "replay   ${lim_replay} s  $CLI trace gen $replay_shape; simulate and replay --device $DEV --budget $replay_budget, SMARTSWAP_HOST_MEM=$replay_host" ;;
        torch)   echo "torch    ${lim_torch} s  $([ $quick = 1 ] && echo 'skipped in --quick' || echo 'bash bench/gpu-torch.sh')" ;;
        esac
    done
    exit 0
fi
# without a GPU (and without $OUT) the log goes to /tmp, not bench/results/: scripts/report.py
# quotes the newest bench/results/gpu-check-*.log as the GPU's figures
has_gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU' && has_gpu=1
if [ -n "${OUT:-}" ]; then dest=$OUT
elif [ $has_gpu = 1 ]; then dest=bench/results
else dest=${TMPDIR:-/tmp}; fi
mkdir -p "$dest"
day=$(date +%Y-%m-%d)
log="$dest/gpu-check-$day.log"
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
exec > >(tee "$log") 2>&1
t_start=$(date +%s)
echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)$([ $quick = 1 ] && echo ' (--quick)')"
gpu=0
if [ $has_gpu = 1 ]; then
    gpu=1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
fi
[ "${GPU_CHECK_FORCE:-0}" = 1 ] && gpu=1
[ $gpu = 1 ] || echo "no GPU on this machine (nvidia-smi finds none): the GPU stages print 'skipped: no GPU'"
command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo "python3 has no torch"

names=() results=() notes=() secs=()
# stage NAME LIMIT_S NEEDS_GPU(0|1): runs the function st_NAME under timeout; its exit status is
# 0 PASS, 77 SKIP, 78 TODO, 124/137 TIMEOUT, else FAIL; its last line "note: ..." is the note
stage() {
    local name=$1 limit=$2 needs=$3 t0 r res note out
    echo
    echo "======== $name (limit ${limit} s)"
    t0=$(date +%s)
    out="$work/$name.out"
    if [ "$needs" = 1 ] && [ $gpu = 0 ]; then
        echo "skipped: no GPU" | tee "$out" >/dev/null
        echo "skipped: no GPU"
        r=77
        echo "note: no GPU" >> "$out"
    else
        timeout --kill-after=10 "$limit" bash -c "st_$name" > >(tee "$out") 2>&1
        r=$?
        sleep 0.2   # let tee finish
    fi
    case $r in
    0) res=PASS ;; 77) res=SKIP ;; 78) res=TODO ;; 124|137) res=TIMEOUT ;; *) res=FAIL ;;
    esac
    note=$(grep '^note: ' "$out" 2>/dev/null | tail -n 1 | cut -c7-)
    [ $res = TIMEOUT ] && note="over ${limit} s; $note"
    names+=("$name") results+=("$res") notes+=("$note") secs+=($(( $(date +%s) - t0 )))
}

# runs a test binary; a skip (line starting "skip") or a failure fails the stage
run_test() {
    local out r
    echo "-- $*"
    out=$("$@" 2>&1); r=$?
    printf '%s\n' "$out"
    [ $r = 0 ] || { echo "failed (exit $r): $*"; return 1; }
    if printf '%s\n' "$out" | grep -q '^skip'; then echo "skipped on a GPU machine: $*"; return 1; fi
    return 0
}

# the packages scripts/deps.sh wants whose proof file is missing here (its NEEDED list)
deps_missing() {
    local line
    sed -n '/^NEEDED="/,/"$/p' scripts/deps.sh | sed 's/^NEEDED="//; s/"$//' | while read -r line; do
        [ -e "${line#*:}" ] || printf ' %s' "${line%%:*}"
    done
}
# cJSON from the carried packages: unpacked aside, then only files this machine lacks are copied
provide_cjson() {
    [ -f /usr/include/cjson/cJSON.h ] && return 0
    ls "$debs"/*.deb > /dev/null 2>&1 || {
        echo "no cJSON here (/usr/include/cjson/cJSON.h) and no $debs/*.deb: run 'bash bench/gpu-check.sh --fetch-debs' where Debian's registry is reachable and carry $debs/"
        return 1
    }
    local st f
    st=$(mktemp -d /tmp/gpu-check-debs.XXXXXX)
    for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$st" || return 1; done
    cp -a -n "$st/usr/." /usr/ || return 1
    ldconfig 2> /dev/null
    rm -rf "$st"
    [ -f /usr/include/cjson/cJSON.h ] && echo "cJSON: unpacked from $debs/ (files already here kept)"
}
export -f deps_missing provide_cjson
export debs

st_build() {
    if [ -z "${GPU_CHECK_BUILD:-}" ]; then
        local miss
        miss=$(deps_missing)
        if [ -n "$miss" ]; then
            echo "missing Debian packages:$miss: building with SS_DEPS=0 (cJSON is required, the rest optional here)"
            export SS_DEPS=0
            provide_cjson || { echo "note: cJSON missing (carry $debs/, see docs/cuda.md)"; exit 1; }
        fi
        # the toolkit where nvcc is, when it is not at the Makefile's default /usr/local/cuda
        if [ -z "${CUDA_HOME:-}" ] && [ ! -f /usr/local/cuda/include/cuda_runtime_api.h ] && command -v nvcc > /dev/null; then
            CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); export CUDA_HOME
            echo "CUDA_HOME=$CUDA_HOME (from nvcc)"
        fi
        make -j"$(nproc)" BUILD=$B SS_CUDA=1 all || exit 1
    fi
    $CLI info || exit 1
    echo "note: $($CLI info 2>&1 | grep -m1 -i -E 'cuda|features' | cut -c1-60)"
}

st_device() {
    local rc=0 out
    out=$($B/tests/test-device 2>&1) || rc=1
    printf '%s\n' "$out" | tail -n 40
    printf '%s\n' "$out" | grep -q -- '--- conformance: cuda' || { echo "no cuda conformance run"; rc=1; }
    printf '%s\n' "$out" | grep -q '^skip' && { echo "the cuda conformance tests were skipped"; rc=1; }
    run_test $B/tests/test-device-cuda || rc=1
    SMARTSWAP_TEST_EXPECT_VM=1 run_test $B/tests/test-device-cuda-vm || rc=1
    local ov
    ov=$($B/tests/test-device-cuda 2>&1 | grep -m1 'copy .* alone' | sed 's/^ *//')
    echo "note: ${ov:-overlap figures missing}"
    exit $rc
}

st_alloc() {
    SMARTSWAP_TEST_DEVICE=cuda run_test $B/tests/test-alloc-device || exit 1
    echo "note: allocator and host pool on cuda"
}

st_kernels() {
    run_test $B/tests/test-gpt-cuda || exit 1
    echo "note: $($B/tests/test-gpt-cuda 2>&1 | tail -n 1)"
}

# the totals line's key=value
tot() { grep '^totals:' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
# identical A B: the runs with files A.jsonl/A.w and B.jsonl/B.w logged the same losses (their
# exact hex) and saved the same weights, bit for bit
losses() { python3 -c "import json,sys;[print(json.loads(l)['loss_hex']) for l in open(sys.argv[1])]" "$1"; }
identical() { cmp -s <(losses "$1.jsonl") <(losses "$2.jsonl") && cmp -s "$1.w" "$2.w"; }

st_trainer() {
    local args=$train_args t="$work/train"
    # a plain run twice first: the comparisons below mean something only if none is deterministic
    # shellcheck disable=SC2086
    $CLI train --device $DEV $args --mode none --quiet --log $t-none.jsonl \
        --save-weights $t-none.w > $t-none.txt 2>&1
    local r=$?
    cat $t-none.txt
    [ $r = 0 ] || { echo "note: mode none failed"; exit 1; }
    grep -q "kernels  " $t-none.txt && [ "$DEV" != cpu-sim ] && grep -m1 "kernels  " $t-none.txt
    local peak state budget
    peak=$(tot $t-none.txt peak)
    state=$(python3 -c "import json;print(json.loads(open('$t-none.jsonl').readline())['state_bytes'])")
    budget=$(( peak / 4 ))
    echo "none: peak $peak bytes, state $state bytes; smartswap and recompute under $budget bytes (a quarter)"
    if [ "$budget" -le "$state" ]; then echo "note: a quarter of none's peak is below the state: bigger shapes needed"; exit 1; fi
    local rc=0 m steps
    steps=$(python3 -c "import json,sys;print(sum(1 for l in open(sys.argv[1]) if 'loss_hex' in l))" $t-none.jsonl)
    [ "${steps:-0}" -gt 0 ] || { echo "note: none logged no step"; exit 1; }
    for m in none2 recompute smartswap; do
        local flags="--mode $m --budget $budget"
        [ $m = none2 ] && flags="--mode none"
        # shellcheck disable=SC2086
        $CLI train --device $DEV $args $flags --quiet \
            --log $t-$m.jsonl --save-weights $t-$m.w > $t-$m.txt 2>&1 || { cat $t-$m.txt; echo "mode $m failed"; rc=1; continue; }
        cat $t-$m.txt
        if identical $t-none $t-$m; then
            echo "$m: losses ($steps steps) and weights bit-identical to none"
        else
            echo "$m: DIFFERS from none"; rc=1
        fi
        [ $m = none2 ] && continue
        [ "$(tot $t-$m.txt peak)" -le "$budget" ] || { echo "$m: peak $(tot $t-$m.txt peak) above the budget $budget"; rc=1; }
    done
    [ "$(tot $t-smartswap.txt swapped_out)" -gt 0 ] 2>/dev/null || { echo "smartswap swapped nothing out"; rc=1; }
    local b16=""
    if [ "$train_bf16" = 1 ]; then   # --dtype bf16: smartswap at the same budget equals bf16 none
        local bm ok=1
        for bm in none smartswap; do
            local bf="--mode $bm --budget $budget"
            [ $bm = none ] && bf="--mode none"
            # shellcheck disable=SC2086
            $CLI train --device $DEV $args $bf --dtype bf16 --quiet --log $t-b16-$bm.jsonl \
                --save-weights $t-b16-$bm.w > $t-b16-$bm.txt 2>&1 || { cat $t-b16-$bm.txt; echo "bf16 $bm failed"; ok=0; }
        done
        grep -m1 "kernels  " $t-b16-none.txt
        grep -q "^  dtype    bf16 activations" $t-b16-none.txt || { echo "bf16 none: no bf16 activations in its configuration"; ok=0; }
        if [ $ok = 1 ] && identical $t-b16-none $t-b16-smartswap; then
            echo "bf16 smartswap: losses and weights bit-identical to bf16 none"
        else
            echo "bf16 smartswap: DIFFERS from bf16 none (or a run failed)"; ok=0
        fi
        cmp -s $t-b16-none.w $t-none.w && { echo "bf16 none's weights equal fp32 none's: nothing was rounded"; ok=0; }
        [ $ok = 1 ] || rc=1
        local p16 ratio
        p16=$(tot $t-b16-none.txt peak)
        ratio=$(python3 -c "import sys;print('%.3f' % (int(sys.argv[1]) / int(sys.argv[2])))" "${p16:-0}" "$peak" 2>/dev/null)
        echo "bf16 none: peak $p16 bytes, $ratio of fp32 none's (the state is fp32 in both)"
        b16="; bf16 tok/s none $(tot $t-b16-none.txt tok_per_s), smartswap $(tot $t-b16-smartswap.txt tok_per_s), peak $ratio of fp32's, identical: $([ $ok = 1 ] && echo yes || echo NO)"
    fi
    local moe=""
    if [ "$train_moe" = 1 ]; then   # MoE: smartswap under a quarter of MoE none's peak equals MoE none
        local mok=1 mpeak mbudget
        # shellcheck disable=SC2086
        $CLI train --device $DEV $train_moe_args --mode none --quiet --log $t-moe-none.jsonl \
            --save-weights $t-moe-none.w > $t-moe-none.txt 2>&1 || { cat $t-moe-none.txt; echo "moe none failed"; mok=0; }
        mpeak=$(tot $t-moe-none.txt peak)
        mbudget=$(( ${mpeak:-0} / 4 ))
        # shellcheck disable=SC2086
        [ $mok = 1 ] && { $CLI train --device $DEV $train_moe_args --mode smartswap --budget $mbudget --quiet \
            --log $t-moe-smartswap.jsonl --save-weights $t-moe-smartswap.w > $t-moe-smartswap.txt 2>&1 ||
            { cat $t-moe-smartswap.txt; echo "moe smartswap failed"; mok=0; }; }
        if [ $mok = 1 ] && identical $t-moe-none $t-moe-smartswap; then
            echo "moe smartswap: losses and weights bit-identical to moe none (budget $mbudget bytes, a quarter of $mpeak)"
        else
            echo "moe smartswap: DIFFERS from moe none (or a run failed)"; mok=0
        fi
        [ $mok = 1 ] || rc=1
        moe="; moe tok/s none $(tot $t-moe-none.txt tok_per_s), smartswap $(tot $t-moe-smartswap.txt tok_per_s), identical: $([ $mok = 1 ] && echo yes || echo NO)"
    fi
    echo "note: tok/s none $(tot $t-none.txt tok_per_s), recompute $(tot $t-recompute.txt tok_per_s), smartswap $(tot $t-smartswap.txt tok_per_s) (<= 1/4 of none's peak: $((budget >> 20)) MiB); bit-identical to none (and none to itself): $([ $rc = 0 ] && echo yes || echo NO)$b16$moe"
    exit $rc
}

st_replay() {
    local shape=$replay_shape budget=$replay_budget host=$replay_host p="$work/replay"
    # shellcheck disable=SC2086
    $CLI trace gen $shape -o $p-profile.json > /dev/null || { echo "note: trace gen failed"; exit 1; }
    # shellcheck disable=SC2086
    $CLI simulate $shape --budget $budget --host-mem $host --json > $p-sim.json 2> $p-sim.err ||
        { cat $p-sim.err; echo "note: simulate failed"; exit 1; }
    SMARTSWAP_HOST_MEM=$host $CLI replay $p-profile.json --device $DEV --budget $budget \
        --iters 4 --json > $p-real.json 2> $p-real.err
    local r=$?
    cat $p-real.err
    python3 - "$p-sim.json" "$p-real.json" "$r" <<'PY'
import json, sys
sim = {s["name"]: s for s in json.load(open(sys.argv[1]))["strategies"]}["smartswap"]
rc = int(sys.argv[3])
try:
    real = json.load(open(sys.argv[2]))
except Exception as e:
    print("replay wrote no JSON (exit %d): %s" % (rc, e))
    print("note: replay failed (exit %d); the simulator said fits=%s%s" % (rc, sim["fits"], "" if sim["fits"] else " (" + sim.get("why", "") + ")"))
    sys.exit(1)
it = real["per_iter"][-1]
peak, step, stall = real["peak_bytes"], it["iter_s"], it["stall_s"]
def err(pred, got):
    return abs(pred - got) / got if got else float("nan")
print("simulated: fits %s, peak %.2f GiB, step %.3f s, stall %.3f s" % (sim["fits"], sim["peak_bytes"] / 2**30, sim["iter_s"], sim["stall_s"]))
print("replayed : oom %d, corrupt reads %d, peak %.2f GiB, step %.3f s, stall %.3f s, swapped %.2f GiB" % (
    real["oom"], real["corrupt_reads"], peak / 2**30, step, stall, it["swapped_bytes"] / 2**30))
hidden = 1 - stall / step if step else 0
print("note: peak err %.1f%%, step err %.1f%%; stall %.1f%% of the step; oom %d corrupt %d" % (
    100 * err(sim["peak_bytes"], peak), 100 * err(sim["iter_s"], step), 100 * (1 - hidden), real["oom"], real["corrupt_reads"]))
sys.exit(0 if rc == 0 and real["corrupt_reads"] == 0 and real["oom"] == 0 else 1)
PY
}

st_torch() {
    if [ $quick = 1 ]; then echo "skipped in --quick"; echo "note: --quick"; exit 77; fi
    bash bench/gpu-torch.sh || { echo "note: gpu-torch.sh failed"; exit 1; }
    echo "note: gpu-torch.sh passed"
}

export -f st_build st_device st_alloc st_kernels st_trainer st_replay st_torch run_test tot losses identical
export B CLI DEV quick work gpu train_args train_bf16 train_moe train_moe_args replay_shape replay_budget replay_host

stage build "$lim_build" 0
if [ "${results[0]}" = PASS ]; then
    for s in $all_stages; do
        case " $want " in *" $s "*) ;; *) continue ;; esac
        lim=lim_$s
        stage "$s" "${!lim}" 1
    done
fi

echo
echo "======== summary ($(( $(date +%s) - t_start )) s; log $log)"
printf '%-8s %-8s %5s  %s\n' stage result secs note
rc=0
for i in "${!names[@]}"; do
    printf '%-8s %-8s %5s  %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}" "${notes[$i]}"
    case ${results[$i]} in FAIL|TIMEOUT) rc=1 ;; TODO) [ $rc = 0 ] && rc=2 ;; esac
done
verdict=$(case $rc in 0) echo PASS ;; 1) echo FAIL ;; 2) echo 'INCOMPLETE (a stage is not implemented yet)' ;; esac)
if [ $gpu = 0 ]; then echo "gpu-check: no GPU: nothing on the GPU was proven"; [ $rc = 0 ] && verdict="SKIPPED (no GPU)"; fi
[ "${GPU_CHECK_FORCE:-0}" = 1 ] && [ $has_gpu = 0 ] && verdict="$verdict (GPU_CHECK_FORCE=1 without a GPU: a dry run, nothing on a GPU was proven)"
echo "gpu-check: $verdict"
rm -rf "$work"
exit $rc
