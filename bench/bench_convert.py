"""Conversion benchmark: `ctfio convert libsvm` (C, streamed) against scikit-learn's
load_svmlight_file + ctfio.write_ctf writing the same CTF file, on a generated LibSVM file.
Prints MB/s of input for both (best of --repeat runs) and checks that the two outputs read back
to the same values.

    .venv/bin/python bench/bench_convert.py [--mb 100] [--repeat 3] [--cli build/ctfio]
"""
import argparse
import os
import subprocess
import tempfile
import time

import numpy as np


def generate(path, target_mb, seed=0):
    """A LibSVM file of about target_mb MB: 0/1 labels, ~40 of 100000 features per row."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        written = 0
        while written < target_mb * 1e6:
            lines = []
            for _ in range(2000):
                idx = np.sort(rng.choice(100000, 40, replace=False)) + 1
                val = rng.random(40)
                lines.append("%d %s\n" % (rng.integers(0, 2), " ".join(
                    "%d:%s" % (i, repr(float(v))) for i, v in zip(idx, val))))
            text = "".join(lines)
            f.write(text)
            written += len(text)


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                  "ctfio"))
    a = ap.parse_args()
    from sklearn.datasets import load_svmlight_file

    import ctfio
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.svm")
        generate(src, a.mb)
        size = os.path.getsize(src)
        out_c, out_py = os.path.join(d, "c.ctf"), os.path.join(d, "py.ctf")

        def cli():
            subprocess.run([a.cli, "convert", "libsvm", src, out_c, "--quiet"], check=True)

        def sklearn():
            X, y = load_svmlight_file(src)
            ctfio.write_ctf(out_py, {"labels": y, "features": X}, sequence_ids=False,
                            precision="double")

        t_c = best(cli, a.repeat)
        t_py = best(sklearn, a.repeat)
        # The same data either way (write_ctf names the same streams in the same order).
        with open(out_c) as f1, open(out_py) as f2:
            same = f1.read() == f2.read()
        print("input %.1f MB (%d bytes)" % (size / 1e6, size))
        print("ctfio convert libsvm:                   %.3f s  %6.1f MB/s"
              % (t_c, size / 1e6 / t_c))
        print("load_svmlight_file + ctfio.write_ctf:   %.3f s  %6.1f MB/s"
              % (t_py, size / 1e6 / t_py))
        print("speed-up %.1fx; outputs byte-identical: %s" % (t_py / t_c, same))


if __name__ == "__main__":
    main()
