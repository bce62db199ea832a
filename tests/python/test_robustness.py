"""Regression tests for misuse and failure paths of the Python layer: out-of-range sparse indices
from providers, zero-unit samples, generator errors, close() from another thread, bad argument
types, a file that changes under the reader, and Ctrl-C during next_minibatch."""

import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ctfio
from ctfio.provider import SampleError, integer_value, provider, sparse_binary_vector


def ctf_file(tmp_path, n=200, name="d.ctf"):
    path = str(tmp_path / name)
    with open(path, "w") as f:
        for i in range(n):
            f.write("|x %d %d\n" % (i, i))
    return path


def ctf_source(path, **kw):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(x=ctfio.StreamDef(shape=2))), **kw)


# ---------------------------------------------------------------------------------------------
# Providers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("index", [-100000000, -1, 5, 2**40])
def test_sparse_index_out_of_range_never_reaches_an_array(index):
    for check in (False, True):
        @provider(input_types={"s": sparse_binary_vector(5)}, check=check)
        def process(settings, filename):
            yield {"s": [index, 2]}

        with pytest.raises(SampleError, match="out of range"):
            list(process(["f"], batch_size=4))
    # check + check_fail_continue: the sample is dropped, the good ones arrive intact

    @provider(input_types={"s": sparse_binary_vector(5)}, check=True, check_fail_continue=True,
              should_shuffle=False)
    def process(settings, filename):
        yield {"s": [1]}
        yield {"s": [index, 2]}
        yield {"s": [4]}

    dp = process(["f"], batch_size=4)
    (b,) = list(dp)
    assert b["s"].csr().toarray().tolist() == [[0, 1, 0, 0, 0], [0, 0, 0, 0, 1]]
    assert dp.stats()["samples_dropped"] == 1


