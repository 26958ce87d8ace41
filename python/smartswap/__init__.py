"""smartswap: swaps PyTorch activations (tensors saved for backward) to host memory and back.

    import smartswap
    ss = smartswap.SmartSwap(activation_budget="2GiB")
    with ss.step():
        loss = model(x); loss.backward()

torch is imported before the C library is loaded so that both share one CUDA runtime.
docs/pytorch.md has the options, how budgets are counted, threading and limits.
"""
import torch  # noqa: F401  (first: the library must find torch's CUDA runtime)

from .core import SmartSwap  # noqa: E402

__all__ = ["SmartSwap", "version"]
__version__ = "0.1.0"


def version():
    """The C library's version and build features, e.g. "0.1.0 (cjson openmp cuda)"."""
    from . import _lib
    L = _lib.lib()
    return "%s (%s)" % (L.ss_version_str().decode(), L.ss_build_features().decode())
