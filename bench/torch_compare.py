#!/usr/bin/env python3
"""torch_compare.py: smartswap next to PyTorch's own memory savers on a Llama-shaped model
(issue 13, item 10; docs/pytorch.md "Benchmark").

Runs, in one process, on one model and data:
  none        no hooks at all
  checkpoint  torch.utils.checkpoint on every decoder block (non-reentrant)
  save_on_cpu torch.autograd.graph.save_on_cpu(pin_memory=True)   (CUDA only: on CPU tensors
              it copies nothing, so it is not run there)
  smartswap   SmartSwap(activation_budget = budget) (default: a quarter of one step's saved
              bytes)
and prints step time (median of the measured steps), peak memory (CUDA: torch's peak allocated
bytes; CPU: the peak of resident saved bytes, measured with StorageWeakRef over the storages the
hooks received, as the tests do) and the final loss, side by side.

Then the profiler overheads the paper compares, as % of the step time of the same run:
  stable      smartswap in Stable with a budget nothing exceeds, vs no hooks (target <= 10 %)
  light       time inside the C core's calls per Stable step (op hashing, save and load
              bookkeeping, ctypes included) / step time (target <= 1 %)
  detailed    detailed (GenPolicy) iterations run as users get them: inside the adapter's
              TorchDispatchMode (aten names, call sites, FLOPs) with the C core recording; the
              wall time of such a step over the Stable step of the same instance, interleaved
              with no-hook steps of a twin model, planning at iter_end left out (it is reported
              apart), median over --detail-runs fresh instances (target <= 35 %). torch._dynamo,
              which the first TorchDispatchMode of a process imports, is imported beforehand
              and its one-time cost is reported apart
  torch.profiler  a step under torch.profiler.profile(record_shapes, profile_memory,
              with_stack) over one without (seed: 219.7 %)

    python3 bench/torch_compare.py [--hidden 512] [--layers 4] [--seq 128] [--batch 4]
        [--steps 8] [--device cpu|cuda] [--dtype float32|bfloat16] [--budget BYTES|quarter]
        [--json FILE]
"""
import argparse
import copy
import ctypes
import datetime
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

import smartswap  # noqa: E402


