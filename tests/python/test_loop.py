"""The two drivers share one loop (ctfio/_loop.py): training_session and ctfio.torch (its file
reader path and its general path) over the same data, minibatch size, epoch size and worker
split make the same minibatches and end the same epochs. A change to either driver's requests
or epoch handling alone makes these runs disagree."""
import random

import numpy as np
import pytest

import ctfio
from ctfio import FULL_DATA_SWEEP, training_session

ct = pytest.importorskip("ctfio.torch")

_RNG = random.Random(5)
LENGTHS = [_RNG.randint(1, 5) for _ in range(23)]
EPOCHS = 3


def write(path):
    with open(path, "w") as f:
        for s, n in enumerate(LENGTHS):
            for i in range(n):
                f.write("%d |x %d %d\n" % (s, s, i))
    return path


class Overridden(ctfio.MinibatchSource):
    """The file source with one method of its own: ctfio.torch takes its general path."""

    def next_minibatch(self, *args, **kw):
        return super().next_minibatch(*args, **kw)


def sources(kind, path):
    if kind == "in-memory":
        x = [np.full((n, 2), s, np.float32) for s, n in enumerate(LENGTHS)]
        return lambda: ctfio.MinibatchSourceFromData({"x": x})
    cls = Overridden if kind == "general" else ctfio.MinibatchSource
    return lambda: cls(ctfio.CTFDeserializer(path, ctfio.StreamDefs(x=ctfio.StreamDef(shape=2))),
                       randomize=True, randomization_seed=4, chunk_size_in_bytes=60,
                       randomization_window_in_chunks=3, num_threads=1)


def by_training(make, k, epoch_size, workers):
    got = [[] for _ in range(EPOCHS)]

    def step(data, info):
        got[info.epoch].append(info.local_samples)

    s = training_session(make(), step, mb_size=k, epoch_size=epoch_size, max_epochs=EPOCHS,
                         number_of_workers=workers, worker_rank=0, progress=False).train()
    assert s.epoch == EPOCHS
    return got


def by_torch(make, k, epoch_size, workers):
    ds = ct.CTFIterableDataset(make, k, epoch_size=epoch_size, number_of_workers=workers,
                               worker_rank=0)
    got = [[int(b["x"].shape[0]) for b in ds] for _ in range(EPOCHS)]
    assert ds.epoch == EPOCHS
    return got


@pytest.mark.parametrize("kind", ["reader", "general", "in-memory"])
@pytest.mark.parametrize("epoch_size", [FULL_DATA_SWEEP, 17])
@pytest.mark.parametrize("workers", [1, 2])
def test_training_and_torch_make_the_same_minibatches(tmp_path, kind, epoch_size, workers):
    make = sources(kind, write(str(tmp_path / "d.ctf")))
    for k in (4, 9):
        want = by_training(make, k, epoch_size, workers)
        assert by_torch(make, k, epoch_size, workers) == want
        # Requests are cut at the epoch's end: one worker sees whole epochs of the timeline.
        if workers == 1:
            size = sum(LENGTHS) if epoch_size == FULL_DATA_SWEEP else epoch_size
            ends = np.cumsum([sum(e) for e in want]) - size * np.arange(1, EPOCHS + 1)
            assert all(0 <= d < max(LENGTHS) for d in ends)     # one sequence may overshoot
            if epoch_size == FULL_DATA_SWEEP:
                assert list(ends) == [0] * EPOCHS
