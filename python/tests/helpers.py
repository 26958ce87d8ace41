"""Shared helpers of the adapter's tests: an independent meter of resident saved bytes, the
saved-bytes probe that sizes the budgets, and a training loop that records everything that
must be bit-identical with and without smartswap."""
import copy

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef


def param_storages(model):
    return {p.untyped_storage().data_ptr() for p in model.parameters()} | \
        {b.untyped_storage().data_ptr() for b in model.buffers()}


def saved_bytes_of_step(model, step_fn):
    """The peak of saved bytes resident at once in one plain step (distinct storages saved for
    backward and still alive, parameters excluded, sampled after every save), and the largest
    saved storage. Storages are told apart by identity, not address, so a storage freed and a new
    one at its address (micro-batches of an accumulated step) never merge: the figure does not
    depend on where the allocator happens to place them."""
    live = {}
    peak = [0, 0]
    m = copy.deepcopy(model)

    def pack(t):
        if isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter):
            return t
        s = t.untyped_storage()
        key = s._cdata
        old = live.get(key)
        if old is None or old[0].expired():
            live[key] = (StorageWeakRef(s), s.nbytes())
        peak[1] = max(peak[1], s.nbytes())
        del s
        tot = 0
        for k, (w, n) in list(live.items()):
            if w.expired():
                del live[k]
            else:
                tot += n
        peak[0] = max(peak[0], tot)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step_fn(m, 0)
    return peak[0], peak[1]


class Meter:
    """Resident saved bytes measured apart from the adapter's own tally: a StorageWeakRef per
    distinct storage the adapter received (parameters excluded), summed over those not expired,
    plus the storages unpack returned (swap-in buffers), sampled after every pack and unpack
    (what the core has had a chance to act on)."""

    def __init__(self, ss, exclude=()):
        self.ss = ss
        self.refs = {}
        self.exclude = exclude
        self.peak = 0
        self.step_peaks = []
        pack, unpack = ss._pack, ss._unpack

        def mpack(t):
            r = pack(t)
            if not (isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter)):
                s = t.untyped_storage()
                if s.data_ptr() not in self.exclude():
                    self.refs[s._cdata] = (StorageWeakRef(s), s.nbytes())
            del t
            self.sample()
            return r

        def munpack(p):
            r = unpack(p)
            if r is not p:   # a swap-in buffer is resident saved bytes too
                s = r.untyped_storage()
                self.refs[s._cdata] = (StorageWeakRef(s), s.nbytes())
            self.sample()
            return r

        ss._pack, ss._unpack = mpack, munpack

    def sample(self):
        # swap-in buffers the adapter allocated ahead of their unpack are resident too
        for e in list(self.ss._entries.values()):
            b = getattr(e, "buf", None)
            if b is not None:
                s = b.untyped_storage()
                self.refs[s._cdata] = (StorageWeakRef(s), s.nbytes())
        tot = 0
        for k, (w, n) in list(self.refs.items()):
            if w.expired():
                del self.refs[k]
            else:
                tot += n
        self.peak = max(self.peak, tot)

    def end_step(self):
        """Closes a step: storages received in it (inputs still held by the test's data, ...)
        do not count in the next one."""
        self.step_peaks.append(self.peak)
        self.peak = 0
        self.refs.clear()


def run(model, opt_fn, step_fn, steps, ss=None, meter=None):
    """Trains a copy of model for `steps` optimizer steps; returns losses, per-step gradients
    and final weights (all tensors, for torch.equal)."""
    m = copy.deepcopy(model)
    opt = opt_fn(m)
    losses, grads = [], []
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        if ss is not None:
            with ss.step():
                loss = step_fn(m, i)
            if meter is not None:
                meter.end_step()
        else:
            loss = step_fn(m, i)
        losses.append(loss.detach().clone())
        grads.append([p.grad.detach().clone() if p.grad is not None else None
                      for p in m.parameters()])
        opt.step()
    weights = [p.detach().clone() for p in m.parameters()]
    return losses, grads, weights


def assert_identical(a, b):
    la, ga, wa = a
    lb, gb, wb = b
    assert len(la) == len(lb)
    for i, (x, y) in enumerate(zip(la, lb)):
        assert torch.equal(x, y), "loss of step %d differs: %r vs %r" % (i, x, y)
    for i, (sa, sb) in enumerate(zip(ga, gb)):
        for j, (x, y) in enumerate(zip(sa, sb)):
            assert (x is None) == (y is None), "step %d grad %d: None on one side" % (i, j)
            assert x is None or torch.equal(x, y), "step %d: gradient %d differs" % (i, j)
    for j, (x, y) in enumerate(zip(wa, wb)):
        assert torch.equal(x, y), "final weight %d differs" % j