def build(args, device, dtype):
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                                   intermediate_size=args.intermediate or
                                   max(64, args.hidden * 8 // 3 // 64 * 64),
                                   num_hidden_layers=args.layers,
                                   num_attention_heads=args.heads or max(1, args.hidden // 64),
                                   num_key_value_heads=args.kv_heads or max(1, args.hidden // 128),
                                   max_position_embeddings=max(args.seq, 128))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Meter:
    """Resident saved bytes (parameters excluded) through a pair of hooks around pack/unpack."""

    def __init__(self, params):
        self.params = params
        self.refs = {}
        self.peak = 0

    def see(self, t):
        if isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter):
            return
        s = t.untyped_storage()
        if s.data_ptr() in self.params:
            return
        self.refs[s._cdata] = (StorageWeakRef(s), s.nbytes())

    def sample(self):
        tot = 0
        for k, (w, n) in list(self.refs.items()):
            if w.expired():
                del self.refs[k]
            else:
                tot += n
        self.peak = max(self.peak, tot)


def run_mode(name, base, data, args, device, budget=None, ss_opts=None):
    """Trains a copy for args.steps steps; returns a result dict."""
    m = copy.deepcopy(base)
    if name == "checkpoint":
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    params = {p.untyped_storage().data_ptr() for p in m.parameters()}
    meter = Meter(params)
    ss = None
    if name == "smartswap":
        ss = smartswap.SmartSwap(activation_budget=budget, device=device, **(ss_opts or {}))
        inner_p, inner_u = ss._pack, ss._unpack

        def p(t):
            r = inner_p(t)
            meter.see(t)
            del t
            meter.sample()
            return r

        def u(x):
            r = inner_u(x)
            if r is not x:
                meter.see(r)
            meter.sample()
            return r
        ss._pack, ss._unpack = p, u
    times, losses, stages, peaks = [], [], [], []
    for i in range(args.steps):
        ids = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        meter.refs.clear()
        meter.peak = 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        sync(device)
        t0 = time.perf_counter()
        if ss is not None:
            with ss.step():
                loss = m(input_ids=ids, labels=ids).loss
                loss.backward()
        elif name == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
        else:
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
        opt.step()
        sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        peaks.append(torch.cuda.max_memory_allocated(device) if device.type == "cuda" else meter.peak)
        if ss is not None:
            stages.append(ss.stats()["last_stage"])
    if ss is None and device.type == "cpu":
        # resident saved bytes of one more step through identity hooks (not timed)
        meter.refs.clear()
        meter.peak = 0
        ids = data[args.steps % len(data)]
        opt.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(_seen(meter), _unseen(meter)):
            loss2 = m(input_ids=ids, labels=ids).loss
        loss2.backward()
        peaks = [meter.peak] * len(peaks)
    res = {"mode": name, "step_times": times, "losses": losses, "peaks": peaks, "stages": stages}
    measured = [t for t, s in zip(times, stages or ["stable"] * len(times)) if s == "stable"]
    measured = measured[1:] if len(measured) > 2 else measured
    if not stages:
        measured = times[2:] if len(times) > 3 else times
    res["step_s"] = statistics.median(measured) if measured else None
    res["peak_bytes"] = max(peaks[2:] if len(peaks) > 3 else peaks)
    res["final_loss"] = losses[-1]
    if ss is not None:
        res["stats"] = {k: v for k, v in ss.stats().items() if isinstance(v, (int, float, str))}
        gp = [t for t, s in zip(times, stages) if s == "genpolicy"]
        res["genpolicy_s"] = gp[0] if gp else None
        ss.close()
    return res


def _seen(meter):
    def pack(t):
        meter.see(t)
        meter.sample()
        return t
    return pack


def _unseen(meter):
    def unpack(t):
        meter.sample()
        return t
    return unpack


def plain_time(base, data, args, device, steps, hooks=None, profiler=False):
    """Median step time without smartswap, optionally with identity hooks or torch.profiler."""
    m = copy.deepcopy(base)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    ts = []
    for i in range(steps):
        ids = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        sync(device)
        t0 = time.perf_counter()
        if profiler:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=acts, record_shapes=True, profile_memory=True,
                                        with_stack=True):
                m(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                sync(device)
        else:
            m(input_ids=ids, labels=ids).loss.backward()
            opt.step()
        sync(device)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:] if len(ts) > 2 else ts)


