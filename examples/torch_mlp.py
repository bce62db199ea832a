#!/usr/bin/env python3
"""``make demo``, PyTorch part: a small MLP trained on the demo's CTF file (build/demo/sample.ctf,
read with the demo's BrainScript configuration examples/demo.cntk) through ctfio.torch and a
``torch.utils.data.DataLoader``, with checkpoint and resume.

The data: sequences of 1-5 dense ``features`` (dim 4) and one sparse one-hot ``labels`` (dim 3).
The model averages a sequence's features (padded layout + mask) and classifies it.

It shows, in order:
  1. run A: an uninterrupted run of 8 epochs (one randomized sweep each), 32-sample minibatches;
  2. run B: the same run with a checkpoint (model, optimizer, reader state) every 7 steps,
     killed by an exception in the middle of epoch 3;
  3. run C: a new process loads B's last checkpoint and finishes; its minibatches (sequence
     keys), losses and final weights must equal run A's from the checkpoint on;
  4. the accuracy over the whole file.

Usage: torch_mlp.py [OUT_DIR]            (default build/demo; needs OUT_DIR/sample.ctf)
       torch_mlp.py --resume OUT_DIR     (run C; started by the script itself)
"""
import hashlib
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

import ctfio
import ctfio.torch

EPOCHS = 8
MB = 32
CHECKPOINT_EVERY = 7     # steps
INTERRUPT_AT = 45        # steps; an epoch is about 19 steps, so this is in epoch 3
HERE = os.path.dirname(os.path.abspath(__file__))


def source(out, randomize=True):
    return ctfio.MinibatchSource.from_config(os.path.join(HERE, "demo.cntk"),
                                             overrides=["DataDir=" + out], randomize=randomize)


def loader(out):
    ds = ctfio.torch.CTFIterableDataset(lambda: source(out), MB, layout="padded",
                                        with_keys=True)
    return ds, torch.utils.data.DataLoader(ds, batch_size=None)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 3))

    def forward(self, x, mask):
        """x: (sequences, max_len, 4) padded, mask: (sequences, max_len) -> logits."""
        m = mask.unsqueeze(2).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1)
        return self.mlp(pooled)


def digest(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def weights_digest(model):
    h = hashlib.sha256()
    for p in model.state_dict().values():
        h.update(p.numpy().tobytes())
    return h.hexdigest()[:16]


def train(out, ckpt=None, interrupt_at=None, resume=False, verbose=True):
    """Runs to EPOCHS; returns (steps, model) where steps[i] = (step, keys digest, loss)."""
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ds, dl = loader(out)
    step = 0
    if resume:
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        ds.load_state_dict(state["data"])
        step = state["step"]
        print("  restored %s: %d epochs done, step %d, reader position %d"
              % (ckpt, ds.epoch, step, state["data"]["source"]["minibatchSourcePosition"]))
    steps = []
    # ds.epoch counts completed epochs and is part of the checkpoint, so a restore in the
    # middle of an epoch finishes that epoch, and one at its end starts the next.
    for epoch in range(ds.epoch, EPOCHS):
        total = correct = 0
        for batch in dl:     # one sweep (the rest of it after a restore)
            if step == interrupt_at:
                raise KeyboardInterrupt("simulated crash at step %d" % step)
            y = batch["labels"].col_indices().long()
            logits = model(batch["features"], batch["features_mask"])
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps.append((step, digest(batch["_keys"]), float(loss.detach())))
            total += len(y)
            correct += int((logits.argmax(1) == y).sum())
            step += 1
            if ckpt and step % CHECKPOINT_EVERY == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "data": ds.state_dict(), "step": step},
                           ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
        if verbose:
            print("  epoch %d: %d steps so far, %d sequences, train accuracy %.3f"
                  % (epoch, step, total, correct / max(total, 1)))
    ds.close()
    return steps, model


def accuracy(out, model):
    """Over the whole file, in file order (one sweep)."""
    ds = ctfio.torch.CTFIterableDataset(lambda: source(out, randomize=False), 10 ** 6,
                                        layout="padded")
    total = correct = 0
    with torch.no_grad():
        for batch in ds:
            y = batch["labels"].col_indices().long()
            correct += int((model(batch["features"], batch["features_mask"]).argmax(1) == y)
                           .sum())
            total += len(y)
    ds.close()
    return correct / total


def resume(out):
    """Run C: everything fresh, state only from the checkpoint file."""
    steps, model = train(out, os.path.join(out, "torch_b.pt"), resume=True)
    with open(os.path.join(out, "torch_resumed.json"), "w") as f:
        json.dump({"steps": steps, "weights": weights_digest(model)}, f)


def main(out):
    if not os.path.exists(os.path.join(out, "sample.ctf")):
        sys.exit("%s/sample.ctf is missing: run make demo (tools/make_sample.py writes it)" % out)
    torch.set_num_threads(1)
    ckpt = os.path.join(out, "torch_b.pt")
    if os.path.exists(ckpt):
        os.unlink(ckpt)
    print("== run A: %d epochs, minibatches of %d samples, DataLoader(batch_size=None)"
          % (EPOCHS, MB))
    a_steps, a = train(out)

    print("== run B: the same run, a checkpoint every %d steps, interrupted at step %d"
          % (CHECKPOINT_EVERY, INTERRUPT_AT))
    try:
        train(out, ckpt, interrupt_at=INTERRUPT_AT, verbose=False)
        sys.exit("run B was not interrupted")
    except KeyboardInterrupt as e:
        print("  interrupted: %s" % e)

    print("== run C: a new process resumes from run B's last checkpoint")
    sys.stdout.flush()
    subprocess.run([sys.executable, os.path.abspath(__file__), "--resume", out], check=True)
    with open(os.path.join(out, "torch_resumed.json")) as f:
        c = json.load(f)
    first = c["steps"][0][0]
    a_after = [list(s) for s in a_steps[first:]]
    same_steps = a_after == c["steps"]
    print("== steps %d-%d: minibatch keys and losses %s in runs A and C"
          % (first, len(a_steps) - 1, "identical" if same_steps else "DIFFERENT"))
    print("   final weights: run A %s, run C %s" % (weights_digest(a), c["weights"]))
    if not same_steps or c["weights"] != weights_digest(a):
        sys.exit("MISMATCH: the resumed run differs from the uninterrupted one")
    print("resumed run is identical to the uninterrupted run")
    acc = accuracy(out, a)
    print("accuracy over the file: %.3f (a 3-class toy problem; chance is 0.33)" % acc)
    if acc < 0.6:
        sys.exit("accuracy too low")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--resume":
        torch.set_num_threads(1)
        resume(sys.argv[2])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "demo"))
