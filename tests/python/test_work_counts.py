"""Every driver of a ctfio reader does the reader's work once: a sweep read through
``CTFIterableDataset`` (alone, under ``DataLoader``, under torchdata's ``StatefulDataLoader``,
with its state taken every step) or ``training_session`` loads and parses each chunk exactly as
often as the plain ``next_minibatch`` loop does. The reader's own counters say it
(``stats()["perf"]``: chunks_loaded, parse_bytes); values alone would not show a chunk parsed
three times."""

import random

import pytest

import ctfio

pytest.importorskip("torch")
import torch.utils.data  # noqa: E402

import ctfio.torch  # noqa: E402

CHUNK = 16 * 1024   # small chunks: about twenty per file


@pytest.fixture(scope="module", params=["rows", "sequences"])
def data(request, tmp_path_factory):
    """Rows: every line one sample (line mode). Sequences: 1 to 7 samples each."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("work") / (request.param + ".ctf")
    with open(path, "w") as f:
        if request.param == "rows":
            for _ in range(3001):
                f.write("|y %d:1 |x %s\n" % (rng.randrange(5), " ".join(
                    str(rng.randrange(100)) for _ in range(16))))
        else:
            for s in range(700):
                for t in range(rng.randint(1, 7)):
                    label = " |y %d:1" % rng.randrange(5) if t == 0 else ""
                    f.write("%d%s |x %s\n" % (s, label, " ".join(
                        str(rng.randrange(100)) for _ in range(16))))
    return str(path)


def make(path, randomize, sweeps=1):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            x=ctfio.StreamDef(shape=16), y=ctfio.StreamDef(shape=5, is_sparse=True))),
        randomize=randomize, max_sweeps=sweeps, chunk_size_in_bytes=CHUNK, cache_index=False)


def work(src):
    perf = src.stats()["perf"]
    return perf["chunks_loaded"], perf["parse_bytes"]


def direct(path, randomize, k, sweeps=1):
    src = make(path, randomize, sweeps)
    keys = []
    while True:
        mb = src.next_minibatch(k)
        if not mb:
            break
        keys.append(mb[src.streams.x].keys.tolist())
    return work(src), keys


def dataset_keys(batches):
    return [b["_keys"].tolist() for b in batches]


def via_dataset(path, randomize, k, wrap, with_keys, sweeps=1):
    src = make(path, randomize, sweeps)
    ds = ctfio.torch.CTFIterableDataset(src, k, with_keys=True)
    keys = []
    for _epoch in range(sweeps):
        if wrap == "dataset":
            it = ds
        elif wrap == "dataloader":
            it = torch.utils.data.DataLoader(ds, batch_size=None)
        elif wrap == "stateful":
            sdl = pytest.importorskip("torchdata.stateful_dataloader")
            it = sdl.StatefulDataLoader(ds, batch_size=None)
        else:   # state taken after every batch, as a checkpointing loop does
            it = _with_states(ds)
        for b in it:
            keys.append(b["_keys"].tolist() if with_keys else None)
    return work(src), keys


def _with_states(ds):
    for b in ds:
        ds.state_dict()
        yield b


def via_session(path, randomize, k, sweeps=1):
    src = make(path, randomize, sweeps)
    keys = []

    def step(data, info):
        keys.append(data[src.streams.x].keys.tolist())

    ctfio.training_session(src, step, mb_size=k, progress=False).train()
    return work(src), keys


@pytest.mark.parametrize("randomize", [True, False], ids=["randomized", "in-order"])
@pytest.mark.parametrize("k", [32, 100, 4096])
@pytest.mark.parametrize("wrap", ["dataset", "dataloader", "stateful", "states"])
@pytest.mark.parametrize("with_keys", [True, False], ids=["keys", "no-keys"])
def test_dataset_does_the_work_of_next_minibatch(data, randomize, k, wrap, with_keys):
    want, want_keys = direct(data, randomize, k)
    got, got_keys = via_dataset(data, randomize, k, wrap, with_keys)
    assert got == want
    if with_keys:
        assert got_keys == want_keys
    # The sweep really spans chunks: the comparison can tell a chunk loaded twice.
    assert want[0] >= 10


@pytest.mark.parametrize("randomize", [True, False], ids=["randomized", "in-order"])
@pytest.mark.parametrize("k", [32, 100, 4096])
def test_training_session_does_the_work_of_next_minibatch(data, randomize, k):
    want, want_keys = direct(data, randomize, k)
    got, got_keys = via_session(data, randomize, k)
    assert got == want
    assert got_keys == want_keys


@pytest.mark.parametrize("wrap", ["dataset", "stateful"])
def test_epochs_of_an_endless_reader_load_each_chunk_once_per_sweep(data, wrap):
    """Two epochs of a reader that goes on: each epoch is cut at the sweep's end, each is the
    work of one sweep (every chunk loaded once per sweep), and the order is that of the two
    sweeps read straight through."""
    once, _ = direct(data, True, 100)
    _, want_keys = direct(data, True, 100, sweeps=2)
    got, got_keys = via_dataset(data, True, 100, wrap, True, sweeps=2)
    assert got == (2 * once[0], 2 * once[1])
    assert [key for mb in got_keys for key in mb] == [key for mb in want_keys for key in mb]


@pytest.mark.parametrize("randomize", [True, False], ids=["randomized", "in-order"])
@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("k", [2, 5, 4096])
def test_a_minibatch_that_reaches_the_sweep_end_loads_no_chunk_twice(tmp_path, randomize,
                                                                      threads, k):
    """A cut that reaches the end of a sweep opens the next one; the chunks it loaded for its
    own records in the sweep it left are still its own to take (they were loaded a second
    time: a 6-sample sweep of 3 files in one minibatch loaded 6 chunks)."""
    for i in range(3):
        (tmp_path / ("part-%d.ctf" % i)).write_text("|x %d 0\n|x %d 1\n" % (i, i))
    for sweeps in (1, 3):
        src = ctfio.MinibatchSource(
            ctfio.CTFDeserializer(str(tmp_path / "part-*.ctf"),
                                  ctfio.StreamDefs(x=ctfio.StreamDef(shape=2))),
            randomize=randomize, max_sweeps=sweeps, num_threads=threads, cache_index=False)
        samples = 0
        while True:
            mb = src.next_minibatch(k)
            if not mb:
                break
            samples += mb[src.streams.x].num_samples
        assert samples == 6 * sweeps
        perf = src.stats()["perf"]
        if sweeps == 1:
            assert (perf["chunks_loaded"], perf["read_bytes"]) == (3, 42)
        else:   # a chunk held over a sweep's end may serve the next sweep too
            assert perf["chunks_loaded"] <= 3 * sweeps and perf["read_bytes"] <= 42 * sweeps
