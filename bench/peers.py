#!/usr/bin/env python3
"""bench/peers.py -- ctfio against its peers on the same numbers.

One run measures, on the dense-float file of bench/gen.py (`|x` + 100 `%.4g` gaussians a line)
and on the equivalent plain CSV (the same text, without `|x `, commas between values):

  C level (build/bench, same file): strtof over every number, the library's number kernel
      (ctf__parse_float), a naive strtof scan, ctfio parse-only, the C reader on 0/1/2 threads
  ctfio Python API, file -> NumPy minibatches (`.values`), randomize=True with a small window on
      1 thread and on every core, and randomize=False
  pandas.read_csv (engine="c", engine="pyarrow"), pyarrow.csv.read_csv (1 thread, all threads),
  numpy.loadtxt, and a pure-Python CTF parser (split on '|', float() each value, np.array) --
      one run each, on the whole file (or, with --slice-mb N, on its first N MiB, labelled so)
  keepDataInMemory: time of sweep 1 and of sweeps 2-3, keep_data_in_memory True vs False
  startup from the index cache: MinibatchSource creation (ctf_reader_open) with cache_index=True,
      first open (builds + writes the cache) vs a second open, on a >= 1 GiB file made for this
      (4 copies of the 256 MiB dense file when it exists), deleted afterwards

Every measurement runs in its own child process (`peers.py --worker ...`), so "peak RSS" is
that child's VmHWM (it includes the interpreter, NumPy and the imported library: the
`baseline` row is a child that only imports them). Times exclude interpreter start and imports.
GB/s = 1e9 input bytes per wall-clock second (each tool's own input: the CTF file or the CSV;
ratios are also given in values per second, which does not depend on the `|x ` prefix).

  .venv/bin/python bench/peers.py                # 32 MiB files, median of 3 for the fast tools
  .venv/bin/python bench/peers.py --mb 64 --reps 5
  .venv/bin/python bench/peers.py --no-cache-test --no-c

First, the default-settings table: a new user's code (`MinibatchSource(CTFDeserializer(f,
StreamDefs(features=StreamDef(field='features', shape=256))), max_sweeps=1)`, next_minibatch(4096)
to the end) on a `--mb-defaults` MiB file of `|features` + 256 floats a line, with `.asarray()`
and `.values`, + 4 MiB chunks, + the index cache (second open), randomize=False, pinned to one
core, a sparse file on two cores and on one, then polars / pyarrow / pandas (c engine, float32)
reading the same numbers space-separated, and the parser alone (build/bench parse_only, from
memory); printed as one table with the ratios:

  .venv/bin/python bench/peers.py --defaults-only --reps 3

pandas, pyarrow and polars are benchmark-only dependencies: `.venv/bin/pip install pandas pyarrow
polars` (the script installs them into its own interpreter's environment when missing).
"""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
MiB = 1 << 20
DIM = 100


# ============================================================================ child side

def _rss_kb():
    """Peak RSS of this process. VmHWM (per address space, reset by exec) rather than
    ru_maxrss, which Linux carries over from the parent's forked copy across exec (every child
    then reports at least the parent's RSS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _ctfio_source(path, **kw):
    from ctfio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
    return MinibatchSource(CTFDeserializer(path, StreamDefs(x=StreamDef(field="x", shape=DIM))),
                           **kw)


def _checksum(x):
    import numpy as np
    c = time.perf_counter()
    s = float(np.sum(x, dtype=np.float64))
    return {"checksum": s, "checksum_s": time.perf_counter() - c}


def w_baseline(a):
    import numpy  # noqa: F401

    import ctfio  # noqa: F401
    return {"seconds": 0.0, "values": 0, "checksum": 0.0}


def w_ctfio(a):
    import numpy as np

    import ctfio  # noqa: F401
    kw = dict(randomize=a.randomize, max_sweeps=1, num_threads=a.threads,
              chunk_size_in_bytes=a.chunk_mb * MiB, cache_index=a.cache)
    if a.randomize:
        kw["randomization_window_in_chunks"] = a.window
    t0 = time.perf_counter()
    src = _ctfio_source(a.file, **kw)
    t_open = time.perf_counter() - t0
    n, s, t_sum = 0, 0.0, 0.0
    while True:
        mb = src.next_minibatch(a.mb)
        if not mb:
            break
        for v in mb.values():
            x = v.values
            n += x.size
            c = time.perf_counter()
            s += float(np.sum(x, dtype=np.float64))
            t_sum += time.perf_counter() - c
    # The checksum is the consumer's work, not the reader's: the other tools sum after the
    # timed region, so it is taken out here too (about 6% of a 1-core run).
    secs = time.perf_counter() - t0 - t_sum
    src.close()
    return {"seconds": secs, "open_s": t_open, "values": n, "checksum": s, "checksum_s": t_sum}


def w_pandas(a):
    import numpy as np
    import pandas as pd
    t0 = time.perf_counter()
    df = pd.read_csv(a.file, header=None, dtype=np.float32, engine=a.engine)
    x = df.to_numpy()
    secs = time.perf_counter() - t0
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


def w_pyarrow(a):
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    pa.set_cpu_count(a.threads)
    ro = pcsv.ReadOptions(autogenerate_column_names=True, use_threads=a.threads > 1)
    co = pcsv.ConvertOptions(column_types={"f%d" % i: pa.float32() for i in range(DIM)})
    t0 = time.perf_counter()
    tbl = pcsv.read_csv(a.file, read_options=ro, convert_options=co)
    # to a (rows, DIM) NumPy array, as the others deliver
    x = np.column_stack([c.to_numpy() for c in tbl.columns])
    secs = time.perf_counter() - t0
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


def w_loadtxt(a):
    import numpy as np
    t0 = time.perf_counter()
    x = np.loadtxt(a.file, dtype=np.float32, delimiter=",")
    secs = time.perf_counter() - t0
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


def w_purepy(a):
    """The seed tutorial's way: split each line on '|', float() every value, then NumPy."""
    import numpy as np
    t0 = time.perf_counter()
    rows = {}
    with open(a.file) as f:
        for line in f:
            for part in line.split("|")[1:]:
                toks = part.split()
                if not toks:
                    continue
                rows.setdefault(toks[0], []).append([float(t) for t in toks[1:]])
    arrs = {k: np.array(v, dtype=np.float32) for k, v in rows.items()}
    secs = time.perf_counter() - t0
    x = arrs["x"]
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


