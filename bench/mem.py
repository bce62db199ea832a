#!/usr/bin/env python3
"""bench/mem.py -- peak RSS of a randomized sweep against file size and sequence count, before and
after the two-level index, plus indexing and randomized-read speed ratios measured in the same run.

  python3 bench/mem.py [--before REV] [--sizes-mb 100,1000] [--corpus-files 10000] [--reps 3]

"before" is the library at REV (default 0d88635, the commit before the two-level index),
exported with `git archive` into a temporary directory and built there; bench/bench.c is built
against it with -DBENCH_BEFORE. "after" is this tree (build/libctfio.a, built by `make`). Both
run the same `bench rss short FILE --chunk-mb 1 --window 4 --threads 2` (one randomized sweep
in a fresh process, ru_maxrss) on short-row files ("|x 1", 5 bytes a sequence) and on a corpus
of small files, and `bench all dense` (256 MiB, bench/gen.py) for indexing and the randomized
reader, alternating before/after. Data go to bench/data/ (git-ignored). Prints Markdown.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def build(before_rev, tmp):
    after = os.path.join(ROOT, "build", "bench")
    sh(["make", "-s", "-C", ROOT, "build/bench"], stdout=subprocess.DEVNULL)
    # The library's link flags (libcurl where it has it), for the older tree's library too.
    ldlibs = subprocess.run(["make", "-s", "-C", ROOT, "print-ldlibs"], check=True,
                            stdout=subprocess.PIPE, text=True).stdout.split()
    src = os.path.join(tmp, "before")
    os.makedirs(src)
    arch = subprocess.run(["git", "-C", ROOT, "archive", before_rev], check=True,
                          stdout=subprocess.PIPE).stdout
    sh(["tar", "-x", "-C", src], input=arch)
    sh(["make", "-C", src, "build/libctfio.a"], stdout=subprocess.DEVNULL)
    before = os.path.join(tmp, "bench_before")
    sh(["cc", "-O2", "-DBENCH_BEFORE", "-I" + os.path.join(src, "include"),
        "-I" + os.path.join(src, "lib"), os.path.join(HERE, "bench.c"),
        os.path.join(src, "build", "libctfio.a")] + ldlibs + ["-o", before])
    return before, after


def short_file(mb):
    path = os.path.join(DATA, "short_%dmb.ctf" % mb)
    lines = mb * 1000 * 1000 // 5
    if not os.path.exists(path) or os.path.getsize(path) != lines * 5:
        block = b"|x 1\n" * 100000
        with open(path, "wb") as f:
            left = lines
            while left:
                n = min(left, 100000)
                f.write(block[: 5 * n])
                left -= n
    return path


def corpus(files, lines_each=2000):
    d = os.path.join(DATA, "corpus_%d" % files)
    done = os.path.join(d, ".done")
    if not os.path.exists(done):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        body = b"|x 1\n" * lines_each
        for i in range(files):
            with open(os.path.join(d, "part-%05d.ctf" % i), "wb") as f:
                f.write(body)
        open(done, "w").close()
    return os.path.join(d, "part-*.ctf")


def rss(binary, path):
    out = subprocess.run([binary, "rss", "short", path, "--chunk-mb", "1", "--window", "4",
                          "--threads", "2", "--mb-samples", "4096"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_all(binary, path, only, extra):
    out = subprocess.run([binary, "all", "dense", path, "--reps", "1", "--only", only] + extra,
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="0d88635")
    ap.add_argument("--sizes-mb", default="100,1000")
    ap.add_argument("--corpus-files", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--no-memory", action="store_true", help="only the speed ratios")
    a = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        before, after = build(a.before, tmp)
        rows = []
        targets = [(short_file(int(m)), "%s MB short rows" % m) for m in a.sizes_mb.split(",")
                   if not a.no_memory]
        if a.corpus_files and not a.no_memory:
            targets.append((corpus(a.corpus_files), "corpus of %d files" % a.corpus_files))
        for path, label in targets:
            r_before, r_after = rss(before, path), rss(after, path)
            rows.append((label, r_before, r_after))
            print("measured", label, file=sys.stderr)
        if rows:
            print("| data | bytes | sequences | chunks | peak RSS before | peak RSS after | "
                  "index before | index after |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, b, n in rows:
            print("| %s | %d | %d | %d | %.0f MB | %.0f MB | %.1f MB | %.3f MB |" % (
                label, n["bytes"], n["sequences"], n["chunks"], b["maxrss_kb"] / 1024,
                n["maxrss_kb"] / 1024, b["index_bytes"] / 1e6, n["index_bytes"] / 1e6))
        if a.no_speed:
            return
        dense = os.path.join(DATA, "dense_256mb.ctf")
        if not os.path.exists(dense):
            sh([sys.executable, os.path.join(HERE, "gen.py"), "--kinds", "dense"])
        idx = {"before": [], "after": []}
        rnd = {"before": [], "after": []}
        rcpu = {"before": [], "after": []}
        for _ in range(a.reps):
            for name, binary in (("before", before), ("after", after)):
                for r in run_all(binary, dense, "index", ["--no-reader"]):
                    if r["bench"] == "index":
                        idx[name].append(statistics.median(r["seconds"]))
                for r in run_all(binary, dense, "reader", ["--chunks", "32", "--threads", "2",
                                                            "--window", "4"]):
                    if r["bench"] == "reader" and r["randomize"]:
                        rnd[name].append(statistics.median(r["seconds"]))
                        rcpu[name].append(statistics.median(r["cpu_seconds"]))
        mi = {k: statistics.median(v) for k, v in idx.items()}
        mr = {k: statistics.median(v) for k, v in rnd.items()}
        mc = {k: statistics.median(v) for k, v in rcpu.items()}
        print()
        print("| 256 MiB dense | before (s) | after (s) | after / before speed |")
        print("|---|---:|---:|---:|")
        print("| indexing | %.3f | %.3f | %.2f |" % (mi["before"], mi["after"],
                                                     mi["before"] / mi["after"]))
        print("| randomized sweep (32 MiB chunks, window 4, 2 threads) | %.3f | %.3f | %.2f |" % (
            mr["before"], mr["after"], mr["before"] / mr["after"]))
        print("| the same sweep, process CPU time | %.3f | %.3f | %.2f |" % (
            mc["before"], mc["after"], mc["before"] / mc["after"]))


if __name__ == "__main__":
    main()
