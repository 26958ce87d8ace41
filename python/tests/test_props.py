"""Property tests: pack/unpack round trips over random shapes, dtypes, strides and views, with
the core forced to swap everything it can (tiny budget, min_swap 1 byte)."""
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as S

import smartswap

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]

_SS = {}


def ss_for():
    if "ss" not in _SS:
        ss = smartswap.SmartSwap(activation_budget=64 << 10, min_swap=1, warmup=0)
        with ss.step():   # opens the C side
            ss._pack(torch.randn(4))
        ss._leaf_noswap = False   # these leaves are nobody's: let the core move them
        _SS["ss"] = ss
    return _SS["ss"]


@S.composite
def views(draw):
    dtype = draw(S.sampled_from(DTYPES))
    ndim = draw(S.integers(1, 4))
    shape = draw(S.lists(S.integers(1, 7), min_size=ndim, max_size=ndim))
    g = torch.Generator().manual_seed(draw(S.integers(0, 2 ** 31)))
    base = (torch.randn(shape, generator=g) * 50)
    base = base.to(dtype) if dtype != torch.bool else base > 0
    kind = draw(S.sampled_from(["plain", "transpose", "slice", "expand", "dtype_view", "offset"]))
    v = base
    if kind == "transpose" and ndim >= 2:
        v = base.transpose(0, ndim - 1)
    elif kind == "slice":
        d = draw(S.integers(0, ndim - 1))
        step = draw(S.integers(1, 3))
        v = base.narrow(d, 0, max(1, shape[d] // 2 + 1))[(slice(None),) * d + (slice(None, None, step),)]
    elif kind == "expand":
        v = base.unsqueeze(0).expand(3, *shape)
    elif kind == "dtype_view" and dtype == torch.float32:
        v = base.view(torch.int32)
    elif kind == "offset" and base.numel() > 1:
        v = base.reshape(-1)[1:]
    n_saves = draw(S.integers(1, 3))
    return v, n_saves


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(views(), S.integers(1, 3))
def test_round_trip(case, unpacks):
    v, n_saves = case
    ss = ss_for()
    expect = v.clone()
    meta = (v.dtype, v.shape, v.stride(), v.storage_offset())
    got = []
    with ss.step():
        packed = [ss._pack(v) for _ in range(n_saves)]
        del v   # only the adapter holds the storage now: the core may swap it
        # a few more saves so that free points and prefetches pass over the packed ones
        filler = [ss._pack(torch.randn(4096)) for _ in range(8)]
        for _ in range(unpacks):
            for p in reversed(packed):
                got.append(ss._unpack(p))
        for p in filler:
            ss._unpack(p)
        del packed, filler
    for t in got:
        assert (t.dtype, t.shape, t.stride(), t.storage_offset()) == meta
        assert torch.equal(t, expect)


def test_swaps_happen_in_round_trips():
    ss = ss_for()
    for _ in range(4):
        with ss.step():
            a = [ss._pack(torch.randn(4096)) for _ in range(8)]
            b = [ss._unpack(p) for p in reversed(a)]
            del a, b
    s = ss.stats()
    assert s["swapped_out_bytes"] > 0 and s["swapped_in_bytes"] > 0, s
