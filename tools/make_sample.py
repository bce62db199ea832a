#!/usr/bin/env python3
"""Writes the demo's sample CTF file: sequences of dense 'features' (dim 4) with one sparse
'label' (dim 3) per sequence, a comment here and there. Deterministic (fixed seed).
Usage: make_sample.py OUT.ctf [NUM_SEQUENCES]"""
import random
import sys

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
rng = random.Random(42)
with open(out, 'w') as f:
    for seq in range(n):
        label = rng.randrange(3)
        length = rng.randint(1, 5)
        for i in range(length):
            feats = ' '.join('%.3g' % (rng.gauss(label, 1.0)) for _ in range(4))
            line = '%d |features %s' % (seq, feats)
            if i == 0:
                line += ' |labels %d:1' % label
            if rng.random() < 0.05:
                line += ' |# sample comment'
            f.write(line + '\n')
