"""Remote data against local files, one run: a randomized sweep over a corpus read from an S3
server on 127.0.0.1 (moto's server mode, signed requests) divided by the same sweep over the
same files on local disk, with a cold index cache (empty cache directory: every object indexed
over the network) and a warm one. Prints one JSON line and a Markdown table.

  .venv/bin/python bench/remote.py [--rows 20000] [--dim 64] [--shards 8] [--repeat 3]

The server runs in a process of its own (so that it does not share the reader's interpreter
lock). moto serves from Python (werkzeug), so it, not ctfio, bounds the remote rates here; the
one-GET figure says how fast it hands out bytes.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import ctfio  # noqa: E402

SERVER = r"""
import json, sys, time
sys.path.insert(0, %r)
from s3_server import S3
s3 = S3()
print(json.dumps(dict(port=s3.port, key=s3.key, secret=s3.secret)), flush=True)
sys.stdin.read()
"""


class Remote:
    """The S3 server in a child process; options() and client as s3_server.S3's."""

    def __init__(self):
        import boto3
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER % os.path.join(
            HERE, "..", "tests", "python")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        info = json.loads(self.proc.stdout.readline())
        self.endpoint = "http://127.0.0.1:%d" % info["port"]
        self.key, self.secret = info["key"], info["secret"]
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def options(self):
        return dict(endpoint=self.endpoint, key=self.key, secret=self.secret)

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def write_shards(d, rows, dim, shards):
    rng = random.Random(1)
    paths = []
    for s in range(shards):
        p = os.path.join(d, "part-%05d.ctf" % s)
        with open(p, "w") as f:
            for i in range(s * rows // shards, (s + 1) * rows // shards):
                f.write("%d |x %s |y %d:1\n" % (
                    i, " ".join("%.4f" % rng.random() for _ in range(dim)), rng.randrange(10)))
        paths.append(p)
    return paths


def sweep(files, dim, **kw):
    t0 = time.perf_counter()
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(files, dict(
        x=ctfio.StreamDef(shape=dim), y=ctfio.StreamDef(shape=10, is_sparse=True))),
        max_sweeps=1, chunk_size_in_bytes=1 << 20, randomization_window_in_chunks=8, **kw)
    rows = 0
    while True:
        mb = src.next_minibatch(1024)
        if not mb:
            break
        rows += mb[src.streams.x].num_sequences
    return rows, time.perf_counter() - t0, src._reader.io_counters()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    s3 = Remote()
    try:
        paths = write_shards(tmp, a.rows, a.dim, a.shards)
        s3.client.create_bucket(Bucket="bench")
        total = 0
        for p in paths:
            with open(p, "rb") as f:
                body = f.read()
            total += len(body)
            s3.client.put_object(Bucket="bench", Key="d/" + os.path.basename(p), Body=body)
        url = "s3://bench/d/part-*.ctf"
        t0 = time.perf_counter()
        s3.client.get_object(Bucket="bench", Key="d/part-00000.ctf")["Body"].read()
        with open(paths[0], "rb") as f:
            get_mbs = len(f.read()) / (time.perf_counter() - t0) / 1e6
        res = {"rows": a.rows, "bytes": total, "one_get_MBps": round(get_mbs, 1)}
        for name, files, kw in (("local", paths, {}), ("cold", url, "cold"),
                                ("warm", url, "warm")):
            best = None
            for _ in range(a.repeat):
                opts = {}
                if kw:
                    cache = os.path.join(tmp, "cache")
                    if kw == "cold":
                        shutil.rmtree(cache, ignore_errors=True)
                    opts = dict(storage_options=s3.options(), cache_dir=cache)
                rows, secs, io = sweep(files, a.dim, **opts)
                assert rows == a.rows
                if best is None or secs < best[0]:
                    best = (secs, io)
            res[name] = {"rows_per_s": round(a.rows / best[0]), "seconds": round(best[0], 3),
                         "requests": best[1]["requests"]}
        print(json.dumps(res))
        loc = res["local"]["rows_per_s"]
        print("| read | rows/s | ÷ local | requests |\n|---|---|---|---|")
        for name in ("local", "cold", "warm"):
            r = res[name]
            print("| %s | %d | %.2f | %d |" % (name, r["rows_per_s"], r["rows_per_s"] / loc,
                                               r["requests"]))
    finally:
        s3.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
