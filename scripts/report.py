#!/usr/bin/env python3
"""report.py: runs smartswap's benchmarks once and writes bench/results/REPORT.md with PNG plots
(gnuplot), each section with the seed's figure, the figure measured in this run and the command
that measured it (issue 18; docs/report.md).

    python3 scripts/report.py [--quick] [--build build] [--out bench/results] [--python PY]
    python3 scripts/report.py --parse-only RAWDIR     (re-write the report from saved outputs)

Every number in the report is parsed from the outputs of this run (saved under OUT/raw-full or
OUT/raw-quick); a figure whose output could not be parsed is printed as "not measured" with the
reason. Standard library only.
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

SEED = {"light": 0.9, "detailed": 34.6, "torch_profiler": 219.7, "batch": 4.0, "seq": 4.0,
        "hidden": 1.24, "ss_vs_rec": "+16-19 %", "reuse": "2-3 orders of magnitude shorter",
        "stability": 5000, "parallelism": "+38.94 %"}

# The model of bench-train's sections. The full form runs bench-train's own default model (16
# layers, width 32, 4 heads, 1 KV head, ffn 96, 8 x 128 tokens: the shape its acceptance lines
# are measured on, docs/trainer.md), spelled out so that the report can count its tokens. The
# quick form runs a narrower one (width 16, 4 x 128 tokens) so that it fits in its 3 minutes; it
# is still deep enough that recomputation trains at a quarter of none's peak (none's peak
# 9.25 MiB, recompute's smallest budget 2.11 MiB), so its 4x row compares smartswap with it.
TRAIN_MODEL = {"quick": ["--layers", "16", "--hidden", "16", "--heads", "2", "--kv-heads", "1", "--ffn", "48",
                         "--batch", "4", "--seq", "128"],
               "full": ["--layers", "16", "--hidden", "32", "--heads", "4", "--kv-heads", "1", "--ffn", "96",
                        "--batch", "8", "--seq", "128"]}
TRAIN_OVER = {"quick": "4", "full": "1.5,2,4,8"}
# The simulator-accuracy replays: the planned iteration time and the link, in GB/s each way, that
# both the plan and the replay's throttled copy threads use (slow enough that the copies matter).
ACC_ITER_S = "0.02"
ACC_GBPS = "1"
STAB_MODEL = ["--layers", "2", "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--moe", "4:2",
              "--seq", "8:24", "--batch", "2", "--accum", "2", "--eval-every", "5", "--seed", "7",
              "--threads", "1", "--quiet"]


def log(msg):
    print("report: " + msg, file=sys.stderr, flush=True)


class Runner:
    def __init__(self, raw, parse_only):
        self.raw, self.parse_only = raw, parse_only
        self.cmds = {}

    def run(self, name, cmd, timeout, env=None, sample_rss=False, watch=None):
        """Runs cmd (a list), saves stdout/stderr as RAW/name.out/.err; returns (out, err, rc).
        sample_rss: RAW/name.rss gets the process's RSS every 0.25 s (seconds, KiB), and with
        watch (a file the run writes as it goes, its step log) that file's size then too."""
        self.cmds[name] = " ".join(cmd)
        po, pe, pr = (os.path.join(self.raw, name + s) for s in (".out", ".err", ".rc"))
        if self.parse_only:
            rd = lambda p: open(p).read() if os.path.exists(p) else ""
            rc = rd(pr).strip()
            cmdf = os.path.join(self.raw, name + ".cmd")
            if os.path.exists(cmdf):
                self.cmds[name] = rd(cmdf).strip()
            return rd(po), rd(pe), int(rc) if rc else None
        log("running %s: %s" % (name, self.cmds[name]))
        t0 = time.time()
        rss = []
        e = dict(os.environ)
        e.update(env or {})
        try:
            with open(po, "w") as fo, open(pe, "w") as fe:
                p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=e)
                if sample_rss:
                    def sample():
                        while p.poll() is None:
                            try:
                                with open("/proc/%d/status" % p.pid) as f:
                                    for line in f:
                                        if line.startswith("VmRSS:"):
                                            sz = os.path.getsize(watch) if watch and os.path.exists(watch) else -1
                                            rss.append((time.time() - t0, int(line.split()[1]), sz))
                            except OSError:
                                pass
                            time.sleep(0.25)
                    th = threading.Thread(target=sample, daemon=True)
                    th.start()
                try:
                    rc = p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    rc = 124
                if sample_rss:
                    th.join()
        except OSError as ex:
            open(pe, "a").write("report: could not run: %s\n" % ex)
            rc = 127
        open(pr, "w").write("%d\n" % rc)
        open(os.path.join(self.raw, name + ".cmd"), "w").write(self.cmds[name] + "\n")
        if sample_rss:
            with open(os.path.join(self.raw, name + ".rss"), "w") as f:
                for t, k, sz in rss:
                    f.write("%.2f %d %d\n" % (t, k, sz))
        log("%s: rc %d in %.0f s" % (name, rc, time.time() - t0))
        return open(po).read(), open(pe).read(), rc


def num(pattern, text, group=1, flags=0):
    m = re.search(pattern, text, flags)
    return float(m.group(group)) if m else None


def fmt(v, spec="%.2f", unit=""):
    return "not measured" if v is None else (spec % v) + unit


def gnuplot(script, out_png):
    gp = shutil.which("gnuplot")
    if not gp:
        return "gnuplot not found: %s not drawn" % os.path.basename(out_png)
    r = subprocess.run([gp], input=script, text=True, capture_output=True)
    if r.returncode != 0 or not os.path.exists(out_png):
        return "gnuplot failed for %s: %s" % (os.path.basename(out_png), r.stderr.strip()[:200])
    return None


def read_rss(path, with_size=False):
    """(seconds, KiB) per sample, or (seconds, KiB, bytes of the watched log; -1 unknown)."""
    pts = []
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            sz = int(f[2]) if len(f) > 2 else -1
            pts.append((float(f[0]), int(f[1]), sz) if with_size else (float(f[0]), int(f[1])))
    return pts


