"""The CUDA paths, on a machine with a GPU (not part of `make test`, which runs without one):
ctfio.torch's double buffering against the CPU batches, and a provider's next_minibatch staged
onto the GPU against the host batch. Run from the repository root after building the extension
in place: `python3 setup.py -q build_ext --inplace && PYTHONPATH=python python3
tests/gpu/check.py` (the device's own torch is used)."""
import os
import subprocess
import sys
import time

import numpy as np
import torch

import ctfio
import ctfio.torch as ct
from ctfio.paddle import dense_vector, integer_value, provider

assert torch.cuda.is_available(), "no CUDA device"
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)

# 1. The pytest case written for this path (skipped on machines without CUDA).
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "tests/python/test_torch.py", "-k", "cuda or other_device"],
                   env=dict(os.environ, PYTHONPATH="python"))
assert r.returncode == 0, "pytest on the CUDA path failed"

# 2. A provider's batch staged onto the GPU equals the host batch.
@provider(input_types={"x": dense_vector(64), "y": integer_value(10)}, should_shuffle=False)
def process(settings, filename):
    rng = np.random.default_rng(7)
    for i in range(4096):
        yield {"x": rng.standard_normal(64).astype(np.float32).tolist(), "y": i % 10}

host, dev = process(["f"]), process(["f"])
for _ in range(8):
    h = host.next_minibatch(256)
    g = dev.next_minibatch(256, device=torch.device("cuda"))
    for si in host.stream_infos():
        hv = h[si].value if hasattr(h[si], "value") else h[si].ids
        gd = g[si]
        gv = gd.value if getattr(gd, "value", None) is not None else gd.ids
        assert isinstance(gv, torch.Tensor) and gv.is_cuda, si
        assert np.array_equal(np.asarray(hv), gv.cpu().numpy()), si
print("provider staging onto cuda: 8 batches equal to the host batches")

# 3. Double buffering's effect: a sweep through ctfio.torch onto the GPU against the CPU sweep.
path = "build/gpu_check.ctf"
os.makedirs("build", exist_ok=True)
rng = np.random.default_rng(1)
with open(path, "w") as f:
    for i in range(200000):
        f.write("|x " + " ".join("%.4g" % v for v in rng.standard_normal(64)) + " |y %d:1\n"
                % (i % 10))


def src():
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(
        x=ctfio.StreamDef(field="x", shape=64),
        y=ctfio.StreamDef(field="y", shape=10, is_sparse=True))), max_sweeps=1)


def sweep(device):
    ds = ct.CTFIterableDataset(src, 1024, device=device)
    t = time.perf_counter()
    n = 0
    for b in ds:
        n += b["x"].shape[0]
    if device == "cuda":
        torch.cuda.synchronize()
    return n, time.perf_counter() - t


for dev_name in ("cpu", "cuda", "cpu", "cuda"):
    n, s = sweep(dev_name)
    print("sweep onto %-4s: %d samples in %.3f s (%.0f samples/s)" % (dev_name, n, s, n / s))
print("gpu check: all passed")
