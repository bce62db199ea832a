"""Remote data from a server that outruns the parser: nginx (Debian's package; benchmark only,
not part of make test) on 127.0.0.1 serving the shards with range requests and ETags, read as
http:// URLs, against the same shards on local disk, in one run: a randomized sweep with a cold
index cache (every object indexed over the network), with a warm one, and local; each sweep in
a child process of its own, which reports its rows/s and its peak RSS.

  apt-get install nginx-light    # once
  .venv/bin/python bench/remote_fast.py [--rows 40000] [--dim 64] [--shards 8] [--repeat 3]
      [--mosaic-venv build/bench-mosaic]

With --mosaic-venv, Mosaic Streaming reads the same rows too: written as MDS shards (no
compression) beside the CTF shards on the same nginx, read through its S3 downloader
(path-style, signatures ignored by nginx) into an empty local cache (a cold epoch), shuffled,
batches of 1,024 from a DataLoader with 0 workers. mosaicml-streaming is installed into that
separate venv (pip install mosaicml-streaming) when it lacks it, never into .venv.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

from remote import write_shards  # noqa: E402
from s3_server import free_port  # noqa: E402

NGINX_CONF = """
worker_processes 2;
error_log %(d)s/error.log;
pid %(d)s/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    client_body_temp_path %(d)s/tmp;
    proxy_temp_path %(d)s/tmp;
    fastcgi_temp_path %(d)s/tmp;
    uwsgi_temp_path %(d)s/tmp;
    scgi_temp_path %(d)s/tmp;
    server {
        listen 127.0.0.1:%(port)d;
        root %(d)s/www;
    }
}
"""

CHILD = r"""
import json, resource, sys, time
import ctfio
files, dim, cache = json.loads(sys.argv[1])
kw = dict(cache_dir=cache) if cache else {}
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
secs = time.perf_counter() - t0
io = src._reader.io_counters() if cache else {"requests": 0}
print(json.dumps(dict(rows=rows, secs=secs, requests=io["requests"],
                      rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
"""


def child(files, dim, cache):
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps([files, dim, cache])],
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout)


MOSAIC = r"""
import json, os, sys, time
import numpy as np
from streaming import MDSWriter, StreamingDataset
from torch.utils.data import DataLoader
mode, ctf_dir, mds_dir, cache, dim = sys.argv[1:6]
if mode == "write":
    with MDSWriter(out=mds_dir, columns={"x": "ndarray:float32:%s" % dim, "y": "int"},
                   size_limit=1 << 21) as w:
        for name in sorted(os.listdir(ctf_dir)):
            for line in open(os.path.join(ctf_dir, name)):
                _, xs, ys = line.split("|")
                w.write({"x": np.array(xs.split()[1:], dtype=np.float32),
                         "y": int(ys.split()[1].split(":")[0])})
    sys.exit(0)
t0 = time.perf_counter()
ds = StreamingDataset(remote=mds_dir, local=cache, shuffle=True, batch_size=1024)
rows = 0
for b in DataLoader(ds, batch_size=1024, num_workers=0):
    rows += len(b["y"])
print(json.dumps(dict(rows=rows, secs=time.perf_counter() - t0)))
"""


def mosaic_python(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if subprocess.run([py, "-c", "import streaming"], capture_output=True).returncode:
        subprocess.run([py, "-m", "pip", "install", "-q", "mosaicml-streaming"], check=True)
    return py


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=40000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mosaic-venv")
    a = ap.parse_args()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    tmp = tempfile.mkdtemp()
    os.chmod(tmp, 0o755)  # nginx's workers run as another user
    www = os.path.join(tmp, "www", "d")
    os.makedirs(www)
    os.makedirs(os.path.join(tmp, "tmp"))
    paths = write_shards(www, a.rows, a.dim, a.shards)
    total = sum(os.path.getsize(p) for p in paths)
    port = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF % dict(d=tmp, port=port))
    srv = subprocess.Popen([nginx, "-c", conf, "-p", tmp, "-g", "daemon off;"])
    try:
        import http.client
        for _ in range(100):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/d/part-00000.ctf")
                r = c.getresponse()
                r.read()
                break
            except OSError:
                time.sleep(0.05)
        t0 = time.perf_counter()
        c.request("GET", "/d/part-00000.ctf")
        got = len(c.getresponse().read())
        get_mbs = got / (time.perf_counter() - t0) / 1e6
        urls = ["http://127.0.0.1:%d/d/%s" % (port, os.path.basename(p)) for p in paths]
        cache = os.path.join(tmp, "cache")
        res = {"rows": a.rows, "bytes": total, "one_get_MBps": round(get_mbs, 1)}
        best = {}
        # Interleaved, so that the machine's load falls on each kind of read alike.
        for _ in range(a.repeat):
            for name, files in (("local", paths), ("cold", urls), ("warm", urls)):
                if name == "cold":
                    shutil.rmtree(cache, ignore_errors=True)
                r = child(files, a.dim, cache if name != "local" else None)
                assert r["rows"] == a.rows, r
                if name not in best or r["secs"] < best[name]["secs"]:
                    best[name] = r
        if a.mosaic_venv:
            py = mosaic_python(a.mosaic_venv)
            mds = os.path.join(tmp, "www", "bench", "mds")
            subprocess.run([py, "-c", MOSAIC, "write", www, mds, "-", str(a.dim)], check=True)
            conf = os.path.join(tmp, "aws.conf")
            with open(conf, "w") as f:
                f.write("[default]\ns3 =\n    addressing_style = path\n")
            env = dict(os.environ, S3_ENDPOINT_URL="http://127.0.0.1:%d" % port,
                       AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x",
                       AWS_CONFIG_FILE=conf, AWS_DEFAULT_REGION="us-east-1")
            for i in range(a.repeat):
                mcache = os.path.join(tmp, "mosaic-cache-%d" % i)
                p = subprocess.run([py, "-c", MOSAIC, "read", "-", "s3://bench/mds", mcache,
                                    str(a.dim)], env=env, capture_output=True, text=True,
                                   timeout=600)
                if p.returncode:
                    raise SystemExit(p.stderr[-3000:])
                r = json.loads(p.stdout.strip().splitlines()[-1])
                assert r["rows"] == a.rows, r
                r["requests"], r["rss_kb"] = 0, 0
                if "mosaic" not in best or r["secs"] < best["mosaic"]["secs"]:
                    best["mosaic"] = r
        for name, r in best.items():
            res[name] = {"rows_per_s": round(a.rows / r["secs"]), "requests": r["requests"],
                         "peak_rss_MB": round(r["rss_kb"] / 1024, 1)}
        print(json.dumps(res))
        loc = res["local"]
        print("| read | rows/s | ÷ local | requests | peak RSS MB | RSS ÷ local |")
        print("|---|---|---|---|---|---|")
        for name in ("local", "cold", "warm", "mosaic"):
            r = res.get(name, {})
            if name not in res:
                continue
            rss = ("%.1f | %.2f" % (r["peak_rss_MB"], r["peak_rss_MB"] / loc["peak_rss_MB"])
                   if r["peak_rss_MB"] else "- | -")
            print("| %s | %d | %.2f | %d | %s |" % (
                name, r["rows_per_s"], r["rows_per_s"] / loc["rows_per_s"], r["requests"], rss))
        if "mosaic" in res:
            print("ctfio cold ÷ Mosaic Streaming cold: %.1f" % (
                res["cold"]["rows_per_s"] / res["mosaic"]["rows_per_s"]))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
