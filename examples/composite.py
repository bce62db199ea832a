"""A composite source: features in one file, labels in another (in another order), joined by
sequence key, read exactly as the single file that holds both streams.

    python examples/composite.py DIR      (DIR holds sample.ctf, as `make demo` writes it)
"""
import os
import random
import sys

import numpy as np

import ctfio as io

d = sys.argv[1] if len(sys.argv) > 1 else "build/demo"
sample = os.path.join(d, "sample.ctf")

# Split sample.ctf by stream: features.ctf keeps the file order, labels.ctf is shuffled by key.
seqs = {}
with open(sample) as f:
    for line in f:
        key, rest = line.split(" ", 1)
        seqs.setdefault(key, []).append(rest)
keys = list(seqs)
with open(os.path.join(d, "features.ctf"), "w") as f:
    for k in keys:
        for rest in seqs[k]:
            f.write("%s |features %s\n" % (k, rest.split("|features ")[1].split(" |")[0].strip()))
random.Random(0).shuffle(keys)
with open(os.path.join(d, "labels.ctf"), "w") as f:
    for k in keys:
        for rest in seqs[k]:
            if "|labels" in rest:
                f.write("%s |labels %s\n" % (k, rest.split("|labels ")[1].strip()))

features = io.StreamDefs(features=io.StreamDef(shape=4))
labels = io.StreamDefs(labels=io.StreamDef(shape=3, is_sparse=True))
both = io.StreamDefs(features=io.StreamDef(shape=4), labels=io.StreamDef(shape=3, is_sparse=True))
opts = dict(randomization_window_in_chunks=4, randomization_seed=1, chunk_size_in_bytes=1,
            max_sweeps=2)
composite = io.MinibatchSource([io.CTFDeserializer(os.path.join(d, "features.ctf"), features),
                                io.CTFDeserializer(os.path.join(d, "labels.ctf"), labels)], **opts)
single = io.MinibatchSource(io.CTFDeserializer(sample, both), **opts)
print("composite streams:", [s.name for s in composite.stream_infos()])
n = 0
while True:
    a, b = composite.next_minibatch(16), single.next_minibatch(16)
    if not a or not b:
        assert not a and not b
        break
    fa, fb = a[composite.streams.features], b[single.streams.features]
    la, lb = a[composite.streams.labels], b[single.streams.labels]
    assert fa.keys.tolist() == fb.keys.tolist()
    assert np.array_equal(fa.values, fb.values)
    assert (la.csr() != lb.csr()).nnz == 0
    if n < 2:
        print("minibatch %d: keys %s, labels %s" % (n, fa.keys.tolist(),
                                                     la.csr().indices.tolist()))
    n += 1
print("%d minibatches over two sweeps: the composite of features.ctf + labels.ctf equals "
      "sample.ctf, minibatch for minibatch" % n)
