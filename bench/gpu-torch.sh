#!/usr/bin/env bash
# gpu-torch.sh: the PyTorch part of the GPU check (issue 13, item 11), called by
# bench/gpu-check.sh or on its own. Uses the machine's own python3 with torch (no network) and
# the package from the tree against a CUDA build of the library (build-gpu/, SS_CUDA=1).
#   1. two plain runs of a small model match bit for bit under
#      torch.use_deterministic_algorithms(True) (else exactness cannot be shown: stop);
#   2. the Python suite with the models on cuda (SMARTSWAP_TEST_DEVICE=cuda), deterministic;
#   3. bench/torch_compare.py on a Llama-1B-shaped bf16 model under a quarter of its
#      activation demand (--json into the results).
# Output: $OUT (or bench/results/)/gpu-torch-<date>.log and torch_compare-gpu-<date>.json.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-bench/results}
mkdir -p "$dest"
day=$(date +%Y-%m-%d)
log="$dest/gpu-torch-$day.log"
exec > >(tee "$log") 2>&1
PY=${PYTHON:-python3}
echo "gpu-torch $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $PY"
$PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))' || exit 1
[ -f build-gpu/libsmartswap.so ] || make -j"$(nproc)" BUILD=build-gpu SS_CUDA=1 lib || exit 1
export SMARTSWAP_LIB=$PWD/build-gpu/libsmartswap.so PYTHONPATH=$PWD/python
export CUBLAS_WORKSPACE_CONFIG=:4096:8 SMARTSWAP_DETERMINISTIC=1
rc=0

echo "== 1. two plain runs match bit for bit (deterministic algorithms)"
timeout 300 $PY - <<'PYEOF' || { echo "gpu-torch: plain runs differ: exactness cannot be checked here"; exit 1; }
import sys, torch
sys.path.insert(0, "python/tests")
torch.use_deterministic_algorithms(True)
import test_models as T, helpers as H
import torch.nn.functional as F
dev = torch.device("cuda")
torch.manual_seed(0)
m = T.TinyTransformer().to(dev)
g = torch.Generator().manual_seed(1)
data = [torch.randint(0, 96, (8, 33), generator=g) for _ in range(4)]
def step(mm, i):
    d = data[i].to(dev)
    lo = mm(d[:, :-1])
    loss = F.cross_entropy(lo.reshape(-1, lo.shape[-1]), d[:, 1:].reshape(-1))
    loss.backward()
    return loss
opt = lambda mm: torch.optim.AdamW(mm.parameters(), lr=1e-3)
H.assert_identical(H.run(m, opt, step, 4), H.run(m, opt, step, 4))
print("plain runs identical")
PYEOF

echo "== 2. the Python suite, models on cuda"
SMARTSWAP_TEST_DEVICE=cuda timeout 300 $PY -m pytest -q -p no:cacheprovider python/tests || rc=1

echo "== 3. torch_compare on a Llama-1B-shaped bf16 model, a quarter of its activation demand"
timeout 300 $PY bench/torch_compare.py --device cuda --detail-runs 2 --dtype bfloat16 --hidden 2048 --layers 16 \
    --heads 32 --kv-heads 8 --intermediate 8192 --vocab 32000 --seq 2048 --batch 2 --steps 8 \
    --json "$dest/torch_compare-gpu-$day.json" || rc=1

echo "gpu-torch: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
