"""SmartSwap: the PyTorch adapter (docs/pytorch.md).

Python only translates torch objects into C calls; every decision (plan, what to swap, when to
drop and prefetch) is the C core's. The mechanism is torch.autograd.graph.saved_tensors_hooks:

  pack(t)    parameters (t or t._base an nn.Parameter) and tensors of other devices are returned
             as they are. Any other tensor is reported once per storage (views of one storage
             share one entry; a tensor saved twice is stored once): one C call reports an
             operator ("pack", the plan's clock), the save, and returns the executor's pending
             actions. The entry holds the storage until the core says DROP.
  unpack(p)  one C call reports an operator ("unpack") and polls actions; a second answers the
             swap-in allocations and loads the entry: the pointer is the original storage while
             resident, else the swap-in buffer the adapter allocated for SS_ACTION_ALLOC (or
             the core's own fallback buffer on a miss, copied into a torch tensor). The tensor
             is rebuilt with the packed view's dtype, shape, stride and offset.

Actions: DROP {handle}: the bytes are safe on the host: release the storage (deferred while
someone else still holds it: dropping would free nothing, and the in-place check stays exact).
ALLOC {handle, bytes}: allocate the swap-in buffer (CUDA: on the stream current at pack).

CUDA streams: the core wraps torch's compute stream; its copy-out waits on an event recorded on
that stream, DROP comes only after the copy is seen complete or the compute stream waits on it;
the copy-in waits on an event recorded after the buffer's allocation; load makes the consumer
stream (current in unpack) wait on the copy-in. No record_stream anywhere.
"""
import contextlib
import ctypes
import os
import sys
import threading
import time
import weakref

import torch
from torch import nn

from . import _lib as L

try:   # the detailed iterations' operator names and call sites
    from torch.utils._python_dispatch import TorchDispatchMode as _TDM
except ImportError:   # pragma: no cover
    _TDM = None
try:
    from torch.utils.flop_counter import flop_registry as _FLOPS
except ImportError:   # pragma: no cover
    _FLOPS = {}

_DTYPE = {
    torch.float32: L.DTYPE_F32, torch.float16: L.DTYPE_F16, torch.bfloat16: L.DTYPE_BF16,
    torch.float64: L.DTYPE_F64, torch.int64: L.DTYPE_I64, torch.int32: L.DTYPE_I32,
    torch.int16: L.DTYPE_I16, torch.int8: L.DTYPE_I8, torch.uint8: L.DTYPE_U8,
    torch.bool: L.DTYPE_BOOL,
}
_NACT = 64
# stats() keys that count from reset_stats()
_COUNTERS = ("swapped_out_bytes", "swapped_in_bytes", "stalls", "misses", "evictions", "iterations",
             "detailed_iterations", "plans_made", "cache_hits", "profile_overhead_seconds",
             "prefetches_refused")
PLAN_MARGIN = 0.10
_INPLACE_MSG = ("one of the variables needed for gradient computation has been modified by an "
                "inplace operation: [{kind} {shape}] is at version {now}; expected version {then} "
                "instead (smartswap keeps autograd's in-place check for saved tensors). Hint: "
                "enable anomaly detection to find the operation that failed to compute its "
                "gradient, with torch.autograd.set_detect_anomaly(True).")

