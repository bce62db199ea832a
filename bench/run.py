#!/usr/bin/env python3
"""bench/run.py -- builds bench/bench.c, generates the data (bench/gen.py) when missing, runs every
measurement (median of --reps runs, 3 by default) and prints a Markdown report: the machine, the
command, throughput tables in GB/s and the ratios the issues set as targets.

  python3 bench/run.py              256 MiB files (dense, mnist, sparse, seq)
  python3 bench/run.py --quick      32 MiB files, for a fast look
  python3 bench/run.py --big        also the peak-RSS test on a >= 1 GiB file (generated, then
                                    deleted unless --keep-big); without --big the RSS test runs on
                                    the big file only when it already exists
  python3 bench/run.py --from-json F   re-render the report from a saved results file

Raw results (one JSON object per line, as bench.c prints them) go to bench/data/results.jsonl
(or --json PATH). Targets (issues 2 and 3):
  indexing / newline scan >= 0.5      parsing / strtof >= 4
  pipeline / bare parsing >= 0.8      2 threads / 1 thread >= 1.7
  peak RSS independent of file size
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
KINDS = ("dense", "mnist", "sparse", "seq")
BENCH_BIN = os.path.join(ROOT, "build", "bench")

TARGETS = {"index": 0.5, "parse": 4.0, "pipeline": 0.8, "threads": 1.7}


def sh(cmd, **kw):
    print("+ " + (cmd if isinstance(cmd, str) else " ".join(shlex.quote(c) for c in cmd)), file=sys.stderr)
    sys.stderr.flush()
    return subprocess.run(cmd, cwd=ROOT, check=True, **kw)


def build():
    sh(["make", "-s", "build/libctfio.a", "build/ctfio"])
    cc = os.environ.get("CC", "cc")
    sh([cc, "-O2", "-Iinclude", "-Ilib", "bench/bench.c", "build/libctfio.a", "-lm", "-pthread", "-o", BENCH_BIN])


def machine():
    info = {"model": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "Model name":
                info["model"] = v.strip()
            elif k.strip() == "CPU(s)":
                info["cores"] = int(v.strip())
            elif k.strip() == "Hypervisor vendor":
                info["hypervisor"] = v.strip()
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            info["mem_gib"] = round(kb / (1 << 20), 1)
    except OSError:
        pass
    info["kernel"] = platform.release()
    try:
        info["cc"] = subprocess.run([os.environ.get("CC", "cc"), "--version"], capture_output=True,
                                    text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        info["cc"] = "?"
    return info


def run_bench(args, sink):
    p = subprocess.run([BENCH_BIN] + args, cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        sys.stderr.write(p.stderr)
        raise SystemExit("bench failed: %s" % " ".join(args))
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    for r in recs:
        sink.write(json.dumps(r) + "\n")
    sink.flush()
    return recs


# ----------------------------------------------------------------------------- report

def fmt(x, nd=2):
    return "—" if x is None else ("%.*f" % (nd, x))


def ok(val, target):
    if val is None:
        return "—"
    return ("%.2f ✅" if val >= target else "%.2f ❌") % val


def report(recs, meta):
    out = []
    w = out.append
    by = {}
    for r in recs:
        by.setdefault(r["bench"], []).append(r)

    def one(bench, kind, **kv):
        for r in by.get(bench, []):
            if r["kind"] == kind and all(r.get(k) == v for k, v in kv.items()):
                return r
        return None

    def g(bench, kind, **kv):
        r = one(bench, kind, **kv)
        return r["gbps"] if r else None

    kinds = [k for k in KINDS if one("index", k)]
    m = meta["machine"]
    w("Machine: %s, %s CPUs%s, %s GiB RAM, Linux %s, %s." % (
        m.get("model"), m.get("cores"), " (%s VM)" % m["hypervisor"] if m.get("hypervisor") else "",
        m.get("mem_gib", "?"), m.get("kernel"), m.get("cc")))
    w("")
    w("Date: %s. Command: `%s`. Median of %s runs per cell; GB/s = 1e9 bytes of file per second, "
      "warm page cache." % (meta["date"], meta["command"], meta["reps"]))
    if meta.get("load"):
        w("Load average (1 min) at start / end: %s / %s (other jobs were %s on the machine)." % (
            meta["load"][0], meta["load"][1], "running" if max(meta["load"]) > 0.5 else "not running"))
    w("")
    cpu = by.get("cpu", [])
    if cpu:
        w("CPU calibration (a register-only loop on 1 vs 2 threads, measured before each file): "
          "a second thread gives ×" + ", ×".join("%.2f" % r["scaling"] for r in cpu) +
          " (%s). This is the ceiling of every 2-thread ratio below." % ", ".join(r["kind"] for r in cpu))
        w("")
    sizes = {k: one("index", k)["bytes"] for k in kinds}
    w("Files: " + ", ".join("%s %.0f MiB (%s lines)" % (k, sizes[k] / 2**20, one("index", k)["lines"]) for k in kinds) + ".")
    w("")

    # Table 1: indexing and parsing.
    chunk_main = max((r["chunk_mb"] for r in by.get("parse_only", [])), default=32)
    w("### Indexing and parsing (GB/s)")
    w("")
    w("strtof / ctf__parse_float: conversions only, over the offsets of every number of the file "
      "(values, sparse indices, sequence ids) found beforehand. strtof scan: a loop that finds the "
      "numbers and calls strtof (a naive strtof-based reader). Parse-only: `ctf__parse_chunk` over "
      "all %d MiB chunks, from memory, one thread (the whole parser: structure, validation, stores)." % chunk_main)
    w("")
    w("| file | newline scan | index | **index ÷ scan** (≥ 0.5) | strtof | ctf__parse_float | kernel ÷ strtof | strtof scan | parse-only | **parse ÷ strtof** (≥ 4) | parse ÷ strtof scan |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = {"index": [], "parse": [], "pipeline": [], "threads": []}
    for k in kinds:
        scan, idx, st, pf = g("newline_scan", k), g("index", k), g("strtof", k), g("parse_float", k)
        sts = g("strtof_scan", k)
        po = g("parse_only", k, chunk_mb=chunk_main)
        ri = idx / scan if idx and scan else None
        rp = po / st if po and st else None
        ratios["index"].append(ri)
        ratios["parse"].append(rp)
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k, fmt(scan), fmt(idx), ok(ri, TARGETS["index"]), fmt(st, 3), fmt(pf, 3),
            fmt(pf / st if pf and st else None), fmt(sts, 3), fmt(po, 3), ok(rp, TARGETS["parse"]),
            fmt(po / sts if po and sts else None)))
    w("")
    w("Numbers per second (millions), strtof / ctf__parse_float: " + ", ".join(
        "%s %.1f / %.1f" % (k, one("strtof", k)["mnumbers_per_s"], one("parse_float", k)["mnumbers_per_s"])
        for k in kinds) + ". Results that differ between the two: " + ", ".join(
        "%s %d" % (k, one("parse_float", k)["mismatches_vs_strtof"]) for k in kinds) + ".")
    w("")

    # Table 2: the reader.
    if by.get("reader"):
        threads = sorted({r["threads"] for r in by["reader"]})
        chunks = sorted({r["chunk_mb"] for r in by["reader"]}, reverse=True)
        w("### Reader: file → minibatches (GB/s, one sweep, %d-sample minibatches)" % by["reader"][0]["mb_samples"])
        w("")
        w("Reader time excludes `ctf_reader_open` (indexing); parse-only is `ctf__parse_chunk` over "
          "all chunks from memory. Pipeline = reader with 0 threads (read + parse + pack on the "
          "caller) ÷ parse-only on one thread; the 1-thread reader overlaps packing with parsing.")
        w("")
        hdr = "| file | randomize | chunk | " + " | ".join("%d thr" % t for t in threads) + \
              " | parse-only 1 thr / 2 thr | **pipeline** 0 thr ÷ parse (≥ 0.8) | 1 thr ÷ parse | **2 thr ÷ 1 thr** (≥ 1.7) | parse 2 thr ÷ 1 thr (ceiling) |"
        w(hdr)
        w("|" + "---|" * (hdr.count("|") - 1))
        for k in kinds:
            for rnd in (False, True):
                for c in chunks:
                    row = {t: g("reader", k, randomize=rnd, chunk_mb=c, threads=t) for t in threads}
                    if all(v is None for v in row.values()):
                        continue
                    p1, p2 = g("parse_only", k, chunk_mb=c), g("parse_only_2t", k, chunk_mb=c)
                    r0 = row.get(0) / p1 if row.get(0) and p1 else None
                    r1 = row.get(1) / p1 if row.get(1) and p1 else None
                    r21 = row.get(2) / row.get(1) if row.get(2) and row.get(1) else None
                    ratios["pipeline"].append(r0)
                    ratios["threads"].append(r21)
                    rw = one("reader", k, randomize=rnd, chunk_mb=c, threads=threads[0])
                    w("| %s | %s | %d MiB | %s | %s / %s | %s | %s | %s | %s |" % (
                        k, "window %d" % rw["window_chunks"] if rnd else "no", c,
                        " | ".join(fmt(row[t], 3) for t in threads), fmt(p1, 3), fmt(p2, 3),
                        ok(r0, TARGETS["pipeline"]), fmt(r1), ok(r21, TARGETS["threads"]),
                        fmt(p2 / p1 if p1 and p2 else None)))
        w("")
        opens = ["%s %.3f s" % (k, one("reader", k, randomize=False, chunk_mb=chunks[0], threads=threads[0])["open_s"]) for k in kinds]
        w("`ctf_reader_open` (indexing, no cache): " + ", ".join(opens) + ".")
        w("")

    # Table 3: RSS.
    if by.get("rss"):
        w("### Peak RSS (separate process, one randomized sweep)")
        w("")
        w("| file | size | chunk / window / threads | peak RSS | RSS after open | index (sequence table) | parsed chunks resident (peak) | parsed bytes resident (peak) | peak RSS − index |")
        w("|---|---|---|---|---|---|---|---|---|")
        rs = sorted(by["rss"], key=lambda r: r["bytes"])
        for r in rs:
            w("| %s | %.0f MiB | %d MiB / %d / %d | %.1f MiB | %.1f MiB | %.1f MiB | %d | %.1f MiB | %.1f MiB |" % (
                os.path.basename(r["file"]), r["bytes"] / 2**20, r["chunk_mb"], r["window_chunks"], r["threads"],
                r["maxrss_kb"] / 1024, r["maxrss_after_open_kb"] / 1024, r["index_bytes"] / 2**20,
                r["chunks_resident_peak"], r["bytes_resident_peak"] / 2**20,
                r["maxrss_kb"] / 1024 - r["index_bytes"] / 2**20))
        w("")
        if len(rs) >= 2:
            a, b = rs[0], rs[-1]
            w("Peak RSS grows %.1f MiB from %.0f MiB to %.0f MiB of file (×%.2f for ×%.1f the file); the "
              "sequence table grows %.1f MiB of that." % (
                  (b["maxrss_kb"] - a["maxrss_kb"]) / 1024, a["bytes"] / 2**20, b["bytes"] / 2**20,
                  b["maxrss_kb"] / a["maxrss_kb"], b["bytes"] / a["bytes"], (b["index_bytes"] - a["index_bytes"]) / 2**20))
            w("")

    # Summary.
    w("### Targets")
    w("")
    w("| target | worst | median | best | met? |")
    w("|---|---|---|---|---|")
    names = {"index": "indexing ÷ newline scan ≥ 0.5", "parse": "parse-only ÷ strtof ≥ 4",
             "pipeline": "pipeline (reader 0 thr) ÷ bare parse ≥ 0.8", "threads": "reader 2 threads ÷ 1 thread ≥ 1.7"}
    for key, label in names.items():
        v = [x for x in ratios[key] if x is not None]
        if not v:
            continue
        met = "all cases" if min(v) >= TARGETS[key] else ("some cases" if max(v) >= TARGETS[key] else "no")
        w("| %s | %.2f | %.2f | %.2f | %s |" % (label, min(v), statistics.median(v), max(v), met))
    if by.get("rss") and len(by["rss"]) >= 2:
        rs = sorted(by["rss"], key=lambda r: r["bytes"])
        grow = (rs[-1]["maxrss_kb"] - rs[0]["maxrss_kb"]) / 1024
        idxg = (rs[-1]["index_bytes"] - rs[0]["index_bytes"]) / 2**20
        w("| peak RSS independent of file size | +%.1f MiB for ×%.1f file | | | %s |" % (
            grow, rs[-1]["bytes"] / rs[0]["bytes"],
            "parsed data yes; index grows %.1f MiB" % idxg if grow > 2 else "yes"))
    w("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- main

def median_rss(recs):
    recs = sorted(recs, key=lambda r: r["maxrss_kb"])
    return recs[len(recs) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="32 MiB files")
    ap.add_argument("--mb", type=int, default=None, help="MiB per file (default 256, --quick 32)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunks", default="32,4", help="chunk sizes in MiB for the reader")
    ap.add_argument("--threads", default="0,1,2")
    ap.add_argument("--window", type=int, default=4, help="randomization window in chunks")
    ap.add_argument("--mb-samples", type=int, default=512, help="minibatch size in samples")
    ap.add_argument("--big", action="store_true", help="generate the >= 1 GiB file and run the RSS test on it")
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--keep-big", action="store_true", help="do not delete the big file afterwards")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", default=os.path.join(DATA, "results.jsonl"))
    ap.add_argument("--from-json", default=None, help="only render the report of a saved results file")
    a = ap.parse_args(argv)

    if a.from_json:
        with open(a.from_json) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        meta = next((l["meta"] for l in lines if "meta" in l), None)
        print(report([l for l in lines if "bench" in l], meta))
        return 0

    mb = a.mb if a.mb is not None else (32 if a.quick else 256)
    kinds = [k for k in a.kinds.split(",") if k]
    cmd = "python3 bench/run.py" + ("" if not (argv if argv is not None else sys.argv[1:]) else
                                    " " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])))
    meta = {"machine": machine(), "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "command": cmd, "reps": a.reps, "mb": mb}
    load0 = os.getloadavg()[0]

    if not a.no_build:
        build()
    gen = [sys.executable, os.path.join(HERE, "gen.py"), "--mb", str(mb), "--kinds", ",".join(kinds)]
    if a.big:
        gen += ["--big", "--big-mb", str(a.big_mb)]
    sh(gen)

    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    recs = []
    with open(a.json, "w") as sink:
        for k in kinds:
            path = os.path.relpath(os.path.join(DATA, "%s_%dmb.ctf" % (k, mb)), ROOT)
            print("bench: %s (%s)" % (k, path), file=sys.stderr)
            recs += run_bench(["all", k, path, "--reps", str(a.reps), "--chunks", a.chunks,
                               "--threads", a.threads, "--window", str(a.window),
                               "--mb-samples", str(a.mb_samples)], sink)
        # Peak RSS: the dense file of this run vs the big one, each in fresh processes.
        big = os.path.relpath(os.path.join(DATA, "dense_%dmb.ctf" % a.big_mb), ROOT)
        small = os.path.relpath(os.path.join(DATA, "dense_%dmb.ctf" % mb), ROOT)
        rss_files = [small] if "dense" in kinds else []
        if os.path.exists(os.path.join(ROOT, big)) and big != small:
            rss_files.append(big)
        for path in rss_files:
            print("bench: rss (%s)" % path, file=sys.stderr)
            runs = []
            for _ in range(a.reps):
                runs += run_bench(["rss", "dense", path, "--chunk-mb", "4", "--window", "4", "--threads", "2",
                                   "--mb-samples", str(a.mb_samples)], open(os.devnull, "w"))
            r = median_rss(runs)
            sink.write(json.dumps(r) + "\n")
            recs.append(r)
        meta["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        sink.write(json.dumps({"meta": meta}) + "\n")
    if a.big and not a.keep_big:
        p = os.path.join(ROOT, big)
        if os.path.exists(p) and os.path.getsize(p) > 10**9:
            os.remove(p)
            print("bench: removed %s" % big, file=sys.stderr)
    print(report(recs, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
