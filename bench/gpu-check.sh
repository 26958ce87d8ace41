#!/usr/bin/env bash
# gpu-check.sh: the one script to run on a machine with an NVIDIA GPU (nvcc and torch there,
# nothing to download). Builds with CUDA, runs the device conformance suite and the allocator
# tests on the cuda device, prints a summary and writes its log to $OUT (or bench/results/).
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
for t in device alloc hostpool; do
    echo "== test-$t (SMARTSWAP_TEST_DEVICE=cuda)"
    SMARTSWAP_TEST_DEVICE=cuda timeout 300 ./build-gpu/tests/test-$t || rc=1
done
echo "gpu-check: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