_TRUE = ("1", "true", "yes", "on")
_now = time.perf_counter
# frames of these packages are skipped when a detailed iteration looks for an operator's call site
_SKIP_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, contextlib)) + (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def _size_values(sizes):
    """step(sizes=...) as int64 values for ss_torch_set_sizes: a dict as (crc32 of the name,
    value) pairs in name order, a tuple or list as its values, an int as itself."""
    import zlib
    try:
        if isinstance(sizes, dict):
            out = []
            for k in sorted(sizes, key=str):
                out += [zlib.crc32(str(k).encode()), int(sizes[k])]
            return out
        if isinstance(sizes, (tuple, list, torch.Size)):
            return [int(v) for v in sizes]
        return [int(sizes)]
    except (TypeError, ValueError):
        raise TypeError("smartswap: sizes= takes ints (a dict of name: int, a tuple of ints or "
                        "an int), got %r" % (sizes,)) from None


if _TDM is not None:
    class _DetailMode(_TDM):
        """Detailed iterations only: records every aten operator that runs between two hooks
        (its OpOverload name, its Python call site in forward, its FLOPs where torch's
        flop_counter has a formula) without reporting any operator to the core. At each hook
        the adapter hands the FLOPs to the operator the core saw last and the mode's own time
        to the core's overhead (ss_torch_detail), so the sequence, its hash and its count stay
        those of a light iteration."""

        def __init__(self, ss):
            super().__init__()
            self.ss = ss
            self.cur = []
            self.flops = 0.0
            self.ovh = 0.0
            self.names = {}
            self.skip = {}
            self.nops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            ss = self.ss
            if ss._in_hook:   # the adapter's own tensor calls (detach, empty, set_)
                return func(*args, **kwargs)
            t0 = _now()
            name = self.names.get(func)
            if name is None:
                name = self.names[func] = str(func)
            if ss._bwd:
                site = "backward"
            else:
                f = sys._getframe(1)
                skip = self.skip
                while f is not None:
                    c = f.f_code
                    sk = skip.get(c)
                    if sk is None:
                        sk = skip[c] = c.co_filename.startswith(_SKIP_DIRS)
                    if not sk:
                        break
                    f = f.f_back
                site = (f.f_code.co_filename, f.f_lineno) if f is not None else None
            t1 = _now()
            out = func(*args, **kwargs)
            t2 = _now()
            fl = 0
            formula = _FLOPS.get(func._overloadpacket)
            if formula is not None:
                try:
                    fl = formula(*args, out_val=out, **kwargs) or 0
                except Exception:   # noqa: BLE001 (a formula that does not fit the call)
                    fl = 0
                self.flops += fl
            self.cur.append((name, site, fl))
            self.nops += 1
            self.ovh += (t1 - t0) + (_now() - t2)
            return out
else:   # pragma: no cover
    _DetailMode = None


def _env_disabled():
    return os.environ.get("SMARTSWAP_DISABLE", "").strip().lower() in _TRUE


def _use_count(t):
    """References to t's storage other than the temporary storage object made here."""
    try:
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata) - 1
    except Exception:   # noqa: BLE001  (no such private call: never assume we are alone)
        return 1 << 30


class _Entry:
    """One storage saved for backward (one C handle)."""
    __slots__ = ("h", "st", "ptr", "nbytes", "refs", "buf", "fb", "stream", "key", "kind",
                 "noswap", "__weakref__")

    def __init__(self, h, st, ptr, nbytes, stream, noswap):
        self.h = h
        self.st = st            # while resident: a detached view of the first tensor saved
                                # (holds the storage and shares its version counter); then None
        self.ptr = ptr
        self.nbytes = nbytes
        self.refs = 0
        self.buf = None         # swap-in buffer (uint8 tensor) allocated for SS_ACTION_ALLOC
        self.fb = None          # our copy of a fallback (miss) buffer
        self.stream = stream    # CUDA: the stream current at pack
        self.key = ptr
        self.kind = 0           # 1: never moved (NOSWAP or below min_swap)
        self.noswap = noswap


class _Packed:
    """What autograd keeps for one saved tensor; its death releases the entry's reference."""
    __slots__ = ("ss", "e", "dtype", "size", "stride", "offset", "version", "__weakref__")

    def __init__(self, ss, e, t):
        self.ss = ss
        self.e = e
        self.dtype = t.dtype
        self.size = t.size()
        self.stride = t.stride()
        self.offset = t.storage_offset()
        self.version = t._version

    def __del__(self):
        ss = self.ss
        if ss is not None:
            try:
                ss._unref(self.e)
            except Exception:   # noqa: BLE001 (interpreter shutdown)
                pass


