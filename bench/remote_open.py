"""Opening a corpus of many small objects on S3 (signed requests to a server on 127.0.0.1: moto's
server mode in a process of its own, or with --server rgw Ceph's radosgw on a one-OSD cluster
that bench/rgw.sh starts) through one pattern: the cold open (every object indexed over the
network, index caches written) and the warm open (valid index caches: the listing, then one
cache file per object), with the requests each one sent. Prints one JSON line and a Markdown
table.

  .venv/bin/python bench/remote_open.py [--objects 10000] [--repeat 3] [--server moto|rgw]
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from remote import Remote  # noqa: E402

import ctfio  # noqa: E402

STREAMS = dict(x=ctfio.StreamDef(shape=2))


class Rgw:
    """radosgw on a throwaway cluster (bench/rgw.sh); options() and client as Remote's."""

    def __init__(self, tmp, mon_port=16789, port=17480):
        import boto3
        self.dir = os.path.join(tmp, "ceph")
        self.key, self.secret = "BENCHKEY", "BENCHSECRET"
        subprocess.run([os.path.join(HERE, "rgw.sh"), self.dir, str(mon_port), str(port),
                        self.key, self.secret], check=True)
        self.endpoint = "http://127.0.0.1:%d" % port
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def options(self):
        return dict(endpoint=self.endpoint, key=self.key, secret=self.secret)

    def stop(self):
        run = os.path.join(self.dir, "run")
        for name in ("client.rgw.pid", "osd.0.pid", "mon.a.pid"):
            try:
                with open(os.path.join(run, name)) as f:
                    os.kill(int(f.read()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def open_corpus(url, s3, cache):
    t0 = time.perf_counter()
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(url, STREAMS), max_sweeps=1,
                                storage_options=s3.options(), cache_dir=cache)
    secs = time.perf_counter() - t0
    return src, secs, src._reader.io_counters()["requests"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--server", choices=("moto", "rgw"), default="moto")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    s3 = Rgw(tmp) if a.server == "rgw" else Remote()
    try:
        s3.client.create_bucket(Bucket="many")

        def put(i):
            s3.client.put_object(Bucket="many", Key="d/part-%05d.ctf" % i,
                                 Body=("%d |x %d %d\n" % (i, i, i + 1)).encode())

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(put, range(a.objects)))
        url = "s3://many/d/part-*.ctf"
        # The server's own share of a warm open: the same listing by boto3.
        listing = None
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket="many",
                                                                        Prefix="d/part-")
            assert sum(len(p.get("Contents", [])) for p in pages) == a.objects
            secs = time.perf_counter() - t0
            listing = secs if listing is None else min(listing, secs)
        cache = os.path.join(tmp, "cache")
        src, cold, cold_req = open_corpus(url, s3, cache)
        assert len(src.files) == a.objects
        del src
        warm, warm_req = None, None
        for _ in range(a.repeat):
            src, secs, warm_req = open_corpus(url, s3, cache)
            assert len(src.files) == a.objects and src._reader.index_info()["from_cache"]
            del src
            warm = secs if warm is None else min(warm, secs)
        # ctfio's own per-object work without a server: the same files local, caches valid.
        d = os.path.join(tmp, "local")
        os.mkdir(d)
        for i in range(a.objects):
            with open(os.path.join(d, "part-%05d.ctf" % i), "w") as f:
                f.write("%d |x %d %d\n" % (i, i, i + 1))
        local = None
        for r in range(a.repeat + 1):
            t0 = time.perf_counter()
            src = ctfio.MinibatchSource(ctfio.CTFDeserializer(os.path.join(d, "part-*.ctf"),
                                                              STREAMS),
                                        max_sweeps=1, cache_index=True)
            secs = time.perf_counter() - t0
            del src
            if r:
                local = secs if local is None else min(local, secs)
        res = {"server": a.server, "objects": a.objects, "cold_s": round(cold, 2),
               "cold_requests": cold_req, "warm_s": round(warm, 3), "warm_requests": warm_req,
               "listing_s": round(listing, 3), "local_warm_s": round(local, 3)}
        print(json.dumps(res))
        print("| open of %d objects | seconds | requests |\n|---|---|---|" % a.objects)
        print("| cold index caches | %.2f | %d |" % (cold, cold_req))
        print("| warm index caches (best of %d) | %.3f | %d |" % (a.repeat, warm, warm_req))
        print("| the listing alone (boto3, best of %d) | %.3f | %d |"
              % (a.repeat, listing, warm_req))
        print("| the same files local, warm index caches (best of %d) | %.3f | 0 |"
              % (a.repeat, local))
    finally:
        s3.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
