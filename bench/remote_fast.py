"""Remote data from a server that outruns the parser: nginx (Debian's package; benchmark only,
not part of make test) on 127.0.0.1 serving the shards with range requests and ETags, read as
http:// URLs, against the same shards on local disk, in one run: a randomized sweep with a cold
index cache (every object indexed over the network), with a warm one, and local; each sweep in
a child process of its own, which reports its rows/s and its peak RSS.

  apt-get install nginx-light    # once
  .venv/bin/python bench/remote_fast.py [--rows 40000] [--dim 64] [--shards 8] [--repeat 3]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=40000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
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
        for name, r in best.items():
            res[name] = {"rows_per_s": round(a.rows / r["secs"]), "requests": r["requests"],
                         "peak_rss_MB": round(r["rss_kb"] / 1024, 1)}
        print(json.dumps(res))
        loc = res["local"]
        print("| read | rows/s | ÷ local | requests | peak RSS MB | RSS ÷ local |")
        print("|---|---|---|---|---|---|")
        for name in ("local", "cold", "warm"):
            r = res[name]
            print("| %s | %d | %.2f | %d | %.1f | %.2f |" % (
                name, r["rows_per_s"], r["rows_per_s"] / loc["rows_per_s"], r["requests"],
                r["peak_rss_MB"], r["peak_rss_MB"] / loc["peak_rss_MB"]))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
