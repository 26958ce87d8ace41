"""scripts/report.py --parse-only on saved benchmark outputs (tests/data/report-raw: a quick run's
outputs, the stability logs cut to their first 40 records): every section is written with the
figures those outputs hold, a broken or missing output becomes "not measured" rather than a crash,
and the bit-identity verdict of the stability section follows the logs."""
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RAW = os.path.join(ROOT, "tests", "data", "report-raw")
SECTIONS = ["## 1. Profiler overhead", "## 2. Scaling under a fixed budget", "## 3. Throughput",
            "## 4. Memory reuse", "## 5. Stability", "## 6. Simulator accuracy", "## 7. Varying sequences",
            "## 8. PyTorch", "## 9. The seed's", "## 10. On a GPU"]


def report(tmp_path, raw):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "report.py"), "--parse-only", str(raw),
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return (out / "REPORT-quick.md").read_text(), out


def copy_raw(tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(RAW, raw)
    return raw


def test_every_section_with_the_saved_figures(tmp_path):
    text, out = report(tmp_path, RAW)
    pos = [text.find(s) for s in SECTIONS]
    assert all(p >= 0 for p in pos), [s for s, p in zip(SECTIONS, pos) if p < 0]
    assert pos == sorted(pos)
    # figures parsed from the saved outputs, not constants of the script
    rs = open(os.path.join(RAW, "bench-recordstream.out")).read()
    ratio = float(re.search(r"available-minus-drop ([\d.]+)x", rs).group(1))
    assert "stock/custom %.2fx" % ratio in text
    rows = json.load(open(os.path.join(RAW, "bench-train.out")))["rows"]
    for r in rows:
        t = r["tokens_per_s"]
        assert "| %s | %gx | %.0f |" % (r["link"], r["over"], t["none"]) in text
        assert "%.3fx" % (t["smartswap"] / t["recompute"]) in text
    date = open(os.path.join(RAW, "date")).read().strip()
    assert "on %s at commit %s," % (date, open(os.path.join(RAW, "commit")).read().strip()) in text
    # the simulator's peak: the plan's prediction against the replay's measurement
    plan = json.load(open(os.path.join(RAW, "acc-50-plan.out")))
    rep = json.load(open(os.path.join(RAW, "acc-50-replay.out")))
    assert "| %.3f MiB | %.3f MiB | %.3f |" % (plan["peak_bytes_after"] / 2**20, rep["peak_bytes"] / 2**20,
                                               rep["peak_bytes"] / plan["peak_bytes_after"]) in text
    assert "smartswap's 40 logged losses equal none's bit for bit: yes" in text
    if shutil.which("gnuplot"):
        for png in ("throughput-quick.png", "stability-quick.png", "rss-quick.png"):
            assert (out / png).stat().st_size > 1000, png


def test_a_changed_loss_is_reported(tmp_path):
    raw = copy_raw(tmp_path)
    p = raw / "stab-smartswap.jsonl"
    recs = [json.loads(line) for line in p.read_text().splitlines()]
    i = next(k for k, r in enumerate(recs) if "loss_hex" in r and k > 10)
    v = float.fromhex(recs[i]["loss_hex"])
    recs[i]["loss_hex"] = float.hex(v + abs(v) * 2 ** -20)
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    text, _ = report(tmp_path, raw)
    assert "smartswap's 40 logged losses equal none's bit for bit: NO" in text
    assert "losses bit-identical to none's and recompute's: NO" in text


def test_broken_outputs_are_not_measured(tmp_path):
    raw = copy_raw(tmp_path)
    (raw / "bench-train.out").write_text("{\"rows\": [")            # cut short
    (raw / "bench-varying.out").unlink()
    (raw / "bench-recordstream.out").write_text("")
    (raw / "torch_compare.json").unlink()
    text, _ = report(tmp_path, raw)
    assert all(s in text for s in SECTIONS)
    assert "bench-train's JSON did not parse" in text
    assert "bench-varying's JSON did not parse" in text
    assert "Measured here: not measured (bench-recordstream printed no ratio" in text
    assert "## 8. PyTorch\n\nSkipped:" in text


def test_readme_quote(tmp_path):
    readme = tmp_path / "README.md"
    begin = "<!-- report-summary: written by scripts/report.py --readme; do not edit by hand -->"
    readme.write_text("# title\n\nbefore\n\n%s\nstale line\n<!-- /report-summary -->\n\nafter\n" % begin)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "report.py"), "--parse-only", RAW,
                        "--out", str(tmp_path / "out"), "--readme", str(readme)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    text = readme.read_text()
    assert "stale line" not in text and text.startswith("# title\n\nbefore\n") and text.endswith("\nafter\n")
    quoted = text.split(begin)[1].split("<!-- /report-summary -->")[0]
    summary = (tmp_path / "out" / "REPORT-quick.md").read_text().split("## Summary\n")[1].split("\n\n")[0]
    assert summary.strip() and summary.strip() in quoted
    assert open(os.path.join(RAW, "date")).read().strip() in quoted
    # without the markers the file is left as it was, and the run says so
    readme.write_text("no markers\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "report.py"), "--parse-only", RAW,
                        "--out", str(tmp_path / "out"), "--readme", str(readme)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0 and readme.read_text() == "no markers\n" and "no report-summary markers" in r.stderr


def test_simulated_step_from_the_json_rows(tmp_path):
    """Section 6 sets bench-train's simulated swap-only step (its JSON rows' sim_swap_only_step_s)
    against the measured one; a row without it reads "not measured"."""
    raw = copy_raw(tmp_path)
    p = raw / "bench-train.out"
    doc = json.loads(p.read_text())
    rows = doc["rows"]
    assert rows
    rows[0]["sim_swap_only_step_s"] = 0.0123
    for r in rows[1:]:
        r.pop("sim_swap_only_step_s", None)
    p.write_text(json.dumps(doc))
    text, _ = report(tmp_path, raw)
    sec = text.split("## 6. Simulator accuracy")[1].split("## 7.")[0]
    assert "- %s %gx: simulated 12.3 ms" % (rows[0]["link"], rows[0]["over"]) in sec
    for r in rows[1:]:
        assert "- %s %gx: simulated not measured" % (r["link"], r["over"]) in sec


def test_rss_at_end_skips_the_exit(tmp_path):
    """"RSS at the end" is the last sample taken while the run still wrote its step log: a spike
    while the process exits (cpu-sim poisons every block freed at exit) is not what it held while
    it trained; a growth while it trained still counts; without log sizes, the last sample."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("report", os.path.join(ROOT, "scripts", "report.py"))
    rep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rep)
    exit_spike = [(0.0, 100, 0), (0.25, 160, 10), (0.5, 161, 20), (0.75, 161, 30), (1.0, 220, 30)]
    assert rep.rss_at_end(exit_spike) == 161
    growing = [(0.0, 100, 0), (0.25, 160, 10), (0.5, 190, 20), (0.75, 230, 29), (1.0, 231, 30)]
    assert rep.rss_at_end(growing) == 230
    assert rep.rss_at_end([(0.0, 100, -1), (0.25, 220, -1)]) == 220
    assert rep.rss_at_end([]) is None
    p = tmp_path / "x.rss"
    p.write_text("0.00 100\n0.25 120\n")   # the two-column form of older runs
    assert rep.read_rss(str(p)) == [(0.0, 100), (0.25, 120)]
    assert rep.read_rss(str(p), with_size=True) == [(0.0, 100, -1), (0.25, 120, -1)]
