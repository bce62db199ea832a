"""torchdata's StatefulDataLoader over ctfio.torch.CTFIterableDataset (the protocol Lightning and
other trainers checkpoint loaders through): stopped mid-epoch, its state_dict saved, then loaded
into a new loader in a new process, the continuation equals an uninterrupted run bit for bit,
with num_workers 0 and 2 (torchdata_worker.py is the process)."""
import os
import pickle
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata.stateful_dataloader")

HERE = os.path.dirname(os.path.abspath(__file__))
NUM_SEQS = 157


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("td") / "d.ctf"
    lines = []
    for i in range(NUM_SEQS):
        for t in range(1 + i % 3):
            y = " |y %d:%d" % (i % 7, t + 1) if t == 0 else ""
            lines.append("%d |x %d %d.5 -%d%s" % (i, i, t, i * t, y))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def worker(data, tmp_path, workers, epochs, name, *extra):
    out = tmp_path / (name + ".pkl")
    subprocess.run([sys.executable, os.path.join(HERE, "torchdata_worker.py"), data,
                    str(workers), str(epochs), str(out)] + [str(e) for e in extra],
                   check=True, cwd=HERE)
    with open(out, "rb") as f:
        return pickle.load(f)


_WHOLE = {}


@pytest.mark.parametrize("workers, stop", [(0, 40), (2, 11)])   # epoch 2; mid-epoch 1
def test_state_dict_resumes_in_a_new_process_bit_for_bit(data, tmp_path, workers, stop):
    if workers not in _WHOLE:                       # the uninterrupted run, once per setting
        _WHOLE[workers] = worker(data, tmp_path, workers, 2, "whole")
    whole = _WHOLE[workers]
    per_epoch = len(whole) // 2
    assert 0 < stop < len(whole) and per_epoch > 11 and (workers or per_epoch < 40)
    keys = sorted(k for b in whole[:per_epoch] for name, _, parts in b if name == "_keys"
                  for k in memoryview(parts[0]).cast("q").tolist())
    assert keys == list(range(NUM_SEQS))            # one epoch = one sweep, each sequence once
    state = tmp_path / "state.pt"
    head = worker(data, tmp_path, workers, 2, "head", "--stop-after", stop, state)
    assert head == whole[:stop]
    tail = worker(data, tmp_path, workers, 2 - stop // per_epoch, "tail", "--resume", state)
    assert tail == whole[stop:]
