#!/usr/bin/env python3
"""bench/gen.py -- deterministic CTF data files for the benchmarks (bench/run.py).

Four kinds, each `--mb` MiB (default 256; `--quick`: 32), in bench/data/ (git-ignored):

  dense   line mode, one dense stream: |x v1 ... v100     (values: %.4g of N(0,1))
  mnist   line mode, MNIST-like:       |labels <one-hot 10> |features <784 ints 0-255, ~80% zeros>
  sparse  line mode, DSSM-like:        |src i:v ... |tgt i:v ...   (dim 50000, 20-40 entries each,
                                       sorted indices, small integer counts)
  features (only when named in --kinds; bench/peers.py --defaults writes it)
          line mode, one dense stream of 256: |features v1 ... v256   (values as dense)
  seq     id mode, sequences of 5-50 lines: ID |x <20 x %.4g> and, on the first line only,
                                       |y i:1 (sparse label, dim 1000)

`--big` also writes a >= 1 GiB dense file (same format as `dense`, `--big-mb`, default 1024) for
the peak-RSS test; it is never written unless asked.

Determinism: every file comes from random.Random(seed) with a fixed per-kind seed, so the same
command gives byte-identical files (the size only decides where the file stops). To keep Python
fast, values are drawn from a pool of pre-formatted numbers (65536 distinct gaussians per dense
kind) rather than formatted one by one; that keeps the lengths and digit patterns realistic.

Usage: python3 bench/gen.py [--quick | --mb N] [--kinds dense,mnist,sparse,seq] [--big]
                            [--big-mb N] [--out DIR] [--force]
Prints one line per file: its path and size. Files that exist with the expected size are kept.
"""
import argparse
import os
import random
import sys
import time

KINDS = ("dense", "mnist", "sparse", "seq")
SEEDS = {"features": 1006, "dense": 1001, "mnist": 1002, "sparse": 1003, "seq": 1004, "big": 1005}
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "data")
MiB = 1 << 20


def gauss_pool(rng, n=65536):
    out = []
    for _ in range(n):
        s = "%.4g" % rng.gauss(0.0, 1.0)
        out.append("0" if s == "-0" else s)
    return out


def gen_dense(rng, dim=100):
    pool = gauss_pool(rng)
    choices = rng.choices
    while True:
        yield "|x " + " ".join(choices(pool, k=dim)) + "\n"


def gen_features(rng, dim=256):
    """The default-settings benchmark's file: `|features` + 256 floats a line."""
    pool = gauss_pool(rng)
    choices = rng.choices
    while True:
        yield "|features " + " ".join(choices(pool, k=dim)) + "\n"


def gen_mnist(rng):
    # ~80% zeros; the nonzero pixels lean towards the saturated end like real MNIST strokes.
    pool = ["0"] * 800
    pool += [str(rng.randint(1, 251)) for _ in range(120)]
    pool += [str(rng.randint(252, 255)) for _ in range(80)]
    onehot = [" ".join("1" if j == i else "0" for j in range(10)) for i in range(10)]
    choices, randrange = rng.choices, rng.randrange
    while True:
        yield ("|labels " + onehot[randrange(10)] + " |features "
               + " ".join(choices(pool, k=784)) + "\n")


def gen_sparse(rng, dim=50000):
    vals = ["1"] * 17 + ["2", "2", "3"]
    sample, randint, choices = rng.sample, rng.randint, rng.choices
    rdim = range(dim)

    def part(name):
        n = randint(20, 40)
        idx = sorted(sample(rdim, n))
        v = choices(vals, k=n)
        return "|" + name + " " + " ".join("%d:%s" % (i, x) for i, x in zip(idx, v))

    while True:
        yield part("src") + " " + part("tgt") + "\n"


def gen_seq(rng, dim=20, labels=1000):
    pool = gauss_pool(rng)
    choices, randint, randrange = rng.choices, rng.randint, rng.randrange
    sid = 0
    while True:
        n = randint(5, 50)
        lines = []
        for k in range(n):
            line = "%d |x %s" % (sid, " ".join(choices(pool, k=dim)))
            if k == 0:
                line += " |y %d:1" % randrange(labels)
            lines.append(line + "\n")
        yield "".join(lines)
        sid += 1


GENS = {"dense": gen_dense, "features": gen_features, "mnist": gen_mnist, "sparse": gen_sparse,
        "seq": gen_seq}


def path_for(out, kind, mb):
    return os.path.join(out, "%s_%dmb.ctf" % (kind, mb))


def write(path, kind, target_bytes, seed, force=False):
    """Writes whole records until the file holds >= target_bytes. Returns the size."""
    if not force and os.path.exists(path) and os.path.getsize(path) >= target_bytes:
        return os.path.getsize(path), False
    rng = random.Random(seed)
    gen = GENS["dense" if kind == "big" else kind](rng)
    tmp = path + ".tmp"
    size = 0
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        batch, blen = [], 0
        for rec in gen:
            batch.append(rec)
            blen += len(rec)
            if blen >= 4 * MiB or size + blen >= target_bytes:
                f.write("".join(batch))
                size += blen
                batch, blen = [], 0
                if size >= target_bytes:
                    break
    os.replace(tmp, path)
    return size, True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=None, help="MiB per file (default 256)")
    ap.add_argument("--quick", action="store_true", help="32 MiB files")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--big", action="store_true",
                    help="also write the >= 1 GiB dense file for the RSS test")
    ap.add_argument("--big-mb", type=int, default=1024,
                    help="size of the --big file in MiB (default 1024)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default bench/data)")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    a = ap.parse_args(argv)
    mb = a.mb if a.mb is not None else (32 if a.quick else 256)
    os.makedirs(a.out, exist_ok=True)
    kinds = [k for k in a.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS and k not in GENS:
            ap.error("unknown kind %r" % k)
    jobs = [(k, path_for(a.out, k, mb), mb, SEEDS[k]) for k in kinds]
    if a.big:
        jobs.append(("big", path_for(a.out, "dense", a.big_mb), a.big_mb, SEEDS["big"]))
    for kind, path, size_mb, seed in jobs:
        t = time.time()
        size, made = write(path, kind, size_mb * MiB, seed, a.force)
        took = " (%.1f s)" % (time.time() - t) if made else " (kept)"
        print("%s %d bytes%s" % (path, size, took))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
