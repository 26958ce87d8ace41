"""ctypes bindings of libsmartswap's thin PyTorch entry point (include/smartswap-torch.h).

Loaded only after ``import torch`` (smartswap/__init__.py imports torch first), so that a CUDA
build of the library resolves libcudart to the copy torch has already loaded.

Where the library comes from, first found wins:
  1. ``SMARTSWAP_LIB`` (a path to libsmartswap.so);
  2. the copy inside the installed package (``pip install .`` puts it there);
  3. the source tree the package sits in: ``<tree>/build/libsmartswap.so`` (``make venv``
     installs the package editable against that non-sanitized build).
"""
import ctypes
import os

SS_OK = 0
SS_ACTION_ALLOC = 1
SS_ACTION_DROP = 2
SS_SAVE_NOSWAP = 1
SS_OP_FWD, SS_OP_BWD = 0, 1
STAGE_NAMES = ("warmup", "genpolicy", "stable", "disabled")
# ss_dtype
DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_F64, DTYPE_I64, DTYPE_I32, DTYPE_I16, DTYPE_I8, \
    DTYPE_U8, DTYPE_BOOL, DTYPE_OTHER = range(11)


class Action(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("handle", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


class TorchStats(ctypes.Structure):
    _fields_ = [("stage", ctypes.c_int32), ("last_stage", ctypes.c_int32),
                ("seq_hash", ctypes.c_uint64),
                ("iterations", ctypes.c_uint64), ("detailed_iterations", ctypes.c_uint64),
                ("swapped_out_bytes", ctypes.c_uint64), ("swapped_in_bytes", ctypes.c_uint64),
                ("stalls", ctypes.c_uint64), ("misses", ctypes.c_uint64),
                ("evictions", ctypes.c_uint64),
                ("plans_made", ctypes.c_uint64), ("plans_cached", ctypes.c_uint64),
                ("cache_hits", ctypes.c_uint64), ("mid_switches", ctypes.c_uint64),
                ("plan_errors", ctypes.c_uint64),
                ("saves", ctypes.c_uint64), ("loads", ctypes.c_uint64),
                ("releases", ctypes.c_uint64), ("actions", ctypes.c_uint64),
                ("host_peak_bytes", ctypes.c_uint64),
                ("resident_bytes", ctypes.c_uint64),
                ("stall_seconds", ctypes.c_double),
                ("profile_overhead_seconds", ctypes.c_double),
                ("prefetches_refused", ctypes.c_uint64)]


class IterReport(ctypes.Structure):
    _fields_ = [("iter", ctypes.c_uint64), ("stage", ctypes.c_int32),
                ("next_stage", ctypes.c_int32), ("detailed", ctypes.c_int32),
                ("plan_event", ctypes.c_int32), ("diverged_at", ctypes.c_uint32),
                ("nops", ctypes.c_uint32), ("nsaves", ctypes.c_uint32),
                ("nloads", ctypes.c_uint32), ("nreleases", ctypes.c_uint32),
                ("mid_switches", ctypes.c_uint32),
                ("seq_hash", ctypes.c_uint64), ("size_sig", ctypes.c_uint64),
                ("saved_bytes", ctypes.c_uint64), ("peak_bytes", ctypes.c_uint64),
                ("seconds", ctypes.c_double),
                ("swapped_out_bytes", ctypes.c_uint64), ("swapped_in_bytes", ctypes.c_uint64),
                ("stalls", ctypes.c_uint32), ("sync_loads", ctypes.c_uint32),
                ("evictions", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


class OptionInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("env", ctypes.c_char_p), ("type", ctypes.c_char_p),
                ("default", ctypes.c_char_p), ("range", ctypes.c_char_p),
                ("help", ctypes.c_char_p)]


def _candidates():
    env = os.environ.get("SMARTSWAP_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.dirname(os.path.dirname(here))
    return [os.path.join(here, "libsmartswap.so"),
            os.path.join(tree, "build", "libsmartswap.so")]


_lib = None


def lib():
    """The loaded library (loads it on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            L = ctypes.CDLL(path)
            break
        tried.append(path)
    else:
        raise ImportError("smartswap: libsmartswap.so not found (tried %s); run `make lib` in the "
                          "source tree, `pip install .`, or set SMARTSWAP_LIB" % ", ".join(tried))
    P, U32, U64, I32, SZ = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t
    pU32, pU64, pP = ctypes.POINTER(U32), ctypes.POINTER(U64), ctypes.POINTER(P)
    pA = ctypes.POINTER(Action)
    sig = {
        "ss_torch_open": (I32, [ctypes.c_char_p, U64, ctypes.c_char_p, ctypes.c_char_p, SZ, pP]),
        "ss_torch_close": (None, [P]),
        "ss_torch_ctx": (P, [P]),
        "ss_torch_set_evict_budget": (I32, [P, U64]),
        "ss_torch_op": (I32, [P, U32, U64, pA, U32, pU32]),
        "ss_torch_pack": (I32, [P, U32, U64, P, U64, I32, I32, ctypes.POINTER(ctypes.c_int64),
                                U32, pU64, pA, U32, pU32]),
        "ss_torch_load": (I32, [P, pU64, pP, U32, U64, U64, pP, pA, U32, pU32]),
        "ss_torch_poll": (I32, [P, pA, U32, pU32]),
        "ss_torch_release": (I32, [P, U64]),
        "ss_torch_held": (I32, [P, U64, I32]),
        "ss_torch_get_stats": (I32, [P, ctypes.POINTER(TorchStats)]),
        "ss_torch_last_error": (ctypes.c_char_p, []),
        "ss_torch_recording": (I32, [P]),
        "ss_torch_detail": (I32, [P, ctypes.c_double, ctypes.c_double, pU32]),
        "ss_torch_set_sizes": (I32, [P, ctypes.POINTER(ctypes.c_int64), U32]),
        "ss_ctx_intern": (I32, [P, ctypes.c_char_p, pU32]),
        "ss_ctx_iter_begin": (I32, [P]),
        "ss_ctx_iter_end": (I32, [P, ctypes.POINTER(IterReport)]),
        "ss_ctx_phase": (I32, [P, I32]),
        "ss_ctx_set_mem": (I32, [P, U64]),
        "ss_status_str": (ctypes.c_char_p, [I32]),
        "ss_version_str": (ctypes.c_char_p, []),
        "ss_build_features": (ctypes.c_char_p, []),
        "ss_parse_size": (I32, [ctypes.c_char_p, pU64]),
        "ss_options_info": (I32, [I32, ctypes.POINTER(OptionInfo)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype = res
        f.argtypes = args
    _lib = L
    return L


def status_str(st):
    return lib().ss_status_str(st).decode()


def option_names():
    """Names of the C options table ("min-swap", ...), in table order."""
    L = lib()
    out = []
    info = OptionInfo()
    i = 0
    while L.ss_options_info(i, ctypes.byref(info)) == SS_OK:
        out.append(info.name.decode())
        i += 1
    return out


def parse_size(value, what):
    """An int (bytes) or a string with units ("6GiB", "512MiB", "1.5GB") -> int bytes."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("smartswap: %s must be a size in bytes or a string like '6GiB', not %r"
                        % (what, value))
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("smartswap: %s must be positive, got %d" % (what, value))
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    if isinstance(value, str):
        out = ctypes.c_uint64()
        if lib().ss_parse_size(value.strip().encode(), ctypes.byref(out)) != SS_OK or out.value == 0:
            raise ValueError("smartswap: %s=%r is not a size (examples: 1048576, '512MiB', '6GiB')"
                             % (what, value))
        return out.value
    raise TypeError("smartswap: %s must be an int or a string like '6GiB', not %s"
                    % (what, type(value).__name__))