def w_sweeps(a):
    """keep_data_in_memory: wall time of each sweep (max_sweeps=a.sweeps)."""
    import ctfio  # noqa: F401
    kw = dict(randomize=a.randomize, max_sweeps=a.sweeps, num_threads=a.threads,
              chunk_size_in_bytes=a.chunk_mb * MiB, keep_data_in_memory=a.keep)
    if a.randomize:
        kw["randomization_window_in_chunks"] = a.window
    src = _ctfio_source(a.file, **kw)
    times, t0, n = [], time.perf_counter(), 0
    while True:
        mb = src.next_minibatch(a.mb)
        if not mb:
            break
        v = next(iter(mb.values()))
        x = v.values
        n += x.size
        if v.end_of_sweep:
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1
    src.close()
    return {"seconds": sum(times), "sweeps": times, "values": n, "checksum": 0.0}


def w_open(a):
    """MinibatchSource creation (indexing or loading the index cache), nothing read."""
    import ctfio  # noqa: F401
    t0 = time.perf_counter()
    src = _ctfio_source(a.file, randomize=a.randomize, max_sweeps=1, num_threads=a.threads,
                        cache_index=a.cache, chunk_size_in_bytes=a.chunk_mb * MiB)
    secs = time.perf_counter() - t0
    st = src.stats()
    src.close()
    return {"seconds": secs, "values": 0, "checksum": 0.0,
            "stats": {k: st[k] for k in st if "cache" in k} if isinstance(st, dict) else None}


# ---------------------------------------------------------------- the default-settings table
# A new user's code on a `|features` + 256 floats file, and the dataframe readers on the same
# numbers (the file without its `|features ` prefixes, space-separated).

FEAT_DIM = 256


def w_defaults(a):
    """MinibatchSource with the defaults (only what the row names changed), next_minibatch(4096)
    to the end, `.asarray()` or `.values` of every minibatch. Open (indexing) included."""
    from ctfio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
    kw = {}
    if not a.randomize:
        kw["randomize"] = False
    if a.chunk_mb:
        kw["chunk_size_in_bytes"] = a.chunk_mb * MiB
    if a.cache:
        kw["cache_index"] = True
    if a.threads:
        kw["num_threads"] = a.threads
    sparse = a.engine == "sparse"

    def open_src():
        if sparse:
            defs = StreamDefs(src=StreamDef(field="src", shape=50000, is_sparse=True),
                              tgt=StreamDef(field="tgt", shape=50000, is_sparse=True))
        else:
            defs = StreamDefs(features=StreamDef(field="features", shape=FEAT_DIM))
        return MinibatchSource(CTFDeserializer(a.file, defs), max_sweeps=1, **kw)

    if a.cache:  # the row measures the second open: the first one writes the cache
        open_src().close()
    t0 = time.perf_counter()
    src = open_src()
    n = 0
    while True:
        mb = src.next_minibatch(4096)
        if not mb:
            break
        for d in mb.values():
            x = d.asarray() if a.access == "asarray" else d.values
            n += x.size if hasattr(x, "size") else x.nnz
    secs = time.perf_counter() - t0
    src.close()
    return {"seconds": secs, "values": n, "checksum": 0.0}


def w_polars(a):
    import polars as pl
    t0 = time.perf_counter()
    df = pl.read_csv(a.file, has_header=False, separator=" ",
                     schema={"c%d" % i: pl.Float32 for i in range(FEAT_DIM)})
    x = df.to_numpy()
    secs = time.perf_counter() - t0
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


def w_pyarrow_sp(a):
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    ro = pcsv.ReadOptions(autogenerate_column_names=True)
    po = pcsv.ParseOptions(delimiter=" ")
    co = pcsv.ConvertOptions(column_types={"f%d" % i: pa.float32() for i in range(FEAT_DIM)})
    t0 = time.perf_counter()
    tbl = pcsv.read_csv(a.file, read_options=ro, parse_options=po, convert_options=co)
    x = np.column_stack([c.to_numpy() for c in tbl.columns])
    secs = time.perf_counter() - t0
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


