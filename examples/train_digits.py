#!/usr/bin/env python3
"""A real training run through ctfio: scikit-learn's digits (1797 8x8 images, shipped inside
scikit-learn) -> CTF files -> a randomized MinibatchSource -> training_session -> a NumPy
softmax regression.

It shows, in order:
  1. write_ctf: features dense (dim 64), labels sparse one-hot (dim 10), a train and a test file;
  2. run A: an uninterrupted run, 6 epochs of one sweep each, minibatch sizes [32]*2 + [64],
     a checkpoint after every epoch and cross-validation on the test file;
  3. run B: the same run, killed by an exception in the middle of epoch 3;
  4. run C: a new process restores B's checkpoint and finishes; its minibatches (keys and
     values) and final weights must equal run A's from the checkpoint on;
  5. the test accuracy.

Usage: train_digits.py [OUT_DIR]            (default build/demo)
       train_digits.py --resume OUT_DIR     (run C; started by the script itself)
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

import ctfio

EPOCHS = 6
SCHEDULE = [32] * 2 + [64]
LR = 0.5
INTERRUPT_AFTER = 110        # minibatches; epochs 1-2 take about 90, so this is in epoch 3


def write_data(out):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x, y = digits.data.astype(np.float32), digits.target
    order = np.random.RandomState(0).permutation(len(y))
    test, train = order[:360], order[360:]
    onehot = sp.csr_matrix(np.eye(10, dtype=np.float32)[y])
    for name, idx in (("train", train), ("test", test)):
        n = ctfio.write_ctf(os.path.join(out, "digits_%s.ctf" % name),
                            {"features": x[idx], "labels": onehot[idx]})
        print("wrote %s/digits_%s.ctf: %d sequences" % (out, name, n))


def source(out, name, randomize):
    streams = ctfio.StreamDefs(features=ctfio.StreamDef(field="features", shape=64),
                               labels=ctfio.StreamDef(field="labels", shape=10, is_sparse=True))
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(os.path.join(out, "digits_%s.ctf" % name),
                                                       streams),
                                 randomize=randomize, randomization_seed=7,
                                 chunk_size_in_bytes=4096)


class Model:
    """Softmax regression, trained by plain SGD; it records a digest of every minibatch."""

    def __init__(self, src, interrupt_after=None):
        self.w = np.zeros((64, 10))
        self.b = np.zeros(10)
        self.fx, self.fy = src.streams.features, src.streams.labels
        self.seen = []          # (samples_seen before the minibatch, digest)
        self.interrupt_after = interrupt_after

    def arrays(self, data):
        x = data[self.fx].values.astype(np.float64) / 16.0
        y = data[self.fy].csr().toarray().argmax(axis=1)
        return x, y

    def probs(self, x):
        z = x @ self.w + self.b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def step(self, data, info):
        if self.interrupt_after is not None and info.minibatch == self.interrupt_after:
            raise KeyboardInterrupt("simulated crash at minibatch %d" % info.minibatch)
        x, y = self.arrays(data)
        h = hashlib.sha256(data[self.fx].keys.tobytes())
        h.update(data[self.fx].values.tobytes())
        h.update(y.tobytes())
        self.seen.append((info.samples_seen, h.hexdigest()))
        p = self.probs(x)
        loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
        acc = (p.argmax(axis=1) == y).mean()
        g = p
        g[np.arange(len(y)), y] -= 1
        g /= len(y)
        self.w -= LR * x.T @ g
        self.b -= LR * g.sum(axis=0)
        return {"loss": loss, "acc": acc}

    def error(self, data, info):
        x, y = self.arrays(data)
        return float((self.probs(x).argmax(axis=1) != y).mean())

    def save(self, state):
        return {"w": self.w, "b": self.b}

    def load(self, state):
        self.w, self.b = state["user"]["w"], state["user"]["b"]

    def weights_digest(self):
        return hashlib.sha256(self.w.tobytes() + self.b.tobytes()).hexdigest()[:16]


def digest_after(seen, samples):
    """How many minibatches started at or after ``samples``, and one digest of them all."""
    h = hashlib.sha256()
    n = 0
    for at, d in seen:
        if at >= samples:
            h.update(d.encode())
            n += 1
    return n, h.hexdigest()[:16]


def session(out, model, src, ckpt, progress):
    return ctfio.training_session(
        src, model.step, mb_size=SCHEDULE, epoch_size=ctfio.FULL_DATA_SWEEP, max_epochs=EPOCHS,
        checkpoint_config=ctfio.CheckpointConfig(ckpt),
        cv_config=ctfio.CrossValidationConfig(source(out, "test", False), mb_size=128,
                                              evaluate=model.error, metric_name="error"),
        on_checkpoint=model.save, on_restore=model.load,
        progress=(lambda line: print("  " + line)) if progress else False)


def accuracy(out, model):
    src = source(out, "test", False)
    x, y = model.arrays(src.next_minibatch(10 ** 6))
    return float((model.probs(x).argmax(axis=1) == y).mean())


def resume(out):
    """Run C: everything fresh, state only from the checkpoint file."""
    src = source(out, "train", True)
    model = Model(src)
    s = session(out, model, src, os.path.join(out, "digits_b.ckpt"), True)
    s.train()
    with open(os.path.join(out, "resumed.json"), "w") as f:
        json.dump({"seen": model.seen, "weights": model.weights_digest(),
                   "accuracy": accuracy(out, model)}, f)


def main(out):
    os.makedirs(out, exist_ok=True)
    for name in ("digits_a.ckpt", "digits_b.ckpt"):
        if os.path.exists(os.path.join(out, name)):
            os.unlink(os.path.join(out, name))
    print("== write_ctf: scikit-learn digits -> CTF")
    write_data(out)

    print("== run A: %d epochs, mb_size [32]*2 + [64], checkpoint + cross-validation each epoch"
          % EPOCHS)
    src = source(out, "train", True)
    a = Model(src)
    session(out, a, src, os.path.join(out, "digits_a.ckpt"), True).train()

    print("== run B: the same run, interrupted at minibatch %d" % INTERRUPT_AFTER)
    src = source(out, "train", True)
    b = Model(src, interrupt_after=INTERRUPT_AFTER)
    ckpt = os.path.join(out, "digits_b.ckpt")
    try:
        session(out, b, src, ckpt, False).train()
        sys.exit("run B was not interrupted")
    except KeyboardInterrupt as e:
        print("  interrupted: %s" % e)
    with open(ckpt) as f:
        at = json.load(f)["session"]
    print("  last checkpoint: after epoch %d, %d samples, %d minibatches"
          % (at["epoch"], at["samples_seen"], at["minibatches"]))

    print("== run C: a new process resumes from run B's checkpoint")
    sys.stdout.flush()
    subprocess.run([sys.executable, os.path.abspath(__file__), "--resume", out], check=True)
    with open(os.path.join(out, "resumed.json")) as f:
        c = json.load(f)
    n_c, digest_c = digest_after(c["seen"], at["samples_seen"])
    n_a, digest_a = digest_after(a.seen, at["samples_seen"])
    same = (n_a, digest_a) == (n_c, digest_c) and c["weights"] == a.weights_digest()
    print("== minibatches after the checkpoint: run A %d, sha256 %s; run C %d, sha256 %s"
          % (n_a, digest_a, n_c, digest_c))
    print("   final weights: run A %s, run C %s" % (a.weights_digest(), c["weights"]))
    if not same:
        sys.exit("MISMATCH: the resumed run differs from the uninterrupted one")
    print("resumed run is identical to the uninterrupted run")
    acc = accuracy(out, a)
    print("test accuracy: %.4f (360 held-out digits)" % acc)
    if acc <= 0.9:
        sys.exit("test accuracy too low")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--resume":
        resume(sys.argv[2])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "demo"))
