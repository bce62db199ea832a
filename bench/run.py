#!/usr/bin/env python3
"""bench/run.py -- builds bench/bench.c, generates the data (bench/gen.py) when missing, runs every
measurement (median of --reps runs, 3 by default) and prints a Markdown report: the machine, the
command, throughput tables in GB/s and the ratios set as targets.

  python3 bench/run.py              256 MiB files (dense, mnist, sparse, seq)
  python3 bench/run.py --quick      32 MiB files, for a fast look
  python3 bench/run.py --big        also the peak-RSS test on a >= 1 GiB file (generated, then
                                    deleted unless --keep-big); without --big the RSS test runs on
                                    the big file only when it already exists
  python3 bench/run.py --from-json F   re-render the report from a saved results file

Raw results (one JSON object per line, as bench.c prints them) go to bench/data/results.jsonl
(or --json PATH). Targets:
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
    print("+ " + (cmd if isinstance(cmd, str) else " ".join(shlex.quote(c) for c in cmd)),
          file=sys.stderr)
    sys.stderr.flush()
    return subprocess.run(cmd, cwd=ROOT, check=True, **kw)


def build():
    # The Makefile builds it with the library's own flags (libcurl where the library has it).
    sh(["make", "-s", "build/libctfio.a", "build/ctfio", "build/bench"])


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

    def g(bench, kind, **kv):  # wall-clock GB/s
        r = one(bench, kind, **kv)
        return r["gbps"] if r else None

    def c(bench, kind, **kv):  # GB/s per CPU-second (immune to time slicing by other jobs)
        r = one(bench, kind, **kv)
        return r.get("cpu_gbps", r["gbps"]) if r else None

    def div(a, b):
        return a / b if a is not None and b else None

    kinds = [k for k in KINDS if one("index", k)]
    m = meta["machine"]
    w("Machine: %s, %s CPUs%s, %s GiB RAM, Linux %s, %s." % (
        m.get("model"), m.get("cores"), " (%s VM)" % m["hypervisor"] if m.get("hypervisor") else "",
        m.get("mem_gib", "?"), m.get("kernel"), m.get("cc")))
    w("")
    w("Date: %s. Command: `%s`. Median of %s runs per cell (repetitions of the quantities that are "
      "compared alternate); GB/s = 1e9 bytes of file per second; warm page cache." % (
          meta["date"], meta["command"], meta["reps"]))
    if meta.get("load"):
        w("Load average (1 min) at start / end: %s / %s (%s)." % (
            meta["load"][0], meta["load"][1],
            "other jobs were running on the machine" if max(meta["load"]) > 0.5 else "machine "
                                                                                     "otherwise "
                                                                                     "idle"))
    cpu = by.get("cpu", [])
    if cpu:
        w("CPU calibration (a register-only loop on 1 vs 2 threads, measured before each file): a "
          "second thread gives ×" + ", ×".join("%.2f" % r["scaling"] for r in cpu) +
          " (%s). That is the ceiling of every wall-clock 2-thread ratio below."
          % ", ".join(r["kind"] for r in cpu))
    w("")
    w("Files: " + ", ".join("%s %.0f MiB (%s lines, %s sequences)" % (
        k, one("index", k)["bytes"] / 2**20, one("index", k)["lines"],
        one("index", k)["sequences"]) for k in kinds) + ".")
    w("")

    ratios = {"index": [], "parse": [], "pipeline": [], "own": [], "threads": [], "bound": []}

    # Table 1: indexing and parsing, single-threaded: CPU-time based.
    chunk_main = max((r["chunk_mb"] for r in by.get("parse_only", [])), default=32)
    w("### Indexing and parsing (single thread, GB/s per CPU-second)")
    w("")
    w("Everything here runs on one thread, so throughput is computed from the process's CPU time "
      "(user + system), which time slicing by other jobs does not inflate; wall-clock GB/s are in "
      "the JSON. strtof / ctf__parse_float: conversions only, over the offsets of every number of "
      "the file (values, sparse indices, sequence ids) found beforehand. strtof scan: a loop that "
      "finds the numbers and calls strtof (a naive strtof-based reader). Parse-only: "
      "`ctf__parse_chunk` over all %d MiB chunks from memory (the whole parser: structure, "
      "validation, stores)." % chunk_main)
    w("")
    w("| file | newline scan | index | **index ÷ scan** (≥ 0.5) | strtof | ctf__parse_float | "
      "kernel ÷ strtof | strtof scan | parse-only | **parse ÷ strtof** (≥ 4) | parse ÷ strtof scan "
      "|")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in kinds:
        scan, idx, st, pf = c("newline_scan", k), c("index", k), c("strtof", k), c("parse_float", k)
        sts = c("strtof_scan", k)
        po = c("parse_only", k, chunk_mb=chunk_main)
        ri, rp = div(idx, scan), div(po, st)
        ratios["index"].append(ri)
        ratios["parse"].append(rp)
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k, fmt(scan), fmt(idx), ok(ri, TARGETS["index"]), fmt(st, 3), fmt(pf, 3),
            fmt(div(pf, st)), fmt(sts, 3), fmt(po, 3), ok(rp, TARGETS["parse"]), fmt(div(po, sts))))
    w("")
    w("Numbers per CPU-second (millions), strtof / ctf__parse_float: " + ", ".join(
        "%s %.1f / %.1f" % (k, one("strtof", k)["mnumbers_per_s"], one("parse_float",
                                                                       k)["mnumbers_per_s"])
        for k in kinds) + ". Results that differ between the two: " + ", ".join(
        "%s %d" % (k, one("parse_float", k)["mismatches_vs_strtof"]) for k in kinds) + ".")
    w("")

    # Table 2: the reader.
    if by.get("reader"):
        threads = sorted({r["threads"] for r in by["reader"]})
        chunks = sorted({r["chunk_mb"] for r in by["reader"]}, reverse=True)
        w("### Reader: file → minibatches (one sweep, %d-sample minibatches)"
          % by["reader"][0]["mb_samples"])
        w("")
        w("Reader GB/s are wall-clock, over the `ctf_reader_next` loop (indexing in "
          "`ctf_reader_open` excluded). **Pipeline** = reader with 0 threads (read + parse + pack, "
          "all on the caller) ÷ parse-only, both per CPU-second (wall-clock ratio in brackets). "
          "**2 ÷ 1 thr** is wall-clock. *2-core bound*: the best 2 ÷ 1 ratio an otherwise idle "
          "2-core machine allows for the work measured (CPU time of the parse threads W and of the "
          "consumer thread P: 1 thread takes ≥ max(W, P), 2 threads ≥ max(W/2, P, (W+P)/2)). "
          "*Read + parse*: parse-only with each chunk first `pread` into a buffer, so **own** = "
          "reader with 0 threads ÷ read + parse (per CPU-second) leaves out the file's reading "
          "and measures what the pipeline itself adds (randomize + pack: the ≤ 20% target).")
        w("")
        hdr = ("| file | randomize | chunk | " + " | ".join("%d thr" % t for t in threads) +
               " | parse-only | **pipeline** (≥ 0.8) | read + parse | **own** (≥ 0.8) | **2 ÷ 1 "
               "thr** (≥ 1.7) | consumer share (1 thr) | 2-core bound |")
        w(hdr)
        w("|" + "---|" * (hdr.count("|") - 1))
        for k in kinds:
            for rnd in (False, True):
                for ch in chunks:
                    row = {t: one("reader", k, randomize=rnd, chunk_mb=ch,
                                  threads=t) for t in threads}
                    if all(v is None for v in row.values()):
                        continue
                    pw, pc = g("parse_only", k, chunk_mb=ch), c("parse_only", k, chunk_mb=ch)
                    r0 = row.get(0)
                    pipe_c = div(r0.get("cpu_gbps") if r0 else None, pc)
                    pipe_w = div(r0["gbps"] if r0 else None, pw)
                    rp = c("read_parse", k, chunk_mb=ch)
                    own = div(r0.get("cpu_gbps") if r0 else None, rp)
                    r1, r2 = row.get(1), row.get(2)
                    r21 = div(r2["gbps"], r1["gbps"]) if r1 and r2 else None
                    share = bound = None
                    if r1 and r2 and "consumer_cpu_s" in r1:
                        P1, P2 = r1["consumer_cpu_s"], r2["consumer_cpu_s"]
                        W1, W2 = r1["median_cpu_s"] - P1, r2["median_cpu_s"] - P2
                        share = P1 / r1["median_cpu_s"] if r1["median_cpu_s"] else None
                        bound = max(W1, P1) / max(W2 / 2, P2, (W2 + P2) / 2)
                    ratios["pipeline"].append(pipe_c)
                    ratios["own"].append(own)
                    ratios["threads"].append(r21)
                    ratios["bound"].append(bound)
                    anyr = next(v for v in row.values() if v)
                    w("| %s | %s | %d MiB | %s | %s | %s (%s) | %s | %s | %s | %s | %s |" % (
                        k, "window %d" % anyr["window_chunks"] if rnd else "no", ch,
                        " | ".join(fmt(row[t]["gbps"] if row[t] else None, 3) for t in threads),
                        fmt(pw, 3), ok(pipe_c, TARGETS["pipeline"]), fmt(pipe_w),
                        fmt(rp, 3), ok(own, TARGETS["pipeline"]), ok(r21, TARGETS["threads"]),
                        "%.0f%%" % (100 * share) if share is not None else "—", fmt(bound)))
        w("")
        w("Parse-only on two plain threads ÷ one (wall-clock, same chunks): " + ", ".join(
            "%s %s" % (k, "/".join(fmt(div(g("parse_only_2t", k, chunk_mb=ch),
                                           g("parse_only", k, chunk_mb=ch))) for ch in chunks))
            for k in kinds) + " (%s MiB chunks). `ctf_reader_open` (indexing, no cache): "
          % "/".join(str(x) for x in chunks) +
            ", ".join("%s %.3f s" % (k, one("reader", k, randomize=False, chunk_mb=chunks[0],
                                            threads=threads[0])["open_s"])
                      for k in kinds) + ".")
        w("")

    # Table 3: RSS.
    def opened(r):  # RSS right after ctf_reader_open (current, not peak)
        return r.get("rss_after_open_kb", r["maxrss_after_open_kb"])

    if by.get("rss"):
        w("### Peak RSS (separate process, one randomized sweep)")
        w("")
        w("| file | size | chunk / window / threads | peak RSS | RSS after open | index (sequence "
          "table) | parsed chunks resident (peak) | parsed bytes resident (peak) | reading: peak − "
          "after open |")
        w("|---|---|---|---|---|---|---|---|---|")
        rs = sorted(by["rss"], key=lambda r: r["bytes"])
        for r in rs:
            w("| %s | %.0f MiB | %d MiB / %d / %d | %.1f MiB | %.1f MiB | %.1f MiB | %d | %.1f MiB "
              "| %.1f MiB |" % (
                os.path.basename(r["file"]), r["bytes"] / 2**20, r["chunk_mb"], r["window_chunks"],
                                r["threads"],
                r["maxrss_kb"] / 1024, opened(r) / 1024, r["index_bytes"] / 2**20,
                r["chunks_resident_peak"], r["bytes_resident_peak"] / 2**20,
                (r["maxrss_kb"] - opened(r)) / 1024))
        w("")
        if len(rs) >= 2:
            a, b = rs[0], rs[-1]
            w("From %.0f MiB to %.0f MiB of file (×%.1f), peak RSS grows %.1f MiB (×%.2f): the "
              "part "
              "allocated by `ctf_reader_open` (the index) grows %.1f MiB, the reading itself (peak "
              "− "
              "after open) %+.1f MiB." % (
                  a["bytes"] / 2**20, b["bytes"] / 2**20, b["bytes"] / a["bytes"],
                  (b["maxrss_kb"] - a["maxrss_kb"]) / 1024, b["maxrss_kb"] / a["maxrss_kb"],
                  (opened(b) - opened(a)) / 1024,
                  ((b["maxrss_kb"] - opened(b)) - (a["maxrss_kb"] - opened(a))) / 1024))
            w("")

    # Summary.
    w("### Targets")
    w("")
    w("| target | worst | median | best | met? |")
    w("|---|---|---|---|---|")
    names = {"index": "indexing ÷ newline scan ≥ 0.5", "parse": "parse-only ÷ strtof ≥ 4",
             "pipeline": "pipeline (reader, 0 threads) ÷ bare parsing ≥ 0.8",
             "own": "… the pipeline's own part: reader ÷ (read + parse) ≥ 0.8",
             "threads": "reader 2 threads ÷ 1 thread ≥ 1.7 (wall clock, this machine)",
             "bound": "… 2-core bound from the measured work (idle machine)"}
    for key, label in names.items():
        v = [x for x in ratios[key] if x is not None]
        if not v:
            continue
        t = TARGETS.get(key, TARGETS["pipeline"] if key == "own" else TARGETS["threads"])
        met = "all cases" if min(v) >= t else ("some cases" if max(v) >= t else "no")
        w("| %s | %.2f | %.2f | %.2f | %s |" % (label, min(v), statistics.median(v), max(v), met))
    if by.get("rss") and len(by["rss"]) >= 2:
        rs = sorted(by["rss"], key=lambda r: r["bytes"])
        a, b = rs[0], rs[-1]
        read_grow = ((b["maxrss_kb"] - opened(b)) - (a["maxrss_kb"] - opened(a))) / 1024
        w("| peak RSS independent of file size | %.0f → %.0f MiB for ×%.1f file | | | %s |" % (
            a["maxrss_kb"] / 1024, b["maxrss_kb"] / 1024, b["bytes"] / a["bytes"],
            "reading: %s (%+.1f MiB); index: %s (%+.1f MiB)" % (
                "yes" if read_grow <= max(16.0,
                                          0.25 * (a["maxrss_kb"] - opened(a)) / 1024) else "no",
                                                                read_grow,
                "no" if (opened(b) - opened(a)) / 1024 > 16 else "yes",
                                                                (opened(b) - opened(a)) / 1024)))
    w("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- main

def median_rss(recs):
    recs = sorted(recs, key=lambda r: r["maxrss_kb"])
    return recs[len(recs) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="32 MiB files")
    ap.add_argument("--mb", type=int, default=None, help="MiB per file (default 256, --quick 32)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunks", default="32,4", help="chunk sizes in MiB for the reader")
    ap.add_argument("--threads", default="0,1,2")
    ap.add_argument("--window", type=int, default=4, help="randomization window in chunks")
    ap.add_argument("--mb-samples", type=int, default=512, help="minibatch size in samples")
    ap.add_argument("--big", action="store_true",
                    help="generate the >= 1 GiB file and run the RSS test on it")
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--keep-big", action="store_true", help="do not delete the big file afterwards")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", default=os.path.join(DATA, "results.jsonl"))
    ap.add_argument("--from-json", default=None,
                    help="only render the report of a saved results file")
    a = ap.parse_args(argv)

    if a.from_json:
        with open(a.from_json) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        meta = next((l["meta"] for l in lines if "meta" in l), None)
        print(report([l for l in lines if "bench" in l], meta))
        return 0

    mb = a.mb if a.mb is not None else (32 if a.quick else 256)
    kinds = [k for k in a.kinds.split(",") if k]
    given = argv if argv is not None else sys.argv[1:]
    cmd = "python3 bench/run.py" + ("" if not given else
                                    " " + " ".join(shlex.quote(x) for x in given))
    meta = {"machine": machine(), "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "command": cmd, "reps": a.reps, "mb": mb}
    load0 = os.getloadavg()[0]

    if not a.no_build:
        build()
    gen = [sys.executable, os.path.join(HERE, "gen.py"), "--mb", str(mb), "--kinds",
           ",".join(kinds)]
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
        # The targets compare 256 MiB with >= 1 GiB: use the 256 MiB file when it exists (--quick).
        small = os.path.relpath(os.path.join(DATA, "dense_%dmb.ctf" % mb), ROOT)
        if os.path.exists(os.path.join(DATA, "dense_256mb.ctf")):
            small = os.path.relpath(os.path.join(DATA, "dense_256mb.ctf"), ROOT)
        rss_files = [small] if os.path.exists(os.path.join(ROOT, small)) else []
        if os.path.exists(os.path.join(ROOT, big)) and big != small:
            rss_files.append(big)
        for path in rss_files:
            print("bench: rss (%s)" % path, file=sys.stderr)
            runs = []
            with open(os.devnull, "w") as devnull:
                for _ in range(a.reps):
                    runs += run_bench(["rss", "dense", path, "--chunk-mb", "4", "--window", "4",
                                       "--threads", "2", "--mb-samples", str(a.mb_samples)],
                                      devnull)
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