def w_pandas_sp(a):
    import numpy as np
    import pandas as pd
    t0 = time.perf_counter()
    df = pd.read_csv(a.file, header=None, sep=" ", dtype=np.float32, engine="c")
    x = df.to_numpy()
    secs = time.perf_counter() - t0
    return dict(seconds=secs, values=int(x.size), **_checksum(x))


WORKERS = {"baseline": w_baseline, "ctfio": w_ctfio, "pandas": w_pandas, "pyarrow": w_pyarrow,
           "loadtxt": w_loadtxt, "purepy": w_purepy, "sweeps": w_sweeps, "open": w_open,
           "defaults": w_defaults, "polars": w_polars, "pyarrow_sp": w_pyarrow_sp,
           "pandas_sp": w_pandas_sp}


def _thread_ticks():
    """CPU clock ticks of every thread of this process but the calling one."""
    me, total = threading.get_native_id(), 0
    for t in os.listdir("/proc/self/task"):
        if int(t) == me:
            continue
        try:
            with open("/proc/self/task/%s/stat" % t) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue    # the thread ended
        total += int(fields[11]) + int(fields[12])
    return total


def _settle(limit=1.0):
    """Waits (at most `limit` seconds) until the process's other threads are idle. NumPy's
    OpenBLAS threads spin on a core for about 0.1 s after the import (their idle timeout) before
    they sleep; measured inside that window, a 0.2 s sweep on two cores loses a third of one core
    to them (a profile shows blas_thread_server at ~20% of the samples), a cost a training
    process pays once, not per sweep. @return : the seconds waited."""
    t0 = time.perf_counter()
    last = _thread_ticks()
    while time.perf_counter() - t0 < limit:
        time.sleep(0.05)
        now = _thread_ticks()
        if now == last:
            break
        last = now
    return time.perf_counter() - t0


def worker_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--randomize", type=int, default=1)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--chunk-mb", type=int, default=4)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--engine", default="c")
    ap.add_argument("--keep", type=int, default=0)
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--cache", type=int, default=0)
    ap.add_argument("--cores", type=int, default=0, help="pin the process to the first N CPUs")
    ap.add_argument("--access", default="values")
    a = ap.parse_args(argv)
    if a.cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:a.cores])
    a.randomize, a.keep, a.cache = bool(a.randomize), bool(a.keep), bool(a.cache)
    # Warm-up on the first 20 lines of the same file (untimed in the result): first calls pay
    # one-time costs (lazy imports, first allocations: ~40-110 ms for the first MinibatchSource
    # in a process) that a training run pays once, not per file.
    import tempfile
    real = a.file
    with tempfile.TemporaryDirectory() as td:
        tiny = os.path.join(td, "tiny" + os.path.splitext(real)[1])
        with open(real) as f, open(tiny, "w") as g:
            for _, line in zip(range(20), f):
                g.write(line)
        a.file = tiny
        t0 = time.perf_counter()
        WORKERS[a.tool](a)
        warm = time.perf_counter() - t0
    a.file = real
    settled = _settle()
    c0 = time.process_time()
    r = WORKERS[a.tool](a)
    # all threads, less the checksum (a single-threaded sum, so its wall time is its CPU time)
    r["cpu_s"] = time.process_time() - c0 - r.get("checksum_s", 0.0)
    r["warmup_s"] = warm
    r["settle_s"] = settled
    r["maxrss_kb"] = _rss_kb()
    r["bytes"] = os.path.getsize(a.file)
    print("RESULT " + json.dumps(r))


# ============================================================================ parent side

def child(tool, path, **kw):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", tool, path]
    for k, v in kw.items():
        cmd += ["--" + k.replace("_", "-"), str(int(v) if isinstance(v, bool) else v)]
    # OpenBLAS threads spin after NumPy starts them and would count in the child's CPU time.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if p.returncode:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit("worker failed: %s" % " ".join(cmd))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit("no result from: %s" % " ".join(cmd))


def measure(tool, path, reps, **kw):
    runs = [child(tool, path, **kw) for _ in range(reps)]
    secs = statistics.median(r["seconds"] for r in runs)
    r = dict(runs[0])
    r["seconds"] = secs
    r["all_seconds"] = [x["seconds"] for x in runs]
    r["maxrss_kb"] = max(x["maxrss_kb"] for x in runs)
    r["cpu_s"] = statistics.median(x["cpu_s"] for x in runs)
    if r.get("open_s") is not None:
        r["open_s"] = statistics.median(x["open_s"] for x in runs)
    r["reps"] = reps
    print("  %-40s %8.3f s  %7.3f GB/s  %6.1f MiB  (%s)" % (
        tool + " " + " ".join("%s=%s" % kv for kv in kw.items()), secs,
        r["bytes"] / secs / 1e9 if secs else 0, r["maxrss_kb"] / 1024,
        ", ".join("%.3f" % s for s in r["all_seconds"])), file=sys.stderr)
    sys.stderr.flush()
    return r


