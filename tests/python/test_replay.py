"""Replay any position of the timeline: ``MinibatchSource.state_at(position)`` restored into a
fresh reader, and ``ctfio dump --at POSITION`` / ``--at-step STEP``, deliver exactly what the
uninterrupted run delivered from there, sequence for sequence (keys, files, lines and values),
for one file, a corpus, a join, a mix, and a worker's share of each global minibatch."""

import json
import random
import subprocess
import sys

import pytest

import ctfio

K = 37   # minibatch size; sequences of 1-3 samples, so positions are not multiples of it


def _write(path, seqs, seed, field="x", start=0):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for s in range(start, start + seqs):
            for t in range(rng.randint(1, 3)):
                f.write("%d |%s %d %d\n" % (s, field, s, t))
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    return {
        "one": _write(d / "one.ctf", 400, 1),
        "a": _write(d / "a.ctf", 250, 2),
        "b": _write(d / "b.ctf", 250, 3, start=250),
        "labels": _write(d / "labels.ctf", 400, 1, field="y"),
    }


XS = ctfio.StreamDefs(x=ctfio.StreamDef(shape=2))


def make(data, kind, workers=1):
    opts = dict(chunk_size_in_bytes=1500, max_sweeps=3, randomization_window_in_chunks=3)
    if kind == "one":
        return ctfio.MinibatchSource(ctfio.CTFDeserializer(data["one"], XS), **opts)
    if kind == "corpus":
        return ctfio.MinibatchSource(ctfio.CTFDeserializer([data["a"], data["b"]], XS), **opts)
    if kind == "join":
        return ctfio.MinibatchSource([
            ctfio.CTFDeserializer(data["one"], XS),
            ctfio.CTFDeserializer(data["labels"],
                                  ctfio.StreamDefs(y=ctfio.StreamDef(shape=2)))], **opts)
    return ctfio.MinibatchSource(ctfio.mix([ctfio.CTFDeserializer(data["a"], XS),
                                            ctfio.CTFDeserializer(data["b"], XS)],
                                           weights=[0.7, 0.3]), **opts)


def run(src, steps=None, workers=1, rank=0):
    """(position before, what each minibatch holds) for every step."""
    out = []
    while steps is None or len(out) < steps:
        before = src._reader.position
        mb = src.next_minibatch(K, number_of_workers=workers, worker_rank=rank)
        if not mb:
            break
        out.append((before, sorted(
            (si.name, md.keys.tolist(), md.files.tolist() if md.files is not None else None,
             md.values.tolist()) for si, md in mb.items())))
    return out


@pytest.mark.parametrize("kind", ["one", "corpus", "join", "mix"])
@pytest.mark.parametrize("workers", [1, 2])
def test_state_at_replays_any_step(data, kind, workers):
    for rank in range(workers):
        full = run(make(data, kind), workers=workers, rank=rank)
        assert len(full) > 40
        ask = make(data, kind)
        rng = random.Random(kind + str(workers))
        for step in sorted(rng.sample(range(len(full)), 6)):
            position, _ = full[step]
            state = ask.state_at(position)
            assert state["minibatchSourcePosition"] == position
            again = make(data, kind)
            again.restore_from_checkpoint(state)
            assert run(again, 3, workers, rank) == full[step:step + 3], (kind, step)
        # Asking moved nothing: the asking reader still reads its run from the start.
        assert run(ask, 2, workers, rank) == full[:2]


def test_state_at_refuses_truncated_bptt(data):
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(data["one"], XS), truncation_length=2)
    with pytest.raises(ValueError, match="BPTT"):
        src.state_at(10)
    with pytest.raises(ValueError):
        make(data, "one").state_at(-1)


def cli(*args):
    p = subprocess.run([sys.executable, "-m", "ctfio", *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


@pytest.mark.parametrize("workers", [1, 2])
def test_dump_at_replays_the_run(data, workers):
    base = ["dump", "--file", data["a"], "--file", data["b"], "--input", "x:2:dense",
            "--mb", str(K), "--max-sweeps", "2", "--chunk-size", "1500",
            "--workers", str(workers), "--rank", str(workers - 1)]
    full = cli(*base)
    assert len(full) > 20
    for step in (0, 5, len(full) // 2, len(full) - 2):
        position = full[step - 1]["position"] if step else 0
        replay = cli(*base, "--at", str(position), "--count", "2")
        by_step = cli(*base, "--at-step", str(step), "--count", "2")
        assert [m["index"] for m in by_step] == [step, step + 1]
        for got in (replay, by_step):
            assert [m["position"] for m in got] == [m["position"] for m in full[step:step + 2]]
            for g, w in zip(got, full[step:step + 2]):
                # The replay names each sequence's file and first line; the rest is the run's.
                assert all(q["path"] in (data["a"], data["b"]) and q["line"] >= 1
                           for q in g["sequences"])
                assert [{k: v for k, v in q.items() if k not in ("path", "line")}
                        for q in g["sequences"]] == w["sequences"]
        # The line named is the sequence's first line in its file.
        for q in replay[0]["sequences"]:
            with open(q["path"]) as f:
                line = f.readlines()[q["line"] - 1]
            assert line.split()[0] == str(q["key"])


def test_dump_at_needs_mb(data):
    p = subprocess.run([sys.executable, "-m", "ctfio", "dump", "--file", data["one"], "--input",
                        "x:2:dense", "--at", "5"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--at needs --mb" in p.stderr