def test_zero_unit_samples_are_bounded_by_pool_size():
    # calc_batch_size returning 0 on an endless generator used to fill the pool forever.
    code = textwrap.dedent("""
        from ctfio.provider import provider, integer_value

        @provider(input_types=[integer_value(10)], calc_batch_size=lambda s: 0, pool_size=100)
        def process(settings, filename):
            i = 0
            while True:
                yield [i % 10]
                i += 1

        dp = process(["f"], batch_size=16)
        b = next(iter(dp))
        assert b.num_samples == 16 and b.size == 16, (b.num_samples, b.size)
        assert dp.stats()["pool_peak_units"] <= 100 and dp.stats()["pool_peak_samples"] <= 100
        dp.close()
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def test_negative_unit_count_is_an_error():
    @provider(input_types=[integer_value(10)], calc_batch_size=lambda s: -1)
    def process(settings, filename):
        yield [1]

    with pytest.raises(SampleError, match="calc_batch_size must return an int >= 0"):
        list(process(["f"], batch_size=4))


def test_generator_error_delivers_the_samples_before_it():
    @provider(input_types=[integer_value(100)], should_shuffle=False)
    def process(settings, filename):
        for i in range(5):
            yield [i]
        raise OSError("disk on fire")

    it = iter(process(["f"], batch_size=8))
    assert next(it)[0].ids.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(OSError, match="disk on fire"):
        next(it)


def test_close_from_another_thread():
    started = threading.Event()

    @provider(input_types=[integer_value(10)], should_shuffle=False)
    def process(settings, filename):
        i = 0
        while True:
            started.set()
            time.sleep(0.001)
            yield [i % 10]
            i += 1

    for _ in range(5):
        dp = process(["a", "b"], batch_size=64, readahead=1)
        errors = []

        def consume(dp=dp, errors=errors):
            try:
                for _ in dp:
                    pass
            except RuntimeError as exc:       # "this pass was ended": a documented outcome
                errors.append(exc)
            except BaseException as exc:  # noqa: BLE001 - what the test looks for
                errors.append(exc)
        t = threading.Thread(target=consume)
        t.start()
        started.wait(5)
        time.sleep(0.02)
        dp.close()
        t.join(20)
        assert not t.is_alive()
        assert all(isinstance(e, RuntimeError) for e in errors), errors


def test_restore_from_checkpoint_needs_a_state():
    @provider(input_types=[integer_value(10)])
    def process(settings, filename):
        yield [1]

    dp = process(["f"], batch_size=1)
    for bad in (5, None, [1]):
        with pytest.raises(TypeError, match="restore_from_checkpoint"):
            dp.restore_from_checkpoint(bad)


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

def test_next_minibatch_takes_an_int_only(tmp_path):
    src = ctf_source(ctf_file(tmp_path))
    mem = ctfio.MinibatchSourceFromData(dict(x=np.zeros((10, 2), np.float32)))

    @provider(input_types=[integer_value(10)])
    def process(settings, filename):
        yield [1]
    dp = process(["f"], batch_size=1)
    for s in (src, mem, dp):
        for bad in ("10", 10.5, True, None):
            with pytest.raises(TypeError):
                s.next_minibatch(bad)
    assert src.get_checkpoint_state()["minibatchSourcePosition"] == 0
    for s in (src, mem, dp):   # NumPy integers are integers
        assert s.next_minibatch(np.int64(1))
    with pytest.raises(TypeError):
        src.restore_from_checkpoint(5)


def test_changed_file_raises_data_changed_error(tmp_path):
    path = ctf_file(tmp_path, n=1000)
    src = ctf_source(path, randomize=False, chunk_size_in_bytes=1000)
    src.next_minibatch(5)
    with open(path, "a") as f:
        f.write("|x 1 2\n" * 50)
    with pytest.raises(ctfio.DataChangedError, match="changed") as info:
        for _ in range(300):
            src.next_minibatch(50)
    assert isinstance(info.value, ctfio.ParseError) and isinstance(info.value, ctfio.CTFError)
    assert info.value.code == "CTF_ECHANGED"


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_ctrl_c_never_loses_a_minibatch(tmp_path):
    """SIGINT while next_minibatch runs: either the minibatch is delivered (and the interrupt
    raised after), or the position is where it was before the call."""
    path = ctf_file(tmp_path, n=300000)
    main = threading.get_ident()
    outcomes = set()
    for delay in (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1):
        src = ctf_source(path, randomize=False)
        before = src.get_checkpoint_state()["minibatchSourcePosition"]
        got = None
        timer = threading.Timer(delay, signal.pthread_kill, (main, signal.SIGINT))
        try:
            timer.start()
            got = src.next_minibatch(200000)
            time.sleep(0.3)                 # a late interrupt lands here
            outcomes.add("none")
        except KeyboardInterrupt:
            outcomes.add("delivered" if got is not None else "taken back")
        finally:
            timer.join()
        after = src.get_checkpoint_state()["minibatchSourcePosition"]
        if got is None:
            assert after == before, delay
        else:
            assert after == before + got[src.streams.x].global_samples, delay
            assert got[src.streams.x].num_samples == 200000
        # the source goes on as if nothing happened
        mb = src.next_minibatch(7)
        assert mb[src.streams.x].values[0, 0] == after
        src.close()
    assert outcomes - {"none"}, outcomes


def test_in_memory_source_takes_back_an_interrupted_minibatch(monkeypatch):
    from ctfio import data
    src = ctfio.MinibatchSourceFromData(dict(x=np.arange(20, dtype=np.float32).reshape(10, 2)))
    src.next_minibatch(3)
    real = data._Stream.take

    def interrupted(self, idx):
        raise KeyboardInterrupt
    monkeypatch.setattr(data._Stream, "take", interrupted)
    with pytest.raises(KeyboardInterrupt):
        src.next_minibatch(4)
    monkeypatch.setattr(data._Stream, "take", real)
    assert src.get_checkpoint_state()["position"] == 3
    assert src.next_minibatch(4)[src.streams.x].values[:, 0].tolist() == [6, 8, 10, 12]
