"""Detailed iterations inside a TorchDispatchMode with the same operator sequence as light ones
(issue 13, item 4), step(sizes=...) in the size signature, and the activation budget kept in a
Stable iteration whose plan the sizes outgrew (framework-owned memory)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import smartswap
from helpers import Meter, assert_identical, param_storages, run, saved_bytes_of_step


def mlp(layers=4, d=64):
    return nn.Sequential(*[nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                           for _ in range(layers)])


def test_detailed_iteration_same_sequence_and_aten_details():
    torch.manual_seed(0)
    m, x = mlp(), torch.randn(32, 64)
    ss = smartswap.SmartSwap(activation_budget=200_000, device="cpu")
    seen = []
    for _ in range(5):
        m.zero_grad()
        with ss.step():
            m(x).sum().backward()
        s = ss.stats()
        seen.append((s["last_stage"], s["last_detailed"], s["seq_hash"], s["ops"]))
    ss.close()
    stages = [a for a, _, _, _ in seen]
    assert stages[:4] == ["warmup", "warmup", "genpolicy", "stable"], seen
    assert seen[2][1] == 1, seen                       # recorded in detail from op 0
    assert len({(h, n) for _, _, h, n in seen}) == 1, seen   # light == detailed
    assert s["swapped_out_bytes"] > 0
    d = ss.op_details()
    assert d, "the detailed iteration recorded no aten operator"
    names = [n for e in d for n in e["aten"]]
    assert "aten.addmm.default" in names and "aten.mm.default" in names, names[:20]
    fwd_sites = [x for e in d for x in e["sites"] if x != "backward"]
    assert any(x.startswith(__file__) for x in fwd_sites), fwd_sites[:5]
    assert all(e["op"] < seen[2][3] for e in d)
    # FLOPs: the forward addmms alone are 2 * 32 * 64 * 256 * 2 per layer
    assert sum(e["flops"] for e in d) >= 4 * 2 * (2 * 32 * 64 * 256)


def test_detailed_iteration_is_bit_identical():
    torch.manual_seed(0)
    m = mlp(3, 48)
    x = torch.randn(16, 48)

    def step(mm, i):
        loss = mm(x * (1 + i)).square().mean()
        loss.backward()
        return loss
    opt = lambda mm: torch.optim.SGD(mm.parameters(), lr=0.1)   # noqa: E731
    plain = run(m, opt, step, 5)
    ss = smartswap.SmartSwap(activation_budget=40_000, device="cpu")
    out = run(m, opt, step, 5, ss=ss)
    assert ss.stats()["detailed_iterations"] >= 1
    ss.close()
    assert_identical(plain, out)


def test_sizes_enter_the_size_signature():
    m, x = mlp(2, 32), torch.randn(8, 32)
    ss = smartswap.SmartSwap(activation_budget=1 << 30, device="cpu", warmup=1)
    sig = {}
    for sz in ({"seq": 8}, {"seq": 8}, {"seq": 9}, (8, 9), None, {"seq": 9}):
        with ss.step(sizes=sz):
            m(x).sum().backward()
        sig.setdefault(repr(sz), set()).add(ss.stats()["size_sig"])
        assert ss.stats()["sizes"] == sz
    with pytest.raises(TypeError, match="ints"):
        with ss.step(sizes={"seq": "long"}):
            pass
    ss.close()
    assert all(len(v) == 1 for v in sig.values()), sig     # the same sizes, the same signature
    assert len({next(iter(v)) for v in sig.values()}) == 4, sig


class Tiny(nn.Module):
    def __init__(self, vocab=64, d=48, layers=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.GELU(),
                                                  nn.Linear(3 * d, d)) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def test_budget_kept_when_sizes_outgrow_a_stable_plan():
    """Short sequences until Stable, then ones 3x longer: the Stable plan made for the short
    ones is outgrown, and the executor evicts within the plan's iteration (exec.c
    ssi_exec_evict_framework); resident saved bytes stay within the budget in every step."""
    torch.manual_seed(0)
    model = Tiny()
    g = torch.Generator().manual_seed(3)
    lengths = [16] * 4 + [48] * 4 + [16] * 2
    data = [torch.randint(0, 64, (4, L + 1), generator=g) for L in lengths]

    def step(m, i):
        d = data[i]
        logits = m(d[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 64), d[:, 1:].reshape(-1))
        loss.backward()
        return loss
    long_i = lengths.index(48)
    saved, largest = saved_bytes_of_step(model, lambda m, i: step(m, long_i))
    budget = saved // 4
    assert largest <= budget
    opt = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)   # noqa: E731
    plain = run(model, opt, step, len(lengths))
    ss = smartswap.SmartSwap(activation_budget=budget, device="cpu", max_detailed=1)
    box = {}
    meter = Meter(ss, exclude=lambda: box.get("ex", set()))
    stages = []

    def stepped(m, i):
        box.setdefault("ex", param_storages(m))
        return step(m, i)
    orig_end = ss._end

    def end():
        r = orig_end()
        stages.append((r.stage, r.detailed, r.plan_event))
        return r
    ss._end = end
    out = run(model, opt, stepped, len(lengths), ss=ss, meter=meter)
    st = ss.stats()
    ss.close()
    assert_identical(plain, out)
    assert stages[long_i][0] == 2, stages        # the first long step ran in Stable, planned
    assert max(meter.step_peaks) <= budget, (meter.step_peaks, budget, stages, st)
    assert st["peak_saved_bytes"] <= budget, (st["peak_saved_bytes"], budget)
    assert st["evictions"] > 0, st
