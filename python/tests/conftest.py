import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

DEVICE = os.environ.get("SMARTSWAP_TEST_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _determinism():
    torch.manual_seed(0)
    if DEVICE == "cpu":
        torch.set_num_threads(1)
    yield


@pytest.fixture
def device():
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("SMARTSWAP_TEST_DEVICE=%s but torch sees no GPU" % DEVICE)
    return torch.device(DEVICE)


try:   # no example database in the tree (CI runs from a fresh clone)
    from hypothesis import settings

    settings.register_profile("smartswap", database=None, deadline=None)
    settings.load_profile("smartswap")
except ImportError:
    pass

if os.environ.get("SMARTSWAP_DETERMINISTIC") == "1":   # bench/gpu-torch.sh
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
