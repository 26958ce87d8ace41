"""The adapter's API as users rely on it (issue 13, item 1) and its tensor rules (item 5)."""
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import smartswap

KEYS = ("stage", "seq_hash", "iterations", "detailed_iterations", "swapped_out_bytes",
        "swapped_in_bytes", "stalls", "misses", "evictions", "peak_saved_bytes",
        "peak_device_bytes", "plans_made", "plans_cached", "cache_hits",
        "profile_overhead_seconds")


def mlp(layers=6, d=128):
    return nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(layers)])


def train(ss, m, x, steps):
    for _ in range(steps):
        m.zero_grad()
        with ss.step():
            m(x).square().mean().backward()


def test_stats_keys_and_lifecycle():
    m, x = mlp(), torch.randn(32, 128)
    with smartswap.SmartSwap(activation_budget="96KiB") as ss:
        s0 = ss.stats()
        assert all(k in s0 for k in KEYS)
        train(ss, m, x, 5)
        s = ss.stats()
        assert all(k in s for k in KEYS), set(KEYS) - set(s)
        assert s["iterations"] == 5 and s["stage"] == "stable"
        assert s["plans_made"] >= 1 and s["plans_cached"] >= 1
        assert s["swapped_out_bytes"] > 0 and s["peak_device_bytes"] is None
        assert s["peak_saved_bytes"] <= 96 << 10
        assert s["detailed_iterations"] >= 1
        ss.reset_stats()
        r = ss.stats()
        assert r["iterations"] == 0 and r["swapped_out_bytes"] == 0
        train(ss, m, x, 1)
        assert ss.stats()["iterations"] == 1
    ss.close()   # twice is fine
    with pytest.raises(RuntimeError):
        with ss.step():
            pass


def test_sizes_and_errors():
    with pytest.raises(ValueError, match="budget"):
        smartswap.SmartSwap()
    with pytest.raises(ValueError, match="only activation_budget"):
        smartswap.SmartSwap(budget="1GiB", device="cpu")
    with pytest.raises(ValueError, match="min_swap"):
        smartswap.SmartSwap(activation_budget=1 << 20, no_such_option=3)
    with pytest.raises(ValueError, match="not a size"):
        smartswap.SmartSwap(activation_budget="lots")
    ss = smartswap.SmartSwap(activation_budget="1.5MiB", min_swap="4KiB", warmup=1)
    assert ss.activation_budget == 3 << 19
    ss.close()
    with pytest.raises(RuntimeError, match="min-swap|min_swap|range|invalid"):
        s2 = smartswap.SmartSwap(activation_budget=1 << 20, min_swap="-3")
        with s2.step():
            mlp(1)(torch.randn(4, 128)).sum().backward()


def test_budget_too_small_names_the_smallest():
    m = mlp(2, 256)
    x = torch.randn(64, 256)
    ss = smartswap.SmartSwap(activation_budget=4096)
    with pytest.raises(ValueError, match="smallest activation_budget that can work is"):
        with ss.step():
            m(x).sum().backward()
    ss.close()


def test_step_without_backward_and_eval():
    m, x = mlp(), torch.randn(16, 128)
    ss = smartswap.SmartSwap(activation_budget="64KiB")
    train(ss, m, x, 3)
    with torch.no_grad():
        with ss.step():
            m(x)
    with ss.step():
        m(x)          # forward only, graph dropped
    train(ss, m, x, 2)
    assert ss.stats()["iterations"] == 7
    ss.close()


def test_disable_env_is_pass_through():
    code = ("import torch, smartswap\n"
            "ss = smartswap.SmartSwap(activation_budget=1000)\n"
            "m = torch.nn.Linear(8, 8); x = torch.randn(4, 8)\n"
            "with ss.step():\n"
            "    m(x).sum().backward()\n"
            "s = ss.stats(); assert s['stage'] == 'disabled' and s['iterations'] == 0, s\n"
            "assert ss._t is None\n"
            "print('ok')\n")
    env = dict(os.environ, SMARTSWAP_DISABLE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_parameters_never_copied_and_views_restored():
    m = mlp(4, 128)
    x = torch.randn(32, 128)
    ss = smartswap.SmartSwap(activation_budget="48KiB", min_swap=256)
    pst = {p.untyped_storage().data_ptr() for p in m.parameters()}
    dropped = []
    train(ss, m, x, 1)   # opens the C side
    ss.on_drop = lambda st: dropped.append(st.data_ptr())
    train(ss, m, x, 4)
    assert dropped and not (set(dropped) & pst)
    assert ss.stats()["swapped_out_bytes"] > 0
    ss.close()


def test_saved_twice_stored_once_and_retain_graph():
    x = torch.randn(64, 64, requires_grad=True)
    ss = smartswap.SmartSwap(activation_budget=1 << 20)
    with ss.step():
        y = x * 2
        z = (y * y).sum()            # y saved twice by one op: one storage, one handle
        n_entries = len(ss._entries)
        assert n_entries == 1
        g1, = torch.autograd.grad(z, x, retain_graph=True)
        g2, = torch.autograd.grad(z, x)
    assert torch.equal(g1, g2) and torch.equal(g1, 8 * x.detach())
    ss.close()


def test_inplace_on_saved_tensor_raises():
    ss = smartswap.SmartSwap(activation_budget=1 << 20)
    a = torch.randn(16, 16, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        with ss.step():
            b = a.exp()          # exp saves its output
            b.mul_(2)
            b.sum().backward()
    ss.close()
    # without smartswap, autograd says the same
    b = a.exp()
    b.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()


def test_two_instances_and_threads():
    import threading
    errs = []

    def work(seed):
        try:
            torch.manual_seed(seed)
            m, x = mlp(3, 64), torch.randn(16, 64)
            ss = smartswap.SmartSwap(activation_budget="24KiB", min_swap=256)
            train(ss, m, x, 4)
            assert ss.stats()["iterations"] == 4
            ss.close()
        except Exception as e:   # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_requested_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        smartswap.SmartSwap(activation_budget=1 << 20, device="cuda")