def ensure_deps():
    try:
        import pandas  # noqa: F401
        import polars  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pandas", "pyarrow",
                        "polars"],
                       check=True)


def ctf_to_csv(src, dst, max_bytes=None):
    """The same numbers as plain CSV: each `|x v1 v2 ...` line becomes `v1,v2,...`."""
    if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src) and max_bytes is None:
        return
    n = 0
    with open(src) as f, open(dst + ".tmp", "w") as g:
        for line in f:
            assert line.startswith("|x ")
            g.write(line[3:].rstrip("\n").replace(" ", ",") + "\n")
            n += len(line)
            if max_bytes and n >= max_bytes:
                break
    os.replace(dst + ".tmp", dst)


def head_lines(src, dst, max_bytes):
    n = 0
    with open(src) as f, open(dst, "w") as g:
        for line in f:
            g.write(line)
            n += len(line)
            if n >= max_bytes:
                break


def c_bench(path, reps, rebuild=False):
    """strtof, the number kernel, strtof scan, parse-only and the C reader (build/bench, built
    by bench/run.py's build() when missing or with --rebuild)."""
    sys.path.insert(0, HERE)
    import run as runpy_mod  # bench/run.py
    if rebuild or not os.path.exists(runpy_mod.BENCH_BIN):
        runpy_mod.build()
    recs = []
    for only, extra in (("numbers", []), ("parse", ["--chunks", "4"]),
                        ("reader", ["--chunks", "4", "--threads", "0,1,2", "--window", "4"])):
        p = subprocess.run([runpy_mod.BENCH_BIN, "all", "dense", path, "--only", only, "--reps",
                            str(reps)]
                           + extra, cwd=ROOT, capture_output=True, text=True)
        if p.returncode:
            sys.stderr.write(p.stderr)
            raise SystemExit("build/bench failed")
        recs += [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return recs


def defaults_table(a):
    """The default-settings table: each row in its own child, the rows alternated `--reps` times
    (best run of each), so that a change in the machine's load hits every row alike."""
    gen = os.path.join(HERE, "gen.py")
    subprocess.run([sys.executable, gen, "--mb", str(a.mb_defaults), "--kinds", "features"],
                   check=True, cwd=ROOT)
    subprocess.run([sys.executable, gen, "--mb", str(a.sparse_mb), "--kinds", "sparse"],
                   check=True, cwd=ROOT)
    ctf = os.path.join(DATA, "features_%dmb.ctf" % a.mb_defaults)
    sparse = os.path.join(DATA, "sparse_%dmb.ctf" % a.sparse_mb)
    txt = os.path.join(DATA, "features_%dmb.txt" % a.mb_defaults)
    if not os.path.exists(txt) or os.path.getmtime(txt) < os.path.getmtime(ctf):
        with open(ctf, "rb") as f, open(txt + ".tmp", "wb") as g:
            for line in f:
                g.write(line[len(b"|features "):])
        os.replace(txt + ".tmp", txt)
    for p in (ctf, txt, sparse):  # warm the page cache
        with open(p, "rb") as f:
            while f.read(16 * MiB):
                pass
    d = dict(threads=0, chunk_mb=0, randomize=1, cache=0, access="values", cores=0, engine="c")
    rows = [
        ("def_asarray", "defaults, `mb[s].asarray()`", "defaults", ctf, dict(d, access="asarray")),
        ("def_values", "defaults, `mb[s].values`", "defaults", ctf, d),
        ("def_4mib", "defaults + `chunk_size_in_bytes=4 MiB`, `.values`", "defaults", ctf,
         dict(d, chunk_mb=4)),
        ("def_cache", "defaults + `cache_index=True` (second open), `.values`", "defaults", ctf,
         dict(d, cache=1)),
        ("seq_values", "`randomize=False`, `.values`", "defaults", ctf, dict(d, randomize=0)),
        ("seq_asarray", "`randomize=False`, `.asarray()`", "defaults", ctf,
         dict(d, randomize=0, access="asarray")),
        ("def_asarray_1c", "defaults, `.asarray()`, pinned to 1 core", "defaults", ctf,
         dict(d, access="asarray", cores=1)),
        ("sparse_2c", "sparse file (%d MiB), defaults, `.values`" % a.sparse_mb, "defaults",
         sparse, dict(d, engine="sparse")),
        ("sparse_1c", "sparse file, defaults, `.values`, pinned to 1 core", "defaults", sparse,
         dict(d, engine="sparse", cores=1)),
        ("polars", "polars.read_csv of the same numbers (space-separated, all cores)", "polars",
         txt, {}),
        ("pyarrow", "pyarrow.csv.read_csv (all cores)", "pyarrow_sp", txt, {}),
        ("pandas", "pandas.read_csv (c engine, float32)", "pandas_sp", txt, {}),
    ]
    best = {}
    for _ in range(a.reps):
        for key, _, tool, path, kw in rows:
            r = child(tool, path, **kw)
            gbps = r["bytes"] / r["seconds"] / 1e9
            print("  %-16s %.3f GB/s" % (key, gbps), file=sys.stderr)
            best[key] = max(best.get(key, 0.0), gbps)
    # The parser alone, from memory, on the same cores (build/bench's parse_only_2t).
    sys.path.insert(0, HERE)
    import run as runpy_mod  # bench/run.py
    runpy_mod.build()
    p = subprocess.run([runpy_mod.BENCH_BIN, "all", "features", ctf, "--only", "parse",
                        "--chunks", "32", "--reps", str(a.reps)],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec["bench"] in ("parse_only", "parse_only_2t"):
                best[rec["bench"]] = max(rec["bytes"] / s / 1e9 for s in rec["seconds"])
    out = ["Default settings (%s, %d cores, load %.1f; best of %d, rows alternated):" % (
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), os.getloadavg()[0],
        a.reps), "", "| case | GB/s |", "|---|---|"]
    for key, label, *_ in rows:
        out.append("| %s | %.2f |" % (label, best[key]))
    out.append("| parser alone, from memory, 32 MiB chunks, 1 thread / 2 threads | %.2f / %.2f |"
               % (best.get("parse_only", 0), best.get("parse_only_2t", 0)))
    ratio = lambda x, y: best[x] / best[y] if best.get(y) else float("nan")  # noqa: E731
    out += ["", "| ratio | measured | target |", "|---|---|---|",
            "| defaults randomized / `randomize=False` (`.values`) | %.2f | >= 0.9 |"
            % ratio("def_values", "seq_values"),
            "| ... (`.asarray()`) | %.2f | >= 0.9 |" % ratio("def_asarray", "seq_asarray"),
            "| `asarray()` / `.values`, defaults | %.2f | >= 0.95 |"
            % ratio("def_asarray", "def_values"),
            "| defaults `asarray()` / polars | %.2f | >= 4 |" % ratio("def_asarray", "polars"),
            "| defaults `asarray()` / pandas | %.2f | >= 6 |" % ratio("def_asarray", "pandas"),
            "| two cores / one core, dense | %.2f | >= 1.8 |"
            % ratio("def_asarray", "def_asarray_1c"),
            "| two cores / one core, sparse | %.2f | >= 1.8 |" % ratio("sparse_2c", "sparse_1c"),
            "| end to end (defaults `asarray()`) / parser alone on 2 threads | %.2f | >= 0.8 |"
            % ratio("def_asarray", "parse_only_2t")]
    print("\n".join(out))
    return best


def machine():
    info = {"model": platform.machine(), "cores": os.cpu_count()}
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        k, _, v = line.partition(":")
        if k.strip() == "Model name":
            info["model"] = v.strip()
        elif k.strip() == "CPU(s)":
            info["cores"] = int(v.strip())
    return info


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=32, help="size of the dense file in MiB (default 32)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each fast tool (median)")
    ap.add_argument("--slice-mb", type=int, default=0,
                    help="run numpy.loadtxt / the pure-Python parser on the first N MiB only "
                         "(scaled); "
                         "default 0 = the whole file (about 20 s a GiB for the pure-Python parser)")
    ap.add_argument("--no-c", action="store_true", help="skip build/bench")
    ap.add_argument("--rebuild", action="store_true", help="rebuild build/bench (make + cc) first")
    ap.add_argument("--no-cache-test", action="store_true")
    ap.add_argument("--cache-mb", type=int, default=1024, help="file size of the cache test")
    ap.add_argument("--json", default=os.path.join(DATA, "peers.json"))
    ap.add_argument("--mb-defaults", type=int, default=256,
                    help="size of the default-settings table's `|features` file in MiB")
    ap.add_argument("--sparse-mb", type=int, default=64, help="its sparse file's size in MiB")
    ap.add_argument("--defaults-only", action="store_true",
                    help="print the default-settings table and stop")
    ap.add_argument("--no-defaults", action="store_true", help="skip the default-settings table")
    a = ap.parse_args(argv)
    ensure_deps()
    if not a.no_defaults:
        defaults_table(a)
        if a.defaults_only:
            return 0
    cores = os.cpu_count()
    load0 = os.getloadavg()
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    subprocess.run([sys.executable, os.path.join(HERE, "gen.py"), "--mb", str(a.mb), "--kinds",
                    "dense"],
                   check=True, cwd=ROOT)
    ctf = os.path.join(DATA, "dense_%dmb.ctf" % a.mb)
    csv = os.path.join(DATA, "dense_%dmb.csv" % a.mb)
    ctf_to_csv(ctf, csv)
    if a.slice_mb:
        ctf_s = os.path.join(DATA, "dense_slice_%dmb.ctf" % a.slice_mb)
        csv_s = os.path.join(DATA, "dense_slice_%dmb.csv" % a.slice_mb)
        head_lines(ctf, ctf_s, a.slice_mb * MiB)
        ctf_to_csv(ctf_s, csv_s)
    else:
        ctf_s, csv_s = ctf, csv
    for p in (ctf, csv):  # warm the page cache
        with open(p, "rb") as f:
            while f.read(16 * MiB):
                pass

    R = a.reps
    res = {}
    print("measuring (file %s, %d bytes; csv %d bytes)" % (ctf, os.path.getsize(ctf),
                                                           os.path.getsize(csv)),
          file=sys.stderr)
    res["baseline"] = measure("baseline", ctf, 1)
    res["ctfio_rnd_1t"] = measure("ctfio", ctf, R, threads=1, randomize=True, window=4, chunk_mb=4)
    res["ctfio_rnd_%dt" % cores] = measure("ctfio", ctf, R, threads=cores, randomize=True, window=4,
                                           chunk_mb=4)
    res["ctfio_seq_1t"] = measure("ctfio", ctf, R, threads=1, randomize=False, chunk_mb=4)
    res["ctfio_seq_%dt" % cores] = measure("ctfio", ctf, R, threads=cores, randomize=False,
                                           chunk_mb=4)
    # Scaling across cores: the process pinned to 1 CPU (num_threads=0: no thread to switch to)
    # and to 2 CPUs (num_threads=2); the same work, so the wall-clock ratio is the speed-up.
    if cores >= 2:
        for rnd in (True, False):
            res["ctfio_%s_1core" % ("rnd" if rnd else "seq")] = measure(
                "ctfio", ctf, R, threads=0, randomize=rnd, window=4, chunk_mb=4, cores=1)
            res["ctfio_%s_2core" % ("rnd" if rnd else "seq")] = measure(
                "ctfio", ctf, R, threads=2, randomize=rnd, window=4, chunk_mb=4, cores=2)
        # The same with cacheIndex: a first open writes the index cache (not reported), the
        # measured runs load it instead of indexing (every later epoch or run of a training job).
        idx = ctf + ".ctfidx"
        measure("ctfio", ctf, 1, threads=0, randomize=False, chunk_mb=4, cache=True)
        for rnd in (True, False):
            for c in (1, 2):
                res["ctfio_%s_%dcore_cached" % ("rnd" if rnd else "seq", c)] = measure(
                    "ctfio", ctf, R, threads=0 if c == 1 else 2, randomize=rnd, window=4,
                                                                                       chunk_mb=4,
                    cores=c, cache=True)
        if os.path.exists(idx):
            os.remove(idx)
    res["pandas_c"] = measure("pandas", csv, R, engine="c")
    res["pandas_pyarrow"] = measure("pandas", csv, R, engine="pyarrow")
    res["pyarrow_1t"] = measure("pyarrow", csv, R, threads=1)
    res["pyarrow_%dt" % cores] = measure("pyarrow", csv, R, threads=cores)
    res["loadtxt_slice"] = measure("loadtxt", csv_s, 1)
    res["purepy_slice"] = measure("purepy", ctf_s, 1)

    # keepDataInMemory: sweep 1 vs sweeps 2-3
    for keep in (False, True):
        for rnd in (False, True):
            key = "sweeps_keep%d_rnd%d" % (keep, rnd)
            res[key] = measure("sweeps", ctf, 1, keep=keep, randomize=rnd, window=4, chunk_mb=4,
                               sweeps=3,
                               threads=1)
            print("    sweeps:", ", ".join("%.3f" % s for s in res[key]["sweeps"]), file=sys.stderr)

    # C level
    crecs = [] if a.no_c else c_bench(ctf, R, a.rebuild)

    # startup from the index cache
    cache = None
    if not a.no_cache_test:
        cache = cache_test(a.cache_mb)
    load1 = os.getloadavg()
    if a.slice_mb:
        for p in (ctf_s, csv_s):
            os.remove(p)
    meta = {"date": date, "machine": machine(), "load": [round(load0[0], 2), round(load1[0], 2)],
            "command": "python " + " ".join(["bench/peers.py"] + argv), "mb": a.mb,
            "slice_mb": a.slice_mb, "ctf_bytes": os.path.getsize(ctf),
            "csv_bytes": os.path.getsize(csv),
            "cores": cores, "python": platform.python_version(), "reps": R}
    try:
        import numpy
        import pandas
        import pyarrow
        meta["versions"] = {"pandas": pandas.__version__, "pyarrow": pyarrow.__version__,
                            "numpy": numpy.__version__}
    except ImportError:
        pass
    with open(a.json, "w") as f:
        json.dump({"meta": meta, "python": res, "c": crecs, "cache": cache}, f, indent=1)
    print(report(meta, res, crecs, cache))