class SmartSwap:
    """Swaps tensors saved for backward to host memory and back, decided by the C core.

    ss = SmartSwap(budget=None, activation_budget=None, device=None, host_memory=None, **options)
    with ss.step(): loss = model(x); loss.backward()
    """

    def __init__(self, budget=None, activation_budget=None, device=None, host_memory=None,
                 **options):
        self._disabled = _env_disabled() or str(options.get("disable", "0")).lower() in _TRUE
        # SMARTSWAP_DISPATCH_MODE=0: detailed iterations without the TorchDispatchMode
        self._detail_mode = os.environ.get("SMARTSWAP_DISPATCH_MODE", "1").strip().lower() in _TRUE
        self._lock = threading.RLock()
        self._t = None
        self._ctx = None
        self._closed = False
        self._in_step = False
        self._reset_local()
        if self._disabled:
            self.budget = self.activation_budget = None
            self.device = None
            return
        self.budget = L.parse_size(budget, "budget")
        self.activation_budget = L.parse_size(activation_budget, "activation_budget")
        self.host_memory = L.parse_size(host_memory, "host_memory")
        if self.budget is None and self.activation_budget is None:
            raise ValueError("smartswap: give budget= (device bytes for the whole process, as "
                             "torch.cuda.memory_allocated counts them) or activation_budget= "
                             "(bytes of saved tensors resident on the device), or both")
        known = L.option_names()
        norm = {}
        for k, v in options.items():
            name = k.replace("_", "-")
            if name not in known:
                raise ValueError("smartswap: unknown option %r; known options: %s"
                                 % (k, ", ".join(n.replace("-", "_") for n in known)))
            norm[name] = v
        self._options = norm
        self.device = None if device is None else torch.device(device)
        if self.device is not None:
            self._check_device(self.device)

    # ---- set-up -------------------------------------------------------------------------------

    def _reset_local(self):
        self._resident = 0
        self._peak_saved = 0
        self._peak_device = None
        self._unswappable = 0
        self._unsw_peak = 0
        self._largest = 0
        self._need = 0
        self._sizes = None
        self._size_vals = None
        self._iters_local = 0
        self._in_hook = False
        self._nbuf = ctypes.c_uint32()

    def _check_device(self, dev):
        if dev.type == "cpu":
            if self.budget is not None:
                raise ValueError("smartswap: on the CPU only activation_budget has a meaning "
                                 "(budget= counts torch.cuda.memory_allocated); pass "
                                 "activation_budget=")
        elif dev.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("smartswap: device %s requested but torch sees no CUDA device"
                                   % dev)
        else:
            raise ValueError("smartswap: device %s is not supported (cpu or cuda)" % dev)

    def _open(self, dev):
        """Opens the C side for device dev (a torch.device)."""
        self._check_device(dev)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        lines = dict(self._options)
        core_budget = self.activation_budget
        self._set_mem = False
        if dev.type == "cuda" and self.budget is not None:
            core_budget = self.budget
            self._set_mem = True
        # the plan aims a little below the budget (PLAN_MARGIN): a sequence of other sizes runs
        # the nearest plan, matched by features, before it gets its own; the eviction before the
        # first plan (api-torch.c) keeps the budget itself
        lines["budget"] = str(int(core_budget * (1.0 - PLAN_MARGIN)))
        if self.host_memory is not None:
            lines["host-mem"] = str(self.host_memory)
        if "min-swap" not in lines and "SMARTSWAP_MIN_SWAP" not in os.environ:
            # the default scales with the budget, so that a small budget on a small model
            # still swaps: 1/64 of the activation budget, at most 64 KiB
            lines["min-swap"] = str(max(256, min(64 << 10, (self.activation_budget or core_budget) // 64)))
        self._min_swap = int(lines["min-swap"]) if str(lines["min-swap"]).isdigit() else None
        if dev.type == "cpu":
            name, stream = "cpu-sim", 0
            if "sim-capacity" not in lines:
                lines["sim-capacity"] = str(max(4 << 30, 4 * core_budget))
        else:
            name = "cuda:%d" % dev.index
            stream = torch.cuda.current_stream(dev).cuda_stream
        text = "\n".join("%s=%s" % (k, v) for k, v in lines.items()).encode()
        lib = L.lib()
        err = ctypes.create_string_buffer(512)
        t = ctypes.c_void_p()
        st = lib.ss_torch_open(name.encode(), stream, text, err, len(err), ctypes.byref(t))
        if st != L.SS_OK:
            raise RuntimeError("smartswap: %s" % (err.value.decode() or L.status_str(st)))
        self._lib = lib
        self._t = t
        self._ctx = lib.ss_torch_ctx(t)
        if not self._set_mem:
            # iterations without a plan keep within the activation budget too (api-torch.c)
            st = lib.ss_torch_set_evict_budget(t, core_budget)
            if st != L.SS_OK:
                self._fail("open", st)
        self._id_bwd = self._intern("backward")
        # operator names, the same in light and detailed iterations: a pack is named after the
        # autograd node that produced the saved tensor ("save:MmBackward0", "save:leaf"), an
        # unpack after the node being run backward ("unpack:MmBackward0"); keyed by node type
        self._save_ids = {}
        self._unpack_ids = {}
        self._mode = None           # the TorchDispatchMode of a detailed iteration
        self._details = None        # its per-operator aten names, call sites and FLOPs
        self._last_details = None
        self._acts = (L.Action * _NACT)()
        self._n = ctypes.c_uint32()
        self._h = ctypes.c_uint64()
        self._ptr = ctypes.c_void_p()
        self._shape = (ctypes.c_int64 * 8)()
        self._entries = {}      # handle -> _Entry
        self._by_ptr = {}       # storage data_ptr -> _Entry (while we hold the storage)
        self._deferred = {}     # handle -> _Entry: DROP seen, storage still held elsewhere
        self._answers = []      # (handle, buffer ptr) to answer
        self._repoll = False
        self._leaf_noswap = True
        self._bwd = False
        self._iter_open = False
        self.on_drop = None     # debug: called with the storage at each real drop

    def _intern(self, name):
        u = ctypes.c_uint32()
        st = self._lib.ss_ctx_intern(self._ctx, name.encode(), ctypes.byref(u))
        if st != L.SS_OK:
            self._fail("intern", st)
        return u.value

    def _node_id(self, table, prefix, node):
        k = type(node)
        nid = table.get(k)
        if nid is None:
            nid = table[k] = self._intern("%s:%s" % (prefix, "leaf" if node is None else node.name()))
        return nid

    # ---- the hooks --------------------------------------------------------------------------

    def _is_param(self, t):
        if isinstance(t, nn.Parameter):
            return True
        b = t._base
        return b is not None and isinstance(b, nn.Parameter)

    def _pack_d(self, t):
        """pack in a detailed iteration: the aten operators since the last hook go to the
        operator the core saw last, then the hook runs outside the mode's records."""
        self._in_hook = True
        try:
            self._detail_flush()
            return self._pack(t)
        finally:
            self._in_hook = False

    def _unpack_d(self, p):
        self._in_hook = True
        try:
            self._detail_flush()
            return self._unpack(p)
        finally:
            self._in_hook = False

    def _detail_flush(self):
        m = self._mode
        n = self._nbuf
        st = self._lib.ss_torch_detail(self._t, m.flops, m.ovh, ctypes.byref(n))
        if st != L.SS_OK:
            self._fail("detail", st)
        if m.cur:
            d = self._details.get(n.value - 1)
            if d is None:
                d = self._details[n.value - 1] = [[], 0.0]
            d[0].extend(m.cur)
            d[1] += m.flops
            m.cur = []
        m.flops = 0.0
        m.ovh = 0.0

    def _pack(self, t):
        if (self._is_param(t) or t.layout != torch.strided or
                (type(t) is not torch.Tensor and not isinstance(t, nn.Parameter)) or t.is_meta):
            return t
        dev = t.device
        if self._t is None:
            if self.device is None or self.device.type == dev.type:
                self._open(self.device or dev)
                self._begin()
            else:
                return t
        if dev != self.device:
            return t
        st = t.untyped_storage()
        ptr = st.data_ptr()
        nbytes = st.nbytes()
        del st
        if not nbytes or not ptr:
            return t
        lib = self._lib
        if self._bwd:   # the next micro-batch's forward
            self._bwd = False
            lib.ss_ctx_phase(self._ctx, L.SS_OP_FWD)
        if self._set_mem:
            lib.ss_ctx_set_mem(self._ctx, torch.cuda.memory_allocated(self.device))
        dt = _DTYPE.get(t.dtype, L.DTYPE_OTHER)
        ndim = t.dim()
        site = (dt << 8) | ndim
        g = t.grad_fn
        nid = self._save_ids.get(type(g))
        if nid is None:
            nid = self._node_id(self._save_ids, "save", g)
        with self._lock:
            e = self._by_ptr.get(ptr)
            if e is not None and e.st is not None and e.nbytes == nbytes:
                st_ = lib.ss_torch_op(self._t, nid, site, self._acts, _NACT,
                                      ctypes.byref(self._n))
            else:
                shape = self._shape
                nd = min(ndim, 8)
                sz = t.shape
                for i in range(nd):
                    shape[i] = sz[i]
                # a storage whose root is a leaf that needs no grad (inputs, buffers, masks
                # made under no_grad) is held by someone else anyway: never moved
                root = t._base if t._base is not None else t
                noswap = self._leaf_noswap and root.grad_fn is None and not root.requires_grad
                st_ = lib.ss_torch_pack(self._t, nid, site, ptr, nbytes, dt, nd, shape,
                                        L.SS_SAVE_NOSWAP if noswap else 0, ctypes.byref(self._h),
                                        self._acts, _NACT, ctypes.byref(self._n))
                if st_ != L.SS_OK:
                    self._fail("pack", st_)
                stream = torch.cuda.current_stream(dev) if dev.type == "cuda" else None
                e = _Entry(self._h.value, t.detach(), ptr, nbytes, stream, noswap)
                self._entries[e.h] = e
                self._by_ptr[ptr] = e
                self._add(nbytes)
                if noswap or (self._min_swap is not None and nbytes < self._min_swap):
                    e.kind = 1
                    self._unswappable += nbytes
                    if self._unswappable > self._unsw_peak:
                        self._unsw_peak = self._unswappable
                elif nbytes > self._largest:
                    self._largest = nbytes
            if st_ != L.SS_OK:
                self._fail("pack", st_)
            e.refs += 1
            self._do_actions()
            self._mark_peak()
        return _Packed(self, e, t)

    def _unpack(self, p):
        if not isinstance(p, _Packed):
            return p
        e = p.e
        lib = self._lib
        node = torch._C._current_autograd_node()
        nid = self._unpack_ids.get(type(node))
        if nid is None:
            nid = self._node_id(self._unpack_ids, "unpack", node)
        with self._lock:
            if e.h not in self._entries:
                raise RuntimeError("smartswap: a saved tensor was unpacked after its release "
                                   "(ss.close() inside backward?)")
            if not self._bwd:
                self._bwd = True
                st = lib.ss_torch_op(self._t, self._id_bwd, 0, self._acts, _NACT, ctypes.byref(self._n))
                if st != L.SS_OK:
                    self._fail("unpack", st)
                self._do_actions()
            dt = _DTYPE.get(p.dtype, L.DTYPE_OTHER)
            st = lib.ss_torch_op(self._t, nid, (dt << 8) | len(p.size), self._acts,
                                 _NACT, ctypes.byref(self._n))
            if st != L.SS_OK:
                self._fail("unpack", st)
            self._do_actions()
            na, ah, ap = self._answer_arrays()
            stream = 0
            if self.device.type == "cuda":
                stream = torch.cuda.current_stream(self.device).cuda_stream
            st = lib.ss_torch_load(self._t, ah, ap, na, e.h, stream, ctypes.byref(self._ptr),
                                   self._acts, _NACT, ctypes.byref(self._n))
            if st != L.SS_OK:
                self._fail("unpack", st)
            ptr = self._ptr.value or 0
            self._do_actions()
            if e.st is not None and ptr == e.ptr:
                storage = e.st.untyped_storage()
            elif e.buf is not None and ptr == e.buf.data_ptr():
                storage = e.buf.untyped_storage()
            else:
                if e.fb is None or e.fb.data_ptr() == 0:
                    e.fb = self._copy_fallback(ptr, e.nbytes)
                    self._add(e.nbytes)
                storage = e.fb.untyped_storage()
            self._mark_peak()
        self._check_version(p)
        out = torch.empty((), dtype=p.dtype, device=self.device)
        out.set_(storage, p.offset, p.size, p.stride)
        return out

    def _check_version(self, p):
        # dropped entries: nobody else held the storage, so nothing can have changed it
        st = p.e.st
        if st is not None and st._version != p.version:
            raise RuntimeError(_INPLACE_MSG.format(kind=p.dtype, shape=list(p.size),
                                                   now=st._version, then=p.version))

    def _copy_fallback(self, ptr, nbytes):
        """A torch tensor holding the nbytes at the core's own fallback buffer ptr (a miss)."""
        if self.device.type == "cpu":
            out = torch.empty(nbytes, dtype=torch.uint8)
            ctypes.memmove(out.data_ptr(), ptr, nbytes)
            return out

        class _Cai:   # __cuda_array_interface__ of the core's buffer
            pass
        src = _Cai()
        src.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                        "data": (ptr, False), "version": 3,
                                        "stream": None}
        return torch.as_tensor(src, device=self.device).clone()

    def _answer_arrays(self):
        a = self._answers
        na = len(a)
        if not na:
            return 0, None, None
        ah = (ctypes.c_uint64 * na)(*[h for h, _ in a])
        ap = (ctypes.c_void_p * na)(*[q for _, q in a])
        self._answers = []
        return na, ah, ap

    def _do_actions(self):
        """Executes the actions in self._acts[:self._n] (lock held); answers ALLOCs at once."""
        n = self._n.value
        while n:
            acts = self._acts
            for i in range(n):
                a = acts[i]
                e = self._entries.get(a.handle)
                if a.kind == L.SS_ACTION_DROP:
                    if e is not None:
                        self._drop(e)
                elif a.kind == L.SS_ACTION_ALLOC:
                    q = None
                    if e is not None:
                        try:
                            if e.stream is not None:
                                with torch.cuda.stream(e.stream):
                                    e.buf = torch.empty(e.nbytes, dtype=torch.uint8, device=self.device)
                            else:
                                e.buf = torch.empty(e.nbytes, dtype=torch.uint8, device=self.device)
                            q = e.buf.data_ptr()
                            self._add(e.nbytes)
                        except RuntimeError:   # out of memory: the load takes the slow path
                            e.buf = None
                    self._answers.append((a.handle, q))
            self._n.value = 0
            if self._answers:
                na, ah, ap = self._answer_arrays()
                st = self._lib.ss_torch_load(self._t, ah, ap, na, 0, 0, None, self._acts, _NACT,
                                             ctypes.byref(self._n))
                if st != L.SS_OK:
                    self._fail("answer", st)
            elif self._repoll:   # a deferred drop made the core evict others
                self._repoll = False
                st = self._lib.ss_torch_poll(self._t, self._acts, _NACT, ctypes.byref(self._n))
                if st != L.SS_OK:
                    self._fail("poll", st)
            n = self._n.value
        if self._deferred:
            for h in list(self._deferred):
                e = self._deferred[h]
                if e.st is None or _use_count(e.st) <= 1:
                    del self._deferred[h]
                    self._release_storage(e)
                    self._lib.ss_torch_held(self._t, h, 0)

    def _drop(self, e):
        if e.st is None:
            return
        if _use_count(e.st) > 1:   # someone else holds it: dropping would free nothing yet
            self._deferred[e.h] = e
            if self._lib.ss_torch_held(self._t, e.h, 1) != L.SS_OK:
                self._fail("drop", 1)
            self._repoll = True
            return
        self._release_storage(e)

    def _release_storage(self, e):
        if e.st is None:
            return
        if self.on_drop is not None:
            self.on_drop(e.st)
        if self._by_ptr.get(e.key) is e:
            del self._by_ptr[e.key]
        e.st = None
        self._sub(e.nbytes)

    def _add(self, n):
        self._resident += n

    def _mark_peak(self):
        """The peak is taken when a hook returns to torch, after the core acted on the save or
        load (the tensor being saved already exists when pack sees it: that transient is not
        counted, docs/pytorch.md)."""
        if self._resident > self._peak_saved:
            self._peak_saved = self._resident

    def _sub(self, n):
        self._resident -= n

    def _unref(self, e):
        with self._lock:
            e.refs -= 1
            if e.refs > 0 or self._t is None or e.h not in self._entries:
                return
            del self._entries[e.h]
            self._deferred.pop(e.h, None)
            st = self._lib.ss_torch_release(self._t, e.h)
            if e.st is not None:
                if self._by_ptr.get(e.key) is e:
                    del self._by_ptr[e.key]
                e.st = None
                self._sub(e.nbytes)
            if e.kind == 1:
                self._unswappable -= e.nbytes
            if e.buf is not None:
                e.buf = None
                self._sub(e.nbytes)
            if e.fb is not None:
                e.fb = None
                self._sub(e.nbytes)
            if st != L.SS_OK:
                self._fail("release", st)

    def _fail(self, what, st):
        msg = L.lib().ss_torch_last_error().decode()
        raise RuntimeError("smartswap: %s failed: %s%s" % (what, L.status_str(st),
                                                           (" (%s)" % msg) if msg else ""))

    # ---- iterations -------------------------------------------------------------------------

    def _begin(self):
        st = self._lib.ss_ctx_iter_begin(self._ctx)
        if st != L.SS_OK:
            self._fail("step begin", st)
        self._iter_open = True
        self._bwd = False
        if self._size_vals is not None:
            v = self._size_vals
            arr = (ctypes.c_int64 * max(1, len(v)))(*v)
            st = self._lib.ss_torch_set_sizes(self._t, arr, len(v))
            if st != L.SS_OK:
                self._fail("sizes", st)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def _end(self):
        with self._lock:
            st = self._lib.ss_torch_poll(self._t, self._acts, _NACT, ctypes.byref(self._n))
            if st == L.SS_OK:
                self._do_actions()
        rep = L.IterReport()
        st = self._lib.ss_ctx_iter_end(self._ctx, ctypes.byref(rep))
        self._iter_open = False
        if st != L.SS_OK:
            self._fail("step end", st)
        with self._lock:
            st = self._lib.ss_torch_poll(self._t, self._acts, _NACT, ctypes.byref(self._n))
            if st == L.SS_OK:
                self._do_actions()
        self._last_rep = rep
        if self.device.type == "cuda":
            pk = torch.cuda.max_memory_allocated(self.device)
            self._peak_device = max(self._peak_device or 0, pk)
        return rep

    @contextlib.contextmanager
    def step(self, sizes=None):
        """One iteration: forward and backward (several for gradient accumulation; none is
        fine). sizes: optional varying dimensions (e.g. {"seq": 512}, (batch, seq) or an int):
        folded into the iteration's size signature (ss_torch_set_sizes), so the plan cache keys
        iterations by them as well as by the saved bytes; stats()["sizes"] shows the last.
        An iteration the core records in detail from its start runs inside a TorchDispatchMode
        (op_details())."""
        if self._disabled:
            yield self
            return
        if self._closed:
            raise RuntimeError("smartswap: step() after close()")
        if self._in_step:
            raise RuntimeError("smartswap: step() inside step(): one iteration at a time")
        if sizes is not None and not isinstance(sizes, (dict, tuple, list, int)):
            raise TypeError("smartswap: sizes= takes a dict, a tuple or an int, not %s"
                            % type(sizes).__name__)
        self._size_vals = None if sizes is None else _size_values(sizes)
        self._sizes = sizes
        self._in_step = True
        if self._t is not None:
            self._begin()
        mode = None
        if (self._t is not None and _DetailMode is not None and self._detail_mode and
                self._lib.ss_torch_recording(self._t) == 1):
            mode = self._mode = _DetailMode(self)
            self._details = {}
        ok = False
        try:
            if mode is None:
                with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                    yield self
            else:
                with torch.autograd.graph.saved_tensors_hooks(self._pack_d, self._unpack_d), mode:
                    yield self
            ok = True
        finally:
            self._in_step = False
            if mode is not None:
                self._mode = None
                try:
                    if self._t is not None and self._iter_open:
                        self._detail_flush_to(mode)
                finally:
                    self._last_details = (self._details, mode.nops)
                    self._details = None
            if self._t is not None and self._iter_open:
                if ok:
                    self._end()
                    self._iters_local += 1
                    self._check_budget()
                else:
                    try:
                        self._end()
                    except RuntimeError:
                        pass

    def _detail_flush_to(self, mode):
        self._mode = mode
        try:
            self._detail_flush()
        finally:
            self._mode = None

    def op_details(self):
        """The last detailed iteration run inside the TorchDispatchMode: one dict per operator
        of the core's sequence that aten operators ran after (index "op" as in the profile;
        -1: before the first), with "aten" (OpOverload names in order), "sites" ("file:line"
        of each in forward, "backward" in backward) and "flops" (their sum, from
        torch.utils.flop_counter's formulas). [] before any."""
        if not self._last_details:
            return []
        d, _ = self._last_details
        out = []
        for i in sorted(d):
            ops, fl = d[i]
            out.append({"op": i, "aten": [o[0] for o in ops],
                        "sites": [o[1] if isinstance(o[1], str) or o[1] is None
                                  else "%s:%d" % o[1] for o in ops],
                        "flops": fl})
        return out

    def _check_budget(self):
        b = self.activation_budget
        if b is None or self._t is None:
            return
        self._need = max(self._need, self._unsw_peak + self._largest)
        if self._need > b:
            raise ValueError("smartswap: activation_budget=%d bytes cannot work: %d bytes of "
                             "saved tensors are never moved (below min_swap=%s, or leaf tensors "
                             "such as inputs and buffers) and the largest saved tensor that can "
                             "move is %d bytes; the smallest activation_budget that can work is "
                             "%d bytes" % (b, self._unsw_peak, self._min_swap, self._largest,
                                           self._need))

    # ---- stats and lifetime ------------------------------------------------------------------

    def stats(self):
        """Counters since the start (or reset_stats())."""
        base = {
            "stage": "disabled" if self._disabled else "warmup", "seq_hash": 0, "iterations": 0,
            "detailed_iterations": 0, "swapped_out_bytes": 0, "swapped_in_bytes": 0,
            "stalls": 0, "misses": 0, "evictions": 0, "peak_saved_bytes": self._peak_saved,
            "peak_device_bytes": self._peak_device, "plans_made": 0, "plans_cached": 0,
            "cache_hits": 0, "profile_overhead_seconds": 0.0, "resident_saved_bytes": self._resident,
            "prefetches_refused": 0,
            "sizes": self._sizes,
        }
        if self._t is None:
            return base
        s = L.TorchStats()
        st = self._lib.ss_torch_get_stats(self._t, ctypes.byref(s))
        if st != L.SS_OK:
            self._fail("stats", st)
        for k, _ in L.TorchStats._fields_:
            base[k] = getattr(s, k)
        base["stage"] = L.STAGE_NAMES[s.stage] if 0 <= s.stage < 4 else "?"
        base["last_stage"] = L.STAGE_NAMES[s.last_stage] if 0 <= s.last_stage < 4 else "?"
        base["seq_hash"] = s.seq_hash
        rep = getattr(self, "_last_rep", None)
        base["size_sig"] = rep.size_sig if rep is not None else 0
        base["ops"] = rep.nops if rep is not None else 0
        base["last_detailed"] = rep.detailed if rep is not None else 0
        base["host_peak_bytes"] = s.host_peak_bytes
        for k in _COUNTERS:
            base[k] -= self._zero.get(k, 0)
        return base

    _zero = {}

    def reset_stats(self):
        """Counters restart from zero (peaks from what is resident now)."""
        z = {}
        if self._t is not None:
            cur = self.stats()
            prev = self._zero
            for k in _COUNTERS:
                z[k] = cur[k] + prev.get(k, 0)
        self._zero = z
        self._peak_saved = self._resident
        self._peak_device = None

    def close(self):
        """Frees the C side. Saved tensors still alive keep their storage resident."""
        if self._closed:
            return
        self._closed = True
        if self._t is None:
            return
        with self._lock:
            # packed tensors still alive whose bytes are on the host only cannot be unpacked
            # afterwards (unpack raises): close after backward
            t, self._t = self._t, None
            self._lib.ss_torch_close(t)
            self._entries.clear()
            self._by_ptr.clear()
            self._deferred.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:   # noqa: BLE001
            pass
