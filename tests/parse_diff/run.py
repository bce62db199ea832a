#!/usr/bin/env python3
"""Differential test of the parser's builds: the structural (SSE2) pass of lib/format/tokenize.h, in
the variant the processor runs (SSSE3 where it has it) and in the SSE2 one (CTFIO_SIMD=sse2, which
test builds of the tool read: build/test/ctfio, build/asan/ctfio),
against the byte loop it replaced (the same sources built with -DCTF_NO_SSE2, `make portable`).

All must print the same bytes -- sequences, values, every error and warning with its line,
column and byte offset, the exit status -- for generated CTF files that mix valid numbers of
every shape (short, long, exponents, 8-digit limits, float overflow) with malformed ones (".5",
"1.e5", "1..2", "--1", hex, commas, stray bytes), sparse entries (repeated and out-of-range
indices, "5:", ":5", "5::1", huge indices, blanks after ':'), every delimiter the format allows
(spaces, tabs, CR, other control bytes), CRLF files, missing final newlines, and random chunk
sizes so that values fall on chunk ends (where the fast paths must not read ahead).

Usage: run.py CTFIO_FAST CTFIO_PORTABLE [--seeds N]     Last line: 'N passed, N failed'.
"""
import os
import random
import subprocess
import sys
import tempfile

TOKS = ["0", "1", "-1", "+2", "3.", "-.5", ".25", "+.5", "1e5", "1.5e-3", "1.e5", "-0", "0.0000001",
        "123456789", "12345678", "1234567.8", "1.2345678", "16777217", "16777216", "99999999", "x",
        "1..2", "--1", "-", ".", "inf", "nan", "1e400", "1e39", "0x10", "1,2", "\u0661", "\x7f5",
        "5\x01", "\u00e9", "1e", "00000000000000000000001.5",
        "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803",
        "0.000000000000000000000000000000000000000000000000000000000000000000000000001"]
SEPS = [" ", "  ", "\t", " \t ", "\r", "\x0b", "\x1f"]
BAD_ENTRIES = ["-1:1", ":5", "5:", "5::1", "1234567890123:1", "0000000005:1", "x:1", "5:1:2",
               "99999999:1", "5:.5", "5:1e"]


def gen(rnd, lines):
    def num():
        if rnd.random() < 0.7:
            return "%.*g" % (rnd.randint(1, 9), rnd.gauss(0, 10 ** rnd.randint(-5, 5)))
        return rnd.choice(TOKS)

    out = []
    for _ in range(lines):
        names = ["a", "b", "c"] + [rnd.choice(["zz", "#c", "a"]) for _ in range(rnd.randint(0, 1))]
        rnd.shuffle(names)
        parts = []
        for name in names:
            vals = []
            if name == "c":
                for i in sorted(rnd.sample(range(120), rnd.randint(0, 30))):
                    r = rnd.random()
                    if r < 0.6:
                        vals.append("%d:%s" % (i, rnd.choice(["1", "2", "%.3g" % rnd.gauss(0, 3)])))
                    elif r < 0.7:
                        vals.append("%d:%s" % (rnd.randint(0, 130), rnd.choice(TOKS)))
                    elif r < 0.75:
                        vals.append(rnd.choice(BAD_ENTRIES))
                    elif r < 0.8:
                        vals.append("%d:%s1" % (i, rnd.choice(SEPS)))
                    else:
                        vals.append("%d:%s" % (i, num()))
            else:
                vals = [num() for _ in range(rnd.choice([0, 1, 2, 3, 4, 5, 8, 20, 60]))]
            parts.append("|" + name + "".join(rnd.choice(SEPS) + v for v in vals) +
                         rnd.choice(["", " ", "\t"]))
        out.append("".join(parts))
    return rnd.choice(["\n", "\r\n"]).join(out) + rnd.choice(["", "\n"])


def run(cli, path, prec, chunk, simd=None):
    env = dict(os.environ)
    env.pop("CTFIO_SIMD", None)
    if simd:
        env["CTFIO_SIMD"] = simd
    r = subprocess.run([cli, "dump", "--file", path, "--input", "a:5:dense", "--input",
                        "b:60:dense",
                        "--input", "c:100:sparse", "--max-errors", "100000", "--precision", prec,
                        "--randomize", "false", "--chunk-size", str(chunk)],
                       capture_output=True, env=env)
    return r.returncode, r.stdout, r.stderr


def main():
    fast, portable = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seeds = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 150
    passed = failed = 0
    values = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.ctf")
        for seed in range(seeds):
            rnd = random.Random(seed)
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(gen(rnd, rnd.randint(1, 200)))
            chunk = rnd.randint(100, 3100)
            for prec in ("float", "double"):
                b = run(portable, path, prec, chunk)
                a, which = run(fast, path, prec, chunk), "fast"
                if a == b:  # the baseline variant too
                    a, which = run(fast, path, prec, chunk, simd="sse2"), "fast/sse2"
                if a == b:
                    passed += 1
                    values += a[1].count(b",") + a[1].count(b"[")
                    continue
                failed += 1
                keep = os.path.join(tempfile.gettempdir(), "ctfio_parse_diff_%d.ctf" % seed)
                with open(path, "rb") as src, open(keep, "wb") as dst:
                    dst.write(src.read())
                al, bl = (a[1] + a[2]).splitlines(), (b[1] + b[2]).splitlines()
                first = next((i for i in range(max(len(al), len(bl)))
                              if i >= len(al) or i >= len(bl) or al[i] != bl[i]), None)
                print("FAIL seed %d %s chunk %d (kept in %s): exit %d vs %d; first difference, "
                      "line %s:\n"
                      "  %s: %r\n  portable: %r" % (
                          seed, prec, chunk, keep, a[0], b[0], first, which,
                          al[first][:200] if first is not None and first < len(al) else None,
                          bl[first][:200] if first is not None and first < len(bl) else None))
    print("parse_diff: %d files x 2 precisions, ~%d values and entries compared" % (seeds, values))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
