"""smartswap inside each rank of DistributedDataParallel and FSDP2 (fully_shard): 2 processes
over gloo on the CPU. Each rank trains the same model with and without smartswap and compares
losses, gradients and weights bit for bit; the FSDP2 run checks that no parameter (sharded or
unsharded) ever reached the core."""
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

HERE = os.path.dirname(__file__)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Net(nn.Module):
    def __init__(self, d=64, layers=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(),
                                                  nn.Linear(2 * d, d)) for _ in range(layers))
        self.head = nn.Linear(d, 8)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def _worker(rank, world, port, kind, out):
    sys.path.insert(0, HERE)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import smartswap
        from helpers import Meter, assert_identical

        torch.manual_seed(0)
        base = Net()
        g = torch.Generator().manual_seed(10 + rank)
        data = [torch.randn(32, 64, generator=g) for _ in range(6)]
        tgt = [torch.randint(0, 8, (32,), generator=g) for _ in range(6)]

        def wrap(m):
            if kind == "ddp":
                return nn.parallel.DistributedDataParallel(m)
            from torch.distributed.fsdp import fully_shard
            for b in m.blocks:
                fully_shard(b)
            fully_shard(m)
            return m

        def train(ss):
            torch.manual_seed(0)
            m = Net()
            m.load_state_dict(base.state_dict())
            m = wrap(m)
            if ss is not None:
                holder["m"] = m
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
            losses, grads = [], []
            for i in range(6):
                opt.zero_grad(set_to_none=True)

                def body():
                    loss = nn.functional.cross_entropy(m(data[i]), tgt[i])
                    loss.backward()
                    return loss
                if ss is None:
                    loss = body()
                else:
                    with ss.step():
                        loss = body()
                    if meter is not None:
                        meter.end_step()
                losses.append(loss.detach().clone())
                grads.append([(p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad)
                              .detach().clone() for p in m.parameters()])
                opt.step()
            ws = [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
                  for p in m.parameters()]
            return (losses, grads, ws), m

        meter = None
        plain, _ = train(None)
        ss = smartswap.SmartSwap(activation_budget="48KiB", min_swap=1024)
        holder = {}
        to_core = []
        param_hits = []

        def params_now():
            m = holder.get("m")
            out = set()
            if m is not None:
                for p in m.parameters():
                    loc = p.to_local() if hasattr(p, "to_local") else p
                    out.add(loc.untyped_storage().data_ptr())
            return out

        meter = Meter(ss, exclude=params_now)
        inner = ss._pack

        def spy(t):
            r = inner(t)
            if r is not t:   # it went to the core
                to_core.append(t.untyped_storage().nbytes())
                if isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter) or \
                        t.untyped_storage().data_ptr() in params_now():
                    param_hits.append(tuple(t.shape))
            return r
        # the meter wraps ss._pack; the spy goes around it
        ss._pack = spy
        swapped, _ = train(ss)
        assert params_now(), "the parameter set to check against is empty"
        st = ss.stats()
        ss.close()
        assert_identical(plain, swapped)
        assert st["swapped_out_bytes"] > 0, st
        assert to_core, "nothing reached the core"
        assert not param_hits, "parameters reached the core: %s" % param_hits[:5]
        assert max(meter.step_peaks) <= 48 << 10, meter.step_peaks
        out.put((rank, "ok", (st["swapped_out_bytes"], len(to_core), max(meter.step_peaks))))
    except BaseException as e:   # noqa: BLE001
        import traceback
        out.put((rank, "fail", traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def _run(kind):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = free_port()
    ps = [ctx.Process(target=_worker, args=(r, 2, port, kind, q)) for r in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(300)
    res = []
    while not q.empty():
        res.append(q.get())
    for p in ps:
        if p.is_alive():
            p.kill()
    assert len(res) == 2, res
    for rank, status, info in res:
        assert status == "ok", "rank %d:\n%s" % (rank, info)
    print(kind, sorted(res))


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")
def test_ddp_two_ranks():
    _run("ddp")


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")
def test_fsdp2_two_ranks_no_parameter_swapped():
    pytest.importorskip("torch.distributed.fsdp")
    _run("fsdp2")