def rss_at_end(rss):
    """The RSS of the last sample taken while the run still wrote its step log (its size below
    the final one): what the process held while it trained, not while it exits (cpu-sim fills
    every freed block with its poison pattern, and the frees at exit touched 53 MiB of pages
    the run never used: 2026-12-06, mode none, a spike in the last sample only). Without log
    sizes, the last sample."""
    if not rss:
        return None
    final = max(p[2] for p in rss)
    if final > 0:
        during = [p for p in rss if 0 <= p[2] < final]
        if during:
            return during[-1][1]
    return rss[-1][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the short form (make bench-quick)")
    ap.add_argument("--build", default=os.environ.get("SS_BUILD", "build"))
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--python", default="/work/main/.venv/bin/python",
                    help="python with torch for bench/torch_compare.py (skipped when absent)")
    ap.add_argument("--readme", metavar="FILE", default=None,
                    help="also rewrite the quoted summary between FILE's report-summary markers (make bench: README.md)")
    ap.add_argument("--parse-only", metavar="RAWDIR", default=None,
                    help="do not run: re-write the report from the outputs saved in RAWDIR")
    a = ap.parse_args()
    form = "quick" if a.quick else "full"
    raw = a.parse_only or os.path.join(a.out, "raw-" + form)
    if not a.parse_only and os.path.isdir(raw):
        shutil.rmtree(raw)          # a run's outputs only: nothing left from an earlier one
    os.makedirs(raw, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    if a.parse_only and os.path.exists(os.path.join(raw, "form")):
        form = open(os.path.join(raw, "form")).read().strip()
    elif not a.parse_only:
        open(os.path.join(raw, "form"), "w").write(form + "\n")
    quick = form == "quick"
    R = Runner(raw, bool(a.parse_only))
    B = a.build
    t_start = time.time()
    date = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    if a.parse_only and os.path.exists(os.path.join(raw, "date")):
        date = open(os.path.join(raw, "date")).read().strip()
    elif not a.parse_only:
        open(os.path.join(raw, "date"), "w").write(date + "\n")
    commit = saved(raw, "commit", R.parse_only, git_commit) or "unknown (not recorded)"
    env1 = {"OMP_NUM_THREADS": "1"}
    cli = os.path.join(B, "smartswap")

    # ---- run everything -------------------------------------------------------------------
    prof_out, prof_err, prof_rc = R.run(
        "bench-profile", [os.path.join(B, "bench/bench-profile")] + (["20000", "10"] if quick else []),
        120, env1)
    overs = TRAIN_OVER[form]
    bt_args = TRAIN_MODEL[form] + ["--steps", "8", "--over", overs, "--link", "both", "--json"] + (
        ["--quick"] if quick else [])
    tok = int(TRAIN_MODEL[form][TRAIN_MODEL[form].index("--batch") + 1]) * int(TRAIN_MODEL[form][TRAIN_MODEL[form].index("--seq") + 1])
    bt_out, bt_err, bt_rc = R.run("bench-train", [os.path.join(B, "bench/bench-train")] + bt_args,
                                  900 if quick else 1200, env1)
    bv_out, bv_err, bv_rc = R.run("bench-varying", [os.path.join(B, "bench/bench-varying"), "--json",
                                  "--steps", "10" if quick else "40"], 300 if quick else 600, env1)
    rs_out, rs_err, rs_rc = R.run("bench-recordstream", [os.path.join(B, "bench/bench-recordstream")],
                                  120, env1)
    # stability: none, recompute and smartswap on the same seeds, each step's loss logged
    steps = 300 if quick else 5000
    stab = {}
    budget_stab = None
    for mode in ("none", "recompute", "smartswap"):
        logf = os.path.join(raw, "stab-%s.jsonl" % mode)
        if not R.parse_only and os.path.exists(logf):
            os.remove(logf)
        extra = []
        if mode == "smartswap":
            # state + half of the activations at none's peak (read from none's log)
            budget_stab = stab_budget(os.path.join(raw, "stab-none.jsonl"))
            if budget_stab:
                extra = ["--budget", str(budget_stab)]
        o, e, rc = R.run("stab-" + mode, [cli, "train"] + STAB_MODEL + ["--steps", str(steps), "--mode", mode,
                         "--log", logf] + extra, 900 if not quick else 120, env1, sample_rss=True, watch=logf)
        stab[mode] = (logf, o, e, rc)
    # simulator accuracy: a generated profile, planned at a link cpu-sim really runs at (the
    # replay throttles its copies to the same GB/s), then replayed with that plan on the real
    # clock; budgets between the plan's smallest feasible one and none's peak; a replay without
    # swapping (--mode off) measures what the replay itself adds to each iteration
    prof_file = os.path.join(raw, "acc.sstrace")
    plan_file = os.path.join(raw, "acc.plan")
    link = ["--iter-time", ACC_ITER_S, "--d2h", ACC_GBPS, "--h2d", ACC_GBPS]
    iters = "6" if quick else "12"
    R.run("acc-gen", [cli, "trace", "gen", "--layers", "4", "--hidden", "64", "--heads", "2", "--ffn", "128",
          "--vocab", "256", "--seq", "256", "--dtype-bytes", "4", "-o", prof_file], 60)
    acc = []
    acc_floor = acc_peak = None
    fo, _, _ = R.run("acc-floor", [cli, "plan", prof_file, "--budget", str(1 << 40)] + link +
                     ["--json", "-o", plan_file + "-floor"], 60)
    try:
        fj = json.loads(fo)
        acc_floor, acc_peak = fj["min_feasible_budget_bytes"], fj["peak_bytes_before"]
    except (ValueError, KeyError):
        pass
    oo, _, _ = R.run("acc-off", [cli, "replay", prof_file, "--mode", "off", "--budget", str((acc_peak or 0) + (1 << 20)),
                     "--iters", iters, "--json"] + link, 120)
    off_iter = median([it["iter_s"] for it in json_get(oo, "per_iter", [])[1:]])
    if acc_floor and acc_peak:
        for frac in ((0.5,) if quick else (0.75, 0.5, 0.25)):
            bud = int(acc_floor + frac * (acc_peak - acc_floor)) // 256 * 256
            tag = "acc-%02d" % int(frac * 100)
            po, _, _ = R.run(tag + "-plan", [cli, "plan", prof_file, "--budget", str(bud)] + link +
                             ["--json", "-o", plan_file + tag], 60)
            ro, _, rrc = R.run(tag + "-replay", [cli, "replay", prof_file, "--budget", str(bud), "--plan",
                               plan_file + tag, "--iters", iters, "--json"] + link, 120)
            acc.append((frac, bud, po, ro, rrc))
    tc = None
    tc_json = os.path.join(raw, "torch_compare.json")
    if os.path.exists(a.python) or R.parse_only:
        o, e, rc = R.run("torch_compare", [a.python, "bench/torch_compare.py", "--threads", "1", "--steps",
                         "6" if quick else "8", "--detail-runs", "2" if quick else "3", "--json", tc_json]
                         + (["--hidden", "256", "--layers", "2"] if quick else []), 600, env1)
        if os.path.exists(tc_json):
            try:
                tc = json.load(open(tc_json))
            except ValueError:
                tc = None
        tc_reason = None if tc else "torch_compare did not finish (rc %s): %s" % (rc, e.strip()[-300:])
    else:
        tc_reason = "%s does not exist (no venv with torch on this machine)" % a.python
    elapsed = saved(raw, "elapsed", R.parse_only, lambda: "%.0f s" % (time.time() - t_start)) or "an unrecorded time"

    # ---- the report -----------------------------------------------------------------------
    out = []
    W = out.append
    png = lambda n: "%s-%s.png" % (n, form)
    W("# smartswap: the seed's figures next to smartswap's, measured\n")
    W("Written by `%s` (`scripts/report.py%s`) on %s at commit %s, %s form, cpu-sim on %s with %d cores "
      "(load average at the start %s); the run took %s. Every figure below is parsed from the "
      "outputs of this run, kept in `%s/`. Timings on this shared machine are noisy: only ratios "
      "measured side by side in one run mean anything.\n" % (
          "make bench-quick" if quick else "make bench", " --quick" if quick else "", date, commit, form,
          os.uname().machine, os.cpu_count() or 0, loadavg(raw, R.parse_only), elapsed, raw))
    summary = []

    # 1 profiler
    W("\n## 1. Profiler overhead\n")
    light_ns = num(r"light mode\s+[\d.]+ ns/op\s+empty loop\s+[\d.]+ ns/op\s+profiler\s+([\d.]+) ns/op", prof_out)
    det_ns = num(r"detailed mode\s+[\d.]+ ns/op\s+empty loop\s+[\d.]+ ns/op\s+profiler\s+([\d.]+) ns/op", prof_out)
    none_ms = num(r"none, no budget: .*?, ([\d.]+) ms/step", bt_err)
    ops = num(r"([\d]+) operators per step", bt_err)
    lp = dp = None
    if light_ns is not None and none_ms and ops:
        lp = light_ns * ops / (none_ms * 1e6) * 100
    if det_ns is not None and none_ms and ops:
        dp = det_ns * ops / (none_ms * 1e6) * 100
    W("Command: `%s` and `%s` (none's step time and operators per step).\n" % (R.cmds["bench-profile"], R.cmds["bench-train"]))
    W("| | seed | smartswap, C trainer | smartswap, PyTorch adapter | torch.profiler |")
    W("|---|---|---|---|---|")
    ov = (tc or {}).get("overheads", {})
    ad_l, ad_d, tp = ov.get("light_share_pct"), ov.get("detailed_mode_share_pct"), ov.get("torch_profiler_share_pct")
    W("| light mode, %% of step | %.1f %% | %s (%s ns/op x %s ops / %s ms) | %s | |" % (
        SEED["light"], fmt(lp, "%.4f", " %"), fmt(light_ns), fmt(ops, "%.0f"), fmt(none_ms, "%.1f"), fmt(ad_l, "%.2f", " %")))
    W("| detailed mode, %% of step | %.1f %% | %s (%s ns/op) | %s | |" % (
        SEED["detailed"], fmt(dp, "%.4f", " %"), fmt(det_ns), fmt(ad_d, "%.2f", " %")))
    W("| torch.profiler (shapes, memory, stacks) | %.1f %% | | | %s |" % (SEED["torch_profiler"], fmt(tp, "%.1f", " %")))
    if tc is None:
        W("\nThe PyTorch columns: skipped, %s.\n" % tc_reason)
    W("\nThe C trainer's detailed figure is the profiler's recording cost alone (bench-profile's detailed "
      "mode minus an empty loop) over the trainer's step; the adapter's is a detailed step as users get it "
      "(TorchDispatchMode included) over a Stable step (docs/pytorch.md).\n")
    # the seed's claims: each mode at most the seed's share, detailed mode far cheaper than
    # torch.profiler on the same model
    def vs(v, seed):
        return "not measured" if v is None else ("reproduced (%.3g %% <= %.1f %%)" % (v, seed) if v <= seed else
                                                 "not reproduced (%.3g %% > %.1f %%)" % (v, seed))
    W("- light mode, C trainer: %s; adapter: %s." % (vs(lp, SEED["light"]), vs(ad_l, SEED["light"])))
    W("- detailed mode, C trainer: %s; adapter: %s." % (vs(dp, SEED["detailed"]), vs(ad_d, SEED["detailed"])))
    W("- detailed mode against torch.profiler on the same model: %s.\n" % (
        "not measured" if ad_d is None or tp is None else "%.1f %% against %.1f %%: %s" % (
            ad_d, tp, "cheaper, as the seed says (its 34.6 %% against 219.7 %%)" % ()
            if ad_d < tp else "NOT cheaper (the seed's claim not reproduced)")))
    # why torch.profiler's share is not the seed's: its cost per aten operator against the
    # model's compute per operator, both measured by torch_compare
    tps, pls, aops = ov.get("torch_profiler_step_s"), ov.get("plain_step_s"), ov.get("dispatch_aten_ops")
    if tps and pls and aops:
        per_op = (tps - pls) / aops
        W("- torch.profiler's share is %s the seed's 219.7 %%: here it adds %.1f us per aten operator (%d a step) over "
          "%.1f us of compute per operator; a model with %.1f us per operator would show the seed's figure. The share "
          "is a property of the model's operator size, not of the profiler alone.\n" % (
              "close to" if abs(tp - SEED["torch_profiler"]) < 20 else "not", per_op * 1e6, aops, pls / aops * 1e6,
              per_op / (SEED["torch_profiler"] / 100) * 1e6))
    summary.append("profiler: light %s of a step (seed 0.9 %%), detailed %s (seed 34.6 %%), adapter detailed %s, "
                   "torch.profiler %s (seed 219.7 %%)" % (fmt(lp, "%.3f", " %"), fmt(dp, "%.3f", " %"),
                                                          fmt(ad_d, "%.1f", " %"), fmt(tp, "%.1f", " %")))

    # 2 scaling
    W("\n## 2. Scaling under a fixed budget\n")
    W("Command: `%s` (its largest-trainable-size section).\n" % R.cmds["bench-train"])
    sc = {}
    for dim, key in (("batch", r"batch \(x \d+ tokens\):"), ("seq", r"sequence length \(batch \d+\):"),
                     ("hidden", r"hidden size \(batch[^)]*\):")):
        m = re.search(key + r"(.*)", bt_err)
        if m:
            sc[dim] = {mm.group(1): (float(mm.group(2)), float(mm.group(3)))
                       for mm in re.finditer(r"([a-z-]+) (\d+) \(([\d.]+)x\)", m.group(1))}
    so_same = "swap-only = smartswap" in bt_err
    W("| dimension | seed (smartswap vs none) | none | recompute | offload-all | swap-only | smartswap |")
    W("|---|---|---|---|---|---|---|")
    for dim in ("batch", "seq", "hidden"):
        d = sc.get(dim, {})
        cell = lambda m: "%d (%.2fx)" % (d[m][0], d[m][1]) if m in d else ("= smartswap" if m == "swap-only" and so_same
                                                                           else "not measured")
        W("| %s | %sx | %s | %s | %s | %s | %s |" % (dim, SEED[dim], cell("none"), cell("recompute"), cell("offload-all"),
                                                     cell("swap-only"), cell("smartswap")))
    if sc:
        dat = os.path.join(a.out, "scaling-%s.dat" % form)
        with open(dat, "w") as f:
            f.write("# dim none recompute offload-all smartswap (multiples of none)\n")
            for i, dim in enumerate(("batch", "seq", "hidden")):
                d = sc.get(dim, {})
                f.write("%s %s\n" % (dim, " ".join("%g" % d.get(m, (0, 0))[1] for m in ("none", "recompute", "offload-all", "smartswap"))))
        err = gnuplot('set terminal pngcairo size 800,450\nset output "%s"\nset style data histograms\n'
                      'set style fill solid 0.8\nset ylabel "largest size / none\'s"\nset title "Largest trainable size under a fixed budget (%s)"\n'
                      'set logscale y 2\nplot "%s" using 2:xtic(1) title "none", "" using 3 title "recompute", '
                      '"" using 4 title "offload-all", "" using 5 title "smartswap"\n' % (
                          os.path.join(a.out, png("scaling")), date, dat), os.path.join(a.out, png("scaling")))
        W("\n![scaling](%s)\n" % png("scaling") if not err else "\n%s\n" % err)
        for dim in ("batch", "seq", "hidden"):
            v = sc.get(dim, {}).get("smartswap")
            if v:
                W("- %s: smartswap %.2fx none (seed %sx): %s." % (dim, v[1], SEED[dim],
                  "reproduced or exceeded" if v[1] >= SEED[dim] else "not reproduced, measured %.2fx" % v[1]))
        summary.append("scaling: smartswap trains %s the batch, %s the sequence, %s the hidden size of none (seed 4x, 4x, 1.24x)" % tuple(
            fmt(sc.get(d, {}).get("smartswap", (0, None))[1], "%.2fx") for d in ("batch", "seq", "hidden")))
    else:
        W("Not measured in this run: bench-train printed no largest-size sweep (%s; rc %s).\n" % (
          "the quick form passes --quick, which skips it" if quick else "see its output", bt_rc))
        summary.append("scaling: not measured")

    # 3 throughput
    W("\n## 3. Throughput\n")
    W("Command: `%s`; tokens/s of each mode taking turns step by step, link calibrated per row "
      "(docs/trainer.md).\n" % R.cmds["bench-train"])
    rows = []
    try:
        rows = json.loads(bt_out)["rows"]
    except (ValueError, KeyError):
        W("bench-train's JSON did not parse (rc %s): not measured.\n" % bt_rc)
    if rows:
        W("| link | over | none | recompute | offload-all | swap-only | smartswap | ss/rec (seed +16-19 %) | ss/off | ss/none |")
        W("|---|---|---|---|---|---|---|---|---|---|")
        dat = os.path.join(a.out, "throughput-%s.dat" % form)
        with open(dat, "w") as f:
            f.write("# link over step_ms: none recompute offload-all smartswap\n")
            for r in rows:
                t = r["tokens_per_s"]
                g = lambda k: t.get(k)
                ratio = lambda x, y: "%.3fx" % (x / y) if x and y else "n/a (out of memory)"
                W("| %s | %gx | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    r["link"], r["over"], *(fmt(g(k), "%.0f") if g(k) else "out of memory"
                                            for k in ("none", "recompute", "offload-all", "swap-only", "smartswap")),
                    ratio(g("smartswap"), g("recompute")), ratio(g("smartswap"), g("offload-all")), ratio(g("smartswap"), g("none"))))
                f.write("%s %g %s\n" % (r["link"], r["over"], " ".join(
                    "%.3f" % (tok / g(k) * 1e3) if g(k) else "NaN" for k in ("none", "recompute", "offload-all", "smartswap"))))
        best = [r["tokens_per_s"]["smartswap"] / r["tokens_per_s"]["recompute"] for r in rows
                if r["tokens_per_s"].get("smartswap") and r["tokens_per_s"].get("recompute")]
        lines = []
        for li, ln in (("pcie", "PCIe-class"), ("c2c", "C2C-class")):
            lines.append('"< grep ^%s %s" using 2:6 with linespoints title "smartswap %s", '
                         '"< grep ^%s %s" using 2:4 with linespoints title "recompute %s", '
                         '"< grep ^%s %s" using 2:5 with linespoints title "offload-all %s", '
                         '"< grep ^%s %s" using 2:3 with linespoints title "none %s"' % (
                             li, dat, ln, li, dat, ln, li, dat, ln, li, dat, ln))
        err = gnuplot('set terminal pngcairo size 900,500\nset output "%s"\nset xlabel "none\'s peak / budget"\n'
                      'set ylabel "ms per step (median)"\nset key outside\nset title "Step time by memory mode (%s)"\nplot %s\n' % (
                          os.path.join(a.out, png("throughput")), date, ", ".join(lines)), os.path.join(a.out, png("throughput")))
        W("\n![step time](%s)\n" % png("throughput") if not err else "\n%s\n" % err)
        if best:
            W("smartswap / recompute over the rows: %.3fx to %.3fx (seed: +16-19 %%, i.e. 1.16-1.19x): %s.\n" % (
                min(best), max(best), "reproduced or exceeded in every row" if min(best) >= 1.16 else
                "not reproduced in every row (measured above)"))
            nofit = sum(1 for r in rows if r["tokens_per_s"].get("smartswap") and not r["tokens_per_s"].get("recompute"))
            summary.append("throughput: smartswap %.2fx-%.2fx recompute's tokens/s over %d rows (seed 1.16-1.19x)%s" % (
                min(best), max(best), len(best), "; in %d more rows smartswap trains and recompute does not fit" % nofit
                if nofit else ""))
        for r in rows:
            t = r["tokens_per_s"]
            if t.get("none") and not any(t.get(k) for k in ("recompute", "offload-all", "swap-only", "smartswap")):
                W("- %s %gx: no memory-saving mode trains at %d bytes: the budget is below each mode's smallest "
                  "budget, so bench-train refused those runs before step 1, as `smartswap train` does (its stderr "
                  "names each figure)." % (r["link"], r["over"], r["budget_bytes"]))
        # why a row falls short of the seed, from the bounds the same row measured
        for r in rows:
            t = r["tokens_per_s"]
            if not (t.get("smartswap") and t.get("recompute")) or t["smartswap"] / t["recompute"] >= 1.16:
                continue
            why = []
            ceil, hb = r.get("ceiling_tokens_per_s"), r.get("hybrid_bound_tokens_per_s")
            if ceil:
                why.append("the pure-swap ceiling there is %.2fx recompute (%s)" % (
                    ceil / t["recompute"], "no swapper can reach 1.16x on this link at this budget"
                    if ceil / t["recompute"] < 1.16 else "a swapper could reach 1.16x"))
            if hb:
                why.append("the hybrid's bound is %.2fx recompute and smartswap reached %.2f of it" % (
                    hb / t["recompute"], t["smartswap"] / hb))
            if r.get("copy_compute_ratio") is not None:
                why.append("the row ran at copy:compute %.2f" % r["copy_compute_ratio"])
            W("- %s %gx, ss/rec %.4fx below 1.16x: %s." % (r["link"], r["over"], t["smartswap"] / t["recompute"],
                                                         "; ".join(why) or "bench-train printed no bound for it"))
        W("")
        for ln in bt_err.splitlines():
            if ln.strip().startswith("target at") or ln.strip().startswith("bound at"):
                W("    " + ln.strip())
        W("")

    # 4 memory reuse
    W("\n## 4. Memory reuse (custom record stream vs stock)\n")
    W("Command: `%s` (rc %s). Its output as printed:\n" % (R.cmds["bench-recordstream"], rs_rc))
    W("```\n%s```\n" % rs_out)
    ratio = num(r"stock/custom(?: ratio of medians)?:? (?:available-minus-drop )?([\d.]+)x", rs_out)
    W("Seed: reuse interval %s under the custom rule. Measured here: %s. %s\n" % (
        SEED["reuse"], "stock/custom %.2fx" % ratio if ratio is not None else
        "not measured (bench-recordstream printed no ratio; rc %s)" % rs_rc,
        "Not reproduced: the ratio is below 100x." if ratio is not None and ratio < 100 else ""))
    W("The columns are explained in docs/executor.md \"Release modes\" (bench-recordstream's own doc).\n")
    summary.append("memory reuse: %s" % ("stock/custom ratio of median reuse intervals (available minus drop) %.0fx "
                                         "(seed 100-1000x)" % ratio if ratio is not None
                                         else "see REPORT section 4"))

    # 5 stability
    W("\n## 5. Stability\n")
    W("Commands: `%s` and the same with `--mode recompute` and `--mode smartswap --budget B` (B = state + half "
      "of the activations at none's peak, from none's log: %s bytes). Every varying feature is on: drawn "
      "sequence lengths, MoE routing, gradient accumulation, evaluation steps.\n" % (R.cmds["stab-none"], budget_stab))
    losses = {m: read_losses(stab[m][0]) for m in stab}
    n = {m: len(v) for m, v in losses.items()}
    ident_rec = losses["smartswap"] == losses["none"] and n["none"] > 0
    ident_rc = losses["recompute"] == losses["none"] and n["none"] > 0
    W("| run | rc | steps + evaluations logged | median ms per step | losses identical to none's (hex) | peak device bytes (first/last 10 %) | RSS MiB after warm-up / at the end |")
    W("|---|---|---|---|---|---|---|")
    flat = {}
    med_none = None
    for m in ("none", "recompute", "smartswap"):
        logf, o, e, rc = stab[m]
        recs = read_log(logf)
        ms = sorted(r["ms"] for r in recs if r.get("kind") == "train")
        med = ms[len(ms) // 2] if ms else None
        pk = [r["peak_bytes"] for r in recs]
        p1 = max(pk[:max(1, len(pk) // 10)]) if pk else None
        last = sorted(pk[-max(1, len(pk) // 10):])   # the last tenth of the steps' peaks
        p2 = last[-1] if last else None
        ph = max(pk[:max(1, len(pk) // 2)]) if pk else None
        rss = read_rss(os.path.join(raw, "stab-%s.rss" % m), with_size=True)
        # RSS after warm-up: the largest sample of the first tenth of the run and at least two
        # samples (the process is still loading before that); at the end: the last sample
        # while the steps ran (rss_at_end)
        tail = [max(p[1] for p in rss[:len(rss) // 10 + 2]), rss_at_end(rss)] if rss else []
        if m == "none":
            med_none = med
        # flat: the process grows by at most 5 % after warm-up, and the median device peak of
        # the last tenth of the steps is no higher than the largest of the first half (lengths
        # and routing are drawn, so a step's peak varies; a leak would lift the late steps above
        # every early one, where one rare draw lifts one step: 2026-12-06, mode none, step 5800
        # of 6000 peaked 512 bytes above every step of the first half, the only one that did)
        pm = last[len(last) // 2] if last else None
        flat[m] = (bool(tail) and ph is not None and tail[-1] <= tail[0] * 1.05 and pm <= ph,
                   (tail[-1] - tail[0]) / 1024 if tail else None)
        W("| %s | %s | %d | %s | %s | %s / %s | %s / %s |" % (
            m, rc, n[m], fmt(med, "%.2f"), "-" if m == "none" else ("yes" if losses[m] == losses["none"] and n[m] else "NO"),
            p1, p2, fmt(tail[0] / 1024 if tail else None, "%.2f"), fmt(tail[-1] / 1024 if tail else None, "%.2f")))
    dat = os.path.join(a.out, "stability-%s.dat" % form)
    win = 50 if not quick else 10
    with open(dat, "w") as f:
        f.write("# index loss_none loss_recompute loss_smartswap (exact, repr of each float), then the mean of the last "
                "%d of each, then recompute - none and smartswap - none\n" % win)
        val = lambda m, i: float.fromhex(losses[m][i]) if i < n[m] else float("nan")
        run = {m: [] for m in losses}
        for i in range(max(n.values()) if n else 0):
            v = {m: val(m, i) for m in losses}
            for m in losses:
                run[m] = (run[m] + [v[m]])[-win:]
            f.write("%d %s %s %s %r %r %r %r %r\n" % (
                i, repr(v["none"]), repr(v["recompute"]), repr(v["smartswap"]),
                *(sum(run[m]) / len(run[m]) for m in ("none", "recompute", "smartswap")),
                v["recompute"] - v["none"], v["smartswap"] - v["none"]))
    err = gnuplot('set terminal pngcairo size 900,650\nset output "%s"\nset multiplot layout 2,1\n'
                  'set title "Loss, mean of the last %d logged steps (train and eval), %d steps (%s)"\nset ylabel "loss"\n'
                  'plot "%s" using 1:5 with lines lw 5 title "none", "" using 1:6 with lines lw 3 title "recompute", '
                  '"" using 1:7 with lines lw 1 title "smartswap"\n'
                  'set title "Each logged loss minus none\'s (exactly 0 when bit-identical)"\nset ylabel "difference"\n'
                  'set xlabel "logged step"\nset yrange [-1e-6:1e-6]\n'
                  'plot "" using 1:8 with lines lw 3 title "recompute - none", "" using 1:9 with lines lw 1 title "smartswap - none"\n'
                  'unset multiplot\n' % (os.path.join(a.out, png("stability")), win, steps, date, dat),
                  os.path.join(a.out, png("stability")))
    W("\n![loss curves](%s)\n" % png("stability") if not err else "\n%s\n" % err)
    rssd = os.path.join(a.out, "rss-%s.dat" % form)
    with open(rssd, "w") as f:
        for m in ("none", "recompute", "smartswap"):
            f.write("# %s\n" % m)
            for t, k in read_rss(os.path.join(raw, "stab-%s.rss" % m)):
                f.write("%.2f %.3f\n" % (t, k / 1024))
            f.write("\n\n")
    err = gnuplot('set terminal pngcairo size 900,400\nset output "%s"\nset xlabel "seconds"\nset ylabel "RSS MiB"\n'
                  'set title "Process memory during the stability runs"\nplot "%s" index 0 with lines title "none", '
                  '"" index 1 with lines title "recompute", "" index 2 with lines title "smartswap"\n' % (
                      os.path.join(a.out, png("rss")), rssd), os.path.join(a.out, png("rss")))
    W("\n![RSS](%s)\n" % png("rss") if not err else "\n%s\n" % err)
    W("smartswap's %d logged losses equal none's bit for bit: %s; recompute's: %s (seed: 5000 steps identical to "
      "full recomputation; this run: %d steps%s).\n" % (n["smartswap"], "yes" if ident_rec else "NO",
                                                       "yes" if ident_rc else "NO", steps,
                                                       ", the quick form's count" if quick else ""))
    W("- step time: none's median %s ms a step (the issue asks for a model of at most 20 ms): %s." % (
        fmt(med_none, "%.2f"), "met" if med_none is not None and med_none <= 20 else "not met"))
    W("- memory flat (RSS at the end at most 5 %% above RSS after warm-up, the median device peak of the last tenth "
      "of the steps no higher than the largest of the first half): %s.\n" % ", ".join(
          "%s %s (RSS %+.2f MiB)" % (m, "yes" if flat[m][0] else "NO", flat[m][1] or 0) for m in flat))
    summary.append("stability: %d steps, smartswap's losses bit-identical to none's and recompute's: %s; memory flat: %s" % (
        steps, "yes" if ident_rec and ident_rc else "NO", "yes" if all(f[0] for f in flat.values()) else "NO"))

    # 6 simulator accuracy
    W("\n## 6. Simulator accuracy\n")
    W("Commands: `%s`; `%s` (the smallest feasible budget and none's peak); `%s` (the replay's own cost per "
      "iteration, nothing swapped); then per budget `smartswap plan ... --json` and `smartswap replay ... --plan` with "
      "that plan on cpu-sim's real clock (copy threads throttled to %s GB/s each way, the rate the plan assumed; real "
      "buffers, every read checked). Predicted = the plan's peak and iteration; measured = the replay's peak and the "
      "median of its Stable iterations, less what the replay without swapping adds to the planned %s s (%s ms here). "
      "The seed gives no figure for this.\n" % (R.cmds["acc-gen"], R.cmds["acc-floor"], R.cmds["acc-off"], ACC_GBPS,
                                                ACC_ITER_S, fmt(off_iter * 1e3 - float(ACC_ITER_S) * 1e3 if off_iter else None, "%.1f")))
    W("| budget | predicted peak | measured peak | measured/predicted | predicted step | measured step | measured/predicted |")
    W("|---|---|---|---|---|---|---|")
    if not acc:
        W("| not measured: the floor plan did not parse (`%s`) | | | | | | |" % R.cmds["acc-floor"])
    acc_ratios = []
    for frac, bud, po, ro, rrc in acc:
        pp = json_get(po, "peak_bytes_after")
        pit = json_get(po, "iter_seconds")
        st = [it for it in json_get(ro, "per_iter", []) if it.get("stage") == "stable"]
        mp = json_get(ro, "peak_bytes")
        mit = median([it["iter_s"] for it in st])
        mstep = mit - (off_iter - float(ACC_ITER_S)) if mit is not None and off_iter is not None else None
        if mp and pp:
            acc_ratios.append(mp / pp)
        W("| floor + %.0f %% of (peak - floor) = %d B | %s | %s | %s | %s | %s | %s |" % (
            frac * 100, bud, fmt(pp / 2**20 if pp else None, "%.3f", " MiB"), fmt(mp / 2**20 if mp else None, "%.3f", " MiB"),
            fmt(mp / pp if mp and pp else None, "%.3f"), fmt(pit * 1e3 if pit else None, "%.2f", " ms"),
            fmt(mstep * 1e3 if mstep else None, "%.2f", " ms"), fmt(mstep / pit if mstep and pit else None, "%.3f")))
    # bench-train's swap-only rows: each JSON row carries the simulator's step for the swap-only
    # plan it ran (sim_swap_only_step_s; absent when that run made no plan)
    sim = {}
    for r in rows:
        v = r.get("sim_swap_only_step_s")
        if isinstance(v, (int, float)) and v > 0:
            sim[(r["link"], float(r["over"]))] = v * 1e3
    if rows:
        W("\nLive trainer (bench-train's swap-only run in each row, same link and budget): simulated step against "
          "the measured median step:\n")
        for r in rows:
            s_ms = sim.get((r["link"], float(r["over"])))
            t = r["tokens_per_s"].get("swap-only")
            live = tok / t * 1e3 if t else None
            W("- %s %gx: simulated %s, measured %s (measured/simulated %s)" % (
                r["link"], r["over"], fmt(s_ms, "%.1f", " ms"), fmt(live, "%.1f", " ms") if live else "not measured (swap-only failed)",
                fmt(live / s_ms if live and s_ms else None, "%.2f")))
    W("\nThe peak is the simulator's to predict exactly (same plan, same allocator rules); the step time depends on "
      "this shared machine's load, which the plan cannot know, so only the peak ratio is a check of the simulator.\n")
    summary.append("simulator: measured / predicted peak %s over %d budgets" % (
        "%.3f-%.3f" % (min(acc_ratios), max(acc_ratios)) if acc_ratios else "not measured", len(acc_ratios)))

    # 7 varying
    W("\n## 7. Varying sequences\n")
    W("Command: `%s` (rc %s): one dynamic run (drawn sequence lengths, MoE routing, evaluation steps) under "
      "state + 1/3 of the activations at an NVLink-C2C-class link; smartswap as built, `static` (SMARTSWAP_REPLAN=off: "
      "the first plan kept) and `length` (re-planned on length changes only); docs/trainer.md \"bench-varying\".\n" % (
          R.cmds["bench-varying"], bv_rc))
    met = notmet = 0
    try:
        bv = json.loads(bv_out)
        W("budget %d bytes (state %d, none's peak %d), %d steps.\n" % (bv["budget_bytes"], bv["state_bytes"],
                                                                       bv["none_peak_bytes"], bv["steps"]))
        W("| run | ok | oom | iterations | detailed (Stable) | evictions (Stable) | swap-outs | stalls | stall ms | tokens/s | losses = none's |")
        W("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in bv["runs"]:
            W("| %s | %s | %d | %d | %d (%d) | %d (%d) | %d | %d | %.1f | %.0f | %s |" % (
                r["name"], "yes" if r["ok"] else "NO", r["oom"], r["iterations"], r["detailed"], r["detailed_stable"],
                r["evictions"], r["stable_evictions"], r["swap_outs"], r["stalls"], r["stall_ms"], r["tokens_per_s"],
                "-" if r["name"] == "none" else ("yes" if r["losses_equal_none"] else "NO")))
        ac = bv["acceptance"]
        rec = [r for r in bv["runs"] if r["name"] == "recompute"]
        rec_ok = bool(rec and rec[0]["ok"])
        rec_oom = bool(rec and rec[0]["oom"])
        crit = [("detailed Stable iterations at most 5 %% (measured %.2f %%)" % (100 * ac["detailed_share"]), ac["detailed_met"]),
                ("Stable evictions at most 1 %% of swap-outs (measured %.2f %%)" % (100 * ac["stable_eviction_share"]), ac["evictions_met"]),
                ("every swapping run's losses bit-identical to none's", ac["losses_met"]),
                ("smartswap's tokens/s at least 1.1x recompute's and ahead of both variants (%s)" % (
                    "vs recompute %.2fx" % ac["vs_recompute"] if rec_ok else
                    "recompute does not train at this budget (its run failed: %s), so the comparison is with the "
                    "variants alone" % ("out of memory" if rec_oom else "refused or errored; see its output")),
                 ac["speed_met"])]
        W("")
        for c, ok in crit:
            W("- %s: %s" % (c, "met" if ok else "not met"))
            met += bool(ok)
            notmet += not ok
        W("")
    except (ValueError, KeyError) as ex:
        W("bench-varying's JSON did not parse (%s): not measured.\n" % ex)
    summary.append("varying sequences: %d criteria met, %d not met" % (met, notmet))

    # 8 PyTorch
    W("\n## 8. PyTorch\n")
    if tc:
        W("Command: `%s`:\n" % R.cmds["torch_compare"])
        W("```\n%s\n```\n" % tc.get("text", "").strip())
    else:
        W("Skipped: %s.\n" % tc_reason)

    # 9 parallelism
    W("\n## 9. The seed's \"+38.94 % vs higher parallelism\"\n")
    W("The seed compares smartswap at a given parallel degree (freeing memory lets a run use less tensor or pipeline "
      "parallelism and so less communication) against running at a higher degree. That figure needs several devices and "
      "their interconnect: this run has one cpu-sim device and no collective communication, so it cannot show it, and "
      "no figure is claimed. What one device can show is what the sections above measure: the memory freed at a fixed "
      "budget (section 2: how much larger a batch or sequence fits, which is what would let a run drop a parallel "
      "degree) and what that costs in step time (section 3). The throughput gain against higher parallelism would be "
      "that cost against the communication the lower degree saves, which is not measured here.\n")

    # 10 GPU
    W("\n## 10. On a GPU (bench/gpu-check.sh)\n")
    logs = sorted(glob.glob(os.path.join(a.out, "gpu-check-*.log")) + glob.glob(os.path.join(a.out, "gpu-check-*.txt")))
    if logs:
        text = open(logs[-1], errors="replace").read()
        i = text.rfind("======== summary")
        W("From `%s` (%s), its summary as printed:\n" % (logs[-1], os.path.basename(logs[-1])))
        W("```\n%s\n```\n" % (text[i:].strip() if i >= 0 else "(the log has no summary table: the run did not finish)"))
        summary.append("GPU: %s" % os.path.basename(logs[-1]))
    else:
        W("Not measured: no bench/gpu-check.sh log is recorded under `%s/` (gpu-check-DATE.log). No GPU has run "
          "smartswap yet; every figure above is from the cpu-sim device.\n" % a.out)
        summary.append("GPU: no gpu-check run recorded (nothing has run on a GPU)")

    md = ["# smartswap benchmark report (%s, %s form)\n" % (date, form)]
    md.append("## Summary\n")
    md.extend("- " + s for s in summary)
    md.append("")
    text = "\n".join(md + out[1:]) + "\n"
    rp = os.path.join(a.out, "REPORT.md" if not quick else "REPORT-quick.md")
    open(rp, "w").write(text)
    log("wrote %s (%.0f s)" % (rp, time.time() - t_start))
    if a.readme:
        quote_in_readme(a.readme, rp, summary, date, commit, elapsed, "make bench-quick" if quick else "make bench")
    return 0


README_BEGIN = "<!-- report-summary: written by scripts/report.py --readme; do not edit by hand -->"
README_END = "<!-- /report-summary -->"


def quote_in_readme(path, report_path, summary, date, commit, elapsed, cmd):
    """Replaces the block between README_BEGIN and README_END in path with this run's summary."""
    text = open(path).read()
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        log("%s has no report-summary markers: not quoted (add the two lines %r and %r where the summary goes)" % (
            path, README_BEGIN, README_END))
        return
    block = "\n".join([README_BEGIN, "", "`%s` on %s at commit %s (cpu-sim, %d cores, %s), from `%s`:" % (
        cmd, date, commit, os.cpu_count() or 0, elapsed, report_path), ""] +
        ["- " + x for x in summary] + ["", README_END])
    open(path, "w").write(text[:i] + block + text[j + len(README_END):])
    log("quoted the summary in %s" % path)


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def json_get(text, key, default=None):
    try:
        return json.loads(text).get(key, default)
    except (ValueError, AttributeError):
        return default


def saved(raw, name, parse_only, compute):
    """A fact about the run kept in RAWDIR/name: computed and written when running, read back with
    --parse-only (None when the saved outputs lack it)."""
    p = os.path.join(raw, name)
    if parse_only:
        return open(p).read().strip() if os.path.exists(p) else None
    v = compute()
    open(p, "w").write(v + "\n")
    return v


def git_commit():
    """The commit the benchmarks were built from, "+ local changes" when a tracked file outside
    bench/results (where the report itself is written) differs from it."""
    try:
        h = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=10).stdout.strip()
        d = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":!bench/results"], capture_output=True,
                           text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return (h or "unknown") + (" + local changes" if d else "")


def loadavg(raw, parse_only):
    p = os.path.join(raw, "loadavg")
    if parse_only:
        return open(p).read().strip() if os.path.exists(p) else "unknown"
    la = open("/proc/loadavg").read().split()[0]
    open(p, "w").write(la + "\n")
    return la


def read_log(path):
    recs = []
    if os.path.exists(path):
        for line in open(path):
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass
    return recs


def read_losses(path):
    return [r["loss_hex"] for r in read_log(path) if "loss_hex" in r]


def stab_budget(none_log):
    recs = read_log(none_log)
    if not recs:
        return None
    state = recs[0]["state_bytes"]
    act = max(r["act_peak_bytes"] for r in recs)
    mn = max(r.get("min_budget_bytes", 0) for r in recs)
    return max(state + act // 2, mn + (state + act - mn) // 4) // 256 * 256


if __name__ == "__main__":
    sys.exit(main())
