#!/usr/bin/env bash
# gpu-check.sh: the one script to run on a machine with an NVIDIA GPU (nvcc and torch there,
# nothing to download). Builds with CUDA, runs the device conformance suite and the allocator
# tests on the cuda device, the trainer's CUDA kernels against the CPU (tests/test-gpt-cuda),
# prints a summary and writes its log to $OUT (or bench/results/).
# Must finish in a few minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-bench/results}
mkdir -p "$dest"
log="$dest/gpu-check-$(date +%Y-%m-%d).log"
exec > >(tee "$log") 2>&1
echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
nvcc --version | tail -n 2
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 || true
rc=0
make -j"$(nproc)" BUILD=build-gpu SS_CUDA=1 || exit 1
./build-gpu/smartswap info || rc=1
# the conformance suite runs on every compiled-in backend; on this machine the cuda part must
# run, not skip
echo "== test-device (conformance on every backend, cuda included)"
out=$(timeout 300 ./build-gpu/tests/test-device 2>&1); r=$?
printf '%s\n' "$out"
[ $r = 0 ] || rc=1
if printf '%s\n' "$out" | grep -q '^skip'; then echo "gpu-check: the cuda conformance tests were skipped"; rc=1; fi
echo "== test-alloc-device on cuda (allocator and host pool on the GPU)"
out=$(SMARTSWAP_TEST_DEVICE=cuda timeout 300 ./build-gpu/tests/test-alloc-device 2>&1); r=$?
printf '%s\n' "$out"
[ $r = 0 ] || rc=1
if printf '%s\n' "$out" | grep -q '^skip'; then echo "gpu-check: the allocator tests could not open cuda"; rc=1; fi
echo "== test-gpt-cuda (the trainer's CUDA kernels against the CPU reference, each run twice)"
out=$(timeout 120 ./build-gpu/tests/test-gpt-cuda 2>&1); r=$?
printf '%s\n' "$out"
[ $r = 0 ] || rc=1
if printf '%s\n' "$out" | grep -q '^skip'; then echo "gpu-check: the CUDA kernel tests were skipped"; rc=1; fi
echo "== smartswap train --device cuda (must fail in one line naming CUDA until the cuda training path lands)"
./build-gpu/smartswap train --device cuda --steps 1 2>&1 | head -n 3
echo "== bench/gpu-torch.sh (the PyTorch adapter on cuda: determinism check, the Python suite, torch_compare)"
timeout 660 bash bench/gpu-torch.sh || { echo "gpu-check: gpu-torch.sh failed"; rc=1; }
echo "gpu-check: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