def cache_test(mb):
    src256 = os.path.join(DATA, "dense_256mb.ctf")
    big = os.path.join(DATA, "dense_cache_%dmb.ctf" % mb)
    t = time.time()
    if os.path.exists(src256) and mb % 256 == 0:
        with open(big, "wb") as g:
            for _ in range(mb // 256):
                with open(src256, "rb") as f:
                    while True:
                        b = f.read(16 * MiB)
                        if not b:
                            break
                        g.write(b)
    else:
        subprocess.run([sys.executable, os.path.join(HERE, "gen.py"), "--big", "--big-mb", str(mb),
                        "--kinds", ""], check=True, cwd=ROOT)
        os.replace(os.path.join(DATA, "dense_%dmb.ctf" % mb), big)
    print("  cache test file %s: %d bytes (%.1f s)" % (big, os.path.getsize(big), time.time() - t),
          file=sys.stderr)
    idx = big + ".ctfidx"
    out = {"bytes": os.path.getsize(big)}
    try:
        if os.path.exists(idx):
            os.remove(idx)
        for rnd in (0, 1):
            out["no_cache_rnd%d" % rnd] = measure("open", big, 3, cache=False, threads=0,
                                                  randomize=rnd)
        out["first_open_writes_cache"] = measure("open", big, 1, cache=True, threads=0, randomize=0)
        out["cache_bytes"] = os.path.getsize(idx) if os.path.exists(idx) else None
        for rnd in (0, 1):
            out["second_open_rnd%d" % rnd] = measure("open", big, 5, cache=True, threads=0,
                                                     randomize=rnd)
    finally:
        for p in (big, idx):
            if os.path.exists(p):
                os.remove(p)
    return out


def report(meta, res, crecs, cache):
    out = []
    w = out.append
    cores = meta["cores"]
    ref = res["ctfio_rnd_%dt" % cores]
    ref1 = res["ctfio_rnd_1t"]
    m = meta["machine"]
    w("Date: %s. Command: `%s`. Machine: %s, %s CPUs; Python %s, %s. Load average (1 min) at start "
      "/ end: "
      "%s / %s. Files: CTF %d bytes, CSV %d bytes (same numbers). GB/s = 1e9 input bytes per "
      "wall-clock "
      "second; warm page cache." % (
          meta["date"], meta["command"], m["model"], m["cores"], meta["python"],
          ", ".join("%s %s" % kv for kv in meta.get("versions", {}).items()),
          meta["load"][0], meta["load"][1], meta["ctf_bytes"], meta["csv_bytes"]))
    w("")

    def gbps(r):
        return r["bytes"] / r["seconds"] / 1e9

    def mvals(r):
        return r["values"] / r["seconds"] / 1e6

    rows = [
        ("ctfio Python, randomize (window 4 × 4 MiB chunks), 1 thread", "ctfio_rnd_1t", "CTF"),
        ("ctfio Python, randomize (window 4 × 4 MiB chunks), %d threads" % cores, "ctfio_rnd_%dt"
         % cores, "CTF"),
        ("ctfio Python, randomize=False, 1 thread", "ctfio_seq_1t", "CTF"),
        ("ctfio Python, randomize=False, %d threads" % cores, "ctfio_seq_%dt" % cores, "CTF"),
        ("pandas.read_csv(engine='c', dtype=float32)", "pandas_c", "CSV"),
        ("pandas.read_csv(engine='pyarrow', dtype=float32)", "pandas_pyarrow", "CSV"),
        ("pyarrow.csv.read_csv (float32), 1 thread", "pyarrow_1t", "CSV"),
        ("pyarrow.csv.read_csv (float32), %d threads" % cores, "pyarrow_%dt" % cores, "CSV"),
        ("numpy.loadtxt (float32)" + (" — %d MiB slice, scaled"
                                      % meta["slice_mb"] if meta["slice_mb"] else ""),
         "loadtxt_slice", "CSV"),
        ("pure-Python CTF parser (split on '|', float(), np.array)" +
         (" — %d MiB slice, scaled" % meta["slice_mb"] if meta["slice_mb"] else ""), "purepy_slice",
         "CTF"),
    ]
    w("| tool | input | runs | seconds | GB/s (input) | CPU-s | GB/s per CPU-s | M values/s | "
      "**ctfio (%d thr) ÷ tool** (values/s) | ctfio (1 thr) ÷ tool | peak RSS |" % cores)
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, key, inp in rows:
        r = res[key]
        w("| %s | %s %.1f MiB | %s | %.3f | %.3f | %.3f | %.3f | %.1f | %s | %s | %.0f MiB |" % (
            label, inp, r["bytes"] / MiB, "median of %d" % r["reps"] if r["reps"] > 1 else "1",
            r["seconds"], gbps(r), r["cpu_s"], r["bytes"] / r["cpu_s"] / 1e9, mvals(r),
            "%.2f×" % (mvals(ref) / mvals(r)),
            "%.2f×" % (mvals(ref1) / mvals(r)), r["maxrss_kb"] / 1024))
    w("")
    if "ctfio_rnd_1core" in res:
        def _rd(r):
            return r["seconds"] - (r.get("open_s") or 0.0)
        w("Scaling across cores (wall clock, the process pinned with sched_setaffinity; 1 core "
          "runs "
          "num_threads=0, 2 cores num_threads=2): " + "; ".join(
              "%s %.3f s on 1 core, %.3f s on 2 cores: **%.2f×** (the read loop alone, without "
              "MinibatchSource creation, i.e. the serial indexing: %.3f / %.3f s, **%.2f×**)" % (
                  "randomized (window 4)" if k == "rnd" else "in order", res["ctfio_%s_1core"
                                                                             % k]["seconds"],
                  res["ctfio_%s_2core" % k]["seconds"],
                  res["ctfio_%s_1core" % k]["seconds"] / res["ctfio_%s_2core" % k]["seconds"],
                  _rd(res["ctfio_%s_1core" % k]), _rd(res["ctfio_%s_2core" % k]),
                  _rd(res["ctfio_%s_1core" % k]) / _rd(res["ctfio_%s_2core" % k]))
              for k in ("rnd", "seq")) + ".")
        w("")
    if "ctfio_rnd_1core_cached" in res:
        w("With the index cache (cacheIndex=True, the cache written by an earlier open; what every "
          "later epoch or run opens): " + "; ".join(
              "%s %.3f GB/s on 1 core, %.3f GB/s on 2 cores: **%.2f×**" % (
                  "randomized (window 4)" if k == "rnd" else "in order",
                  gbps(res["ctfio_%s_1core_cached" % k]), gbps(res["ctfio_%s_2core_cached" % k]),
                  res["ctfio_%s_1core_cached" % k]["seconds"] / res["ctfio_%s_2core_cached"
                                                                    % k]["seconds"])
              for k in ("rnd", "seq")) + ".")
        w("")
    w("ctfio rows include MinibatchSource creation (indexing the file): median %s s." % ", ".join(
        "%s %.4f" % (k, res[k]["open_s"]) for k in res if res[k].get("open_s") is not None))
    w("Baseline child (Python + NumPy + ctfio imported, nothing read): peak RSS %.0f MiB." %
      (res["baseline"]["maxrss_kb"] / 1024))
    # checksums
    sums = {k: res[k]["checksum"] / res[k]["values"]
            for k in res if res[k].get("values") and res[k]["checksum"]}
    w("Mean value per tool (same numbers → same mean): " +
      ", ".join("%s %.6f" % (k, v) for k, v in sums.items()) + ".")
    w("")
    if crecs:
        by = {}
        for r in crecs:
            by.setdefault((r["bench"], r.get("threads"), r.get("randomize")), r)
        w("C level, same CTF file (`build/bench`, median of %s; GB/s wall-clock and per "
          "CPU-second):" % meta.get("reps", "3"))
        w("")
        w("| measurement | GB/s | GB/s per CPU-s | M numbers/s |")
        w("|---|---|---|---|")
        for name, key in (("strtof over every number (offsets found beforehand)", ("strtof", None,
                                                                                   None)),
                          ("ctf__parse_float kernel (same offsets)", ("parse_float", None, None)),
                          ("naive strtof scan (find + strtof)", ("strtof_scan", None, None)),
                          ("ctfio parse-only, 4 MiB chunks, 1 thread", ("parse_only", 1, None)),
                          ("ctfio C reader, randomize=False, 0 threads", ("reader", 0, False)),
                          ("ctfio C reader, randomize=False, 1 thread", ("reader", 1, False)),
                          ("ctfio C reader, randomize=False, 2 threads", ("reader", 2, False)),
                          ("ctfio C reader, window 4, 0 threads", ("reader", 0, True)),
                          ("ctfio C reader, window 4, 1 thread", ("reader", 1, True)),
                          ("ctfio C reader, window 4, 2 threads", ("reader", 2, True))):
            r = by.get(key)
            if not r:
                continue
            mnum = "%.1f" % r["mnumbers_per_s"] if "mnumbers_per_s" in r else "—"
            w("| %s | %.3f | %.3f | %s |" % (name, r["gbps"], r.get("cpu_gbps", r["gbps"]), mnum))
        w("")
    w("keepDataInMemory (1 thread, 4 MiB chunks, 3 sweeps; seconds per sweep):")
    w("")
    w("| keep_data_in_memory | randomize | sweep 1 | sweep 2 | sweep 3 | sweep 1 ÷ sweep 2+ | peak "
      "RSS |")
    w("|---|---|---|---|---|---|---|")
    for keep in (False, True):
        for rnd in (False, True):
            r = res["sweeps_keep%d_rnd%d" % (keep, rnd)]
            s = r["sweeps"] + [None] * 3
            later = [x for x in r["sweeps"][1:] if x]
            w("| %s | %s | %s | %s | %s | %s | %.0f MiB |" % (
                keep, "window 4" if rnd else "no",
                *("%.3f" % x if x is not None else "—" for x in s[:3]),
                "%.1f×" % (s[0] / statistics.mean(later)) if later else "—", r["maxrss_kb"] / 1024))
    w("")
    if cache:
        w("Startup (MinibatchSource creation = ctf_reader_open, num_threads=0, nothing read; "
          "first-call costs of the process excluded by the warm-up) on a %.0f MiB dense file, warm "
          "page cache:" %
          (cache["bytes"] / MiB))
        w("")
        w("| open | runs | seconds (median) | all |")
        w("|---|---|---|---|")
        for name, k in (("cache_index=False (index by scanning), randomize=False", "no_cache_rnd0"),
                        ("cache_index=False (index by scanning), randomize=True (default window)",
                         "no_cache_rnd1"),
                        ("cache_index=True, first open (scan + write cache), randomize=False",
                         "first_open_writes_cache"),
                        ("**cache_index=True, second open (load cache), randomize=False**",
                         "second_open_rnd0"),
                        ("**cache_index=True, second open (load cache), randomize=True (default "
                         "window)**", "second_open_rnd1")):
            r = cache[k]
            runs = ", ".join("%.4f" % x for x in r["all_seconds"])
            w("| %s | %d | %.4f | %s |" % (name, r["reps"], r["seconds"], runs))
        w("")
        w("Cache file: %s bytes." % cache.get("cache_bytes"))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