def light_share(base, data, args, device):
    """smartswap with a budget nothing exceeds, steps interleaved with plain steps on a twin
    model (so that machine noise hits both alike). Returns the median Stable and plain step
    times, the time spent inside the C core's calls per Stable step, and that of the detailed
    (GenPolicy) step with its planning at iter_end. The C calls are wrapped with a timer from
    the first step on; the timer's own cost per call is measured and subtracted."""
    ss = smartswap.SmartSwap(activation_budget=1 << 40, device=device)
    m = copy.deepcopy(base)
    twin = copy.deepcopy(base)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    opt2 = torch.optim.AdamW(twin.parameters(), lr=1e-4)
    spent = [0.0, 0]

    def timed(f):
        def g(*a):
            t0 = time.perf_counter()
            r = f(*a)
            spent[0] += time.perf_counter() - t0
            spent[1] += 1
            return r
        return g
    f = timed(lambda: None)
    t0 = time.perf_counter()
    for _ in range(20000):
        f()
    timer_cost = (time.perf_counter() - t0) / 20000
    steps = max(args.steps, 6) + 4
    st_times, pl_times, c_stable, c_detail = [], [], [], None
    for i in range(steps):
        ids = data[i % len(data)]
        opt2.zero_grad(set_to_none=True)
        sync(device)
        t0 = time.perf_counter()
        twin(input_ids=ids, labels=ids).loss.backward()
        opt2.step()
        sync(device)
        if i >= 3:
            pl_times.append(time.perf_counter() - t0)
        opt.zero_grad(set_to_none=True)
        if ss._t is not None and not isinstance(ss._lib, _Proxy):
            lib = ss._lib
            px = _Proxy()
            for n in dir(lib):
                if n.startswith("ss_"):
                    setattr(px, n, getattr(lib, n))
            for n in ("ss_torch_op", "ss_torch_pack", "ss_torch_load", "ss_torch_poll",
                      "ss_torch_release", "ss_ctx_iter_begin", "ss_ctx_iter_end", "ss_ctx_phase",
                      "ss_torch_held", "ss_torch_detail", "ss_ctx_intern"):
                setattr(px, n, timed(getattr(lib, n)))
            px.real = lib
            ss._lib = px
        sync(device)
        spent[0], spent[1] = 0.0, 0
        t0 = time.perf_counter()
        with ss.step():
            m(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sync(device)
        dt = time.perf_counter() - t0
        c = max(0.0, spent[0] - spent[1] * timer_cost)
        stage = ss.stats()["last_stage"]
        if stage == "stable" and i >= 3:
            st_times.append(dt)
            c_stable.append(c)
        elif stage == "genpolicy" and spent[1]:
            c_detail = c
    if isinstance(ss._lib, _Proxy):
        ss._lib = ss._lib.real
    stats = ss.stats()
    ss.close()
    return (statistics.median(st_times), statistics.median(pl_times),
            statistics.median(c_stable) if c_stable else None, c_detail, stats)


class _Proxy:
    pass


def detailed_share(base, data, args, device):
    """Fresh SmartSwap instances (warmup=1, a budget nothing exceeds): step 0 WarmUp, step 1
    GenPolicy (inside the TorchDispatchMode, recorded in detail, planned at iter_end), steps 2-3
    Stable; each smartswap step follows a no-hook step of a twin model. Returns medians over the
    runs of: the detailed step's wall time less its iter_end (planning), the Stable step, the
    iter_end time, the aten operators recorded, and the plain step."""
    out = {"detail": [], "stable": [], "plan": [], "aten": [], "plain": [], "core_ops": [], "ovh": []}
    for r in range(args.detail_runs):
        ss = smartswap.SmartSwap(activation_budget=1 << 40, device=device, warmup=1)
        m = copy.deepcopy(base)
        twin = copy.deepcopy(base)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        opt2 = torch.optim.AdamW(twin.parameters(), lr=1e-4)
        spent = [0.0]
        st_t = []
        for i in range(4):
            ids = data[(i + r) % len(data)]
            opt2.zero_grad(set_to_none=True)
            sync(device)
            t0 = time.perf_counter()
            twin(input_ids=ids, labels=ids).loss.backward()
            opt2.step()
            sync(device)
            if i >= 1:
                out["plain"].append(time.perf_counter() - t0)
            if ss._t is not None and not isinstance(ss._lib, _Proxy):
                lib = ss._lib
                px = _Proxy()
                for n in dir(lib):
                    if n.startswith("ss_"):
                        setattr(px, n, getattr(lib, n))

                def iter_end(*a, _f=lib.ss_ctx_iter_end):
                    t1 = time.perf_counter()
                    rr = _f(*a)
                    spent[0] += time.perf_counter() - t1
                    return rr
                px.ss_ctx_iter_end = iter_end
                px.real = lib
                ss._lib = px
            opt.zero_grad(set_to_none=True)
            spent[0] = 0.0
            sync(device)
            t0 = time.perf_counter()
            with ss.step():
                m(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            sync(device)
            dt = time.perf_counter() - t0
            s = ss.stats()
            if s["last_stage"] == "genpolicy":
                assert s["last_detailed"] == 1
                out["detail"].append(dt - spent[0])
                out["plan"].append(spent[0])
                out["aten"].append(sum(len(e["aten"]) for e in ss.op_details()))
                out["core_ops"].append(s["ops"])
                out["ovh"].append(s["profile_overhead_seconds"])   # mode's Python time + C
                h_detail = (s["seq_hash"], s["ops"])
            elif s["last_stage"] == "stable":
                st_t.append(dt)
                assert (s["seq_hash"], s["ops"]) == h_detail, "light and detailed sequences differ"
        out["stable"].append(statistics.median(st_t))
        if isinstance(ss._lib, _Proxy):
            ss._lib = ss._lib.real
        ss.close()
    return {k: statistics.median(v) for k, v in out.items() if v}


def _count(ss):
    s = ss.stats()
    return 2 * s.get("saves", 0) + s.get("loads", 0) + s.get("releases", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=0, help="0: hidden / 64")
    ap.add_argument("--kv-heads", type=int, default=0, help="0: hidden / 128")
    ap.add_argument("--intermediate", type=int, default=0, help="0: about 8/3 of hidden")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--budget", default="quarter",
                    help="activation budget in bytes (or '6GiB'), or 'quarter' of the saved bytes")
    ap.add_argument("--detail-runs", type=int, default=3,
                    help="fresh instances whose GenPolicy step measures the detailed mode")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    ap.add_argument("--json", default=None, help="also write the results as JSON here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    base = build(args, device, dtype)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(device)
            for _ in range(4)]

    # one step's saved bytes (distinct storages, parameters excluded)
    seen = {}
    params = {p.untyped_storage().data_ptr() for p in base.parameters()}

    def cnt(t):
        if not (isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter)):
            s = t.untyped_storage()
            if s.data_ptr() not in params:
                seen[s.data_ptr()] = s.nbytes()
        return t
    probe = copy.deepcopy(base)
    with torch.autograd.graph.saved_tensors_hooks(cnt, lambda t: t):
        probe(input_ids=data[0], labels=data[0]).loss.backward()
    del probe
    saved = sum(seen.values())
    budget = saved // 4 if args.budget == "quarter" else smartswap._lib.parse_size(
        int(args.budget) if args.budget.isdigit() else args.budget, "--budget")

    rows = []
    for mode in ("none", "checkpoint", "save_on_cpu", "smartswap"):
        if mode == "save_on_cpu" and device.type != "cuda":
            rows.append({"mode": mode, "skipped": "CPU tensors: save_on_cpu copies nothing"})
            continue
        rows.append(run_mode(mode, base, data, args, device, budget=budget))

    # profiler overheads, same run
    t0 = time.perf_counter()
    __import__("torch._dynamo")   # what the first TorchDispatchMode of a process imports
    t_dynamo = time.perf_counter() - t0
    t_stable, t_plain, t_c, t_cd, lstats = light_share(base, data, args, device)
    det = detailed_share(base, data, args, device)
    t_prof = plain_time(base, data, args, device, max(4, args.steps // 2), profiler=True)
    ssr = [r for r in rows if r["mode"] == "smartswap"][0]
    t_detail = ssr.get("genpolicy_s")
    t_ss_stable = ssr["step_s"]
    over = {
        "plain_step_s": t_plain,
        "stable_step_s": t_stable,
        "stable_overhead_pct": 100.0 * (t_stable - t_plain) / t_plain,
        "light_c_seconds_per_step": t_c,
        "light_share_pct": 100.0 * t_c / t_stable if t_c is not None else None,
        "detailed_step_s": t_detail,
        "detailed_step_vs_stable_pct": (100.0 * (t_detail - t_ss_stable) / t_ss_stable
                                        if t_detail and t_ss_stable else None),
        "detailed_c_seconds": t_cd,
        "detailed_share_pct": (100.0 * (t_cd - t_c) / t_stable
                               if t_cd is not None and t_c is not None else None),
        "dispatch_detailed_step_s": det["detail"],
        "dispatch_stable_step_s": det["stable"],
        "dispatch_plain_step_s": det["plain"],
        "dispatch_plan_s": det["plan"],
        "dispatch_aten_ops": det["aten"],
        "dispatch_core_ops": det["core_ops"],
        "detailed_mode_share_pct": 100.0 * (det["detail"] - det["stable"]) / det["stable"],
        "detailed_mode_share_with_plan_pct": 100.0 * (det["detail"] + det["plan"] - det["stable"]) / det["stable"],
        "dynamo_import_once_s": t_dynamo,
        "detailed_ovh_s": det["ovh"],
        "detailed_ovh_share_pct": 100.0 * det["ovh"] / det["stable"],
        "torch_profiler_step_s": t_prof,
        "torch_profiler_share_pct": 100.0 * (t_prof - t_plain) / t_plain,
    }

    head = ("torch_compare: Llama-shaped (hidden %d, %d layers, seq %d, batch %d, vocab %d, %s) "
            "on %s, torch %s, %d threads; one step saves %.2f MiB; budget %.2f MiB"
            % (args.hidden, args.layers, args.seq, args.batch, args.vocab, args.dtype, device,
               torch.__version__, torch.get_num_threads(), saved / 2 ** 20, budget / 2 ** 20))
    mem = "peak allocated" if device.type == "cuda" else "peak resident saved"
    lines = [head, "date %s, machine %s (%s)" % (datetime.date.today().isoformat(),
                                                  platform.node(), platform.processor() or platform.machine()),
             "", "%-12s %12s %18s %12s  %s" % ("mode", "step ms", mem + " MiB", "final loss", "notes")]
    for r in rows:
        if "skipped" in r:
            lines.append("%-12s %12s %18s %12s  %s" % (r["mode"], "-", "-", "-", r["skipped"]))
            continue
        note = ""
        if r["mode"] == "smartswap":
            s = r["stats"]
            note = ("swapped out %.2f MiB, misses %d, stalls %d, evictions %d, plans %d"
                    % (s["swapped_out_bytes"] / 2 ** 20, s["misses"], s["stalls"], s["evictions"],
                       s["plans_made"]))
        lines.append("%-12s %12.1f %18.2f %12.5f  %s" % (r["mode"], 1e3 * r["step_s"],
                                                        r["peak_bytes"] / 2 ** 20, r["final_loss"], note))
    lines += ["", "profiler overheads, %% of the step time of this run (plain step %.1f ms):" % (1e3 * t_plain)]

    def verdict(v, target):
        return "met" if v is not None and v <= target else "NOT met"
    lines.append("  stable (nothing to swap) vs no hooks   %7.2f %%   target <= 10 %%: %s"
                 % (over["stable_overhead_pct"], verdict(over["stable_overhead_pct"], 10)))
    if over["light_share_pct"] is not None:
        lines.append("  light: time in the C core per step      %7.2f %%   target <= 1 %%: %s  (%.3f ms)"
                     % (over["light_share_pct"], verdict(over["light_share_pct"], 1), 1e3 * t_c))
    if over["detailed_share_pct"] is not None:
        lines.append("  detailed, its C calls only               %7.2f %%   (%.3f ms over a Stable step's, planning included)"
                     % (over["detailed_share_pct"],
                        1e3 * (t_cd - t_c)))
    lines.append("  detailed mode (TorchDispatchMode + C)  %7.2f %%   target <= 35 %%: %s  (%.1f vs %.1f ms Stable, "
                 "%d aten ops on %d core ops; median of %d)"
                 % (over["detailed_mode_share_pct"], verdict(over["detailed_mode_share_pct"], 35),
                    1e3 * det["detail"], 1e3 * det["stable"], det["aten"], det["core_ops"],
                    args.detail_runs))
    lines.append("    time inside smartswap while detailed  %7.2f %%   (%.1f ms: the mode's own Python time and the C calls; "
                 "not affected by machine noise)" % (over["detailed_ovh_share_pct"], 1e3 * det["ovh"]))
    lines.append("    with planning at iter_end (%.1f ms)    %7.2f %%   once per plan; torch._dynamo import %.2f s once per process"
                 % (1e3 * det["plan"], over["detailed_mode_share_with_plan_pct"], t_dynamo))
    if over["detailed_step_vs_stable_pct"] is not None:
        lines.append("  detailed step vs Stable step (wall)      %7.2f %%   (single steps: noisy)"
                     % over["detailed_step_vs_stable_pct"])
    lines.append("  torch.profiler (shapes, memory, stacks)  %7.2f %%   (seed: 219.7 %%)"
                 % over["torch_profiler_share_pct"])
    text = "\n".join(lines)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "saved_bytes": saved, "budget": budget, "rows": rows,
                       "overheads": over, "light_run_stats": {k: v for k, v in lstats.items()
                                                              if isinstance(v, (int, float, str))},
                       "text": text, "date": datetime.date.today().isoformat()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
