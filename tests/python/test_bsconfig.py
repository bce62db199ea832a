"""CNTK configuration files as they are, from Python: a real CNTK file read through
MinibatchSource.from_config with only DataDir given, and corpora and joined deserializers
reported by _ctfio.bsconfig_load."""
import os

import ctfio
from ctfio import _ctfio

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "configs")


def test_real_config_from_python(tmp_path):
    (tmp_path / "cmudict-0.7b.train-dev-20-21.ctf").write_text(
        "0 |S0 3:1 |S1 4:1\n0 |S0 5:1 |S1 6:1\n1 |S0 7:1 |S1 8:1\n")
    src = ctfio.MinibatchSource.from_config(os.path.join(CONFIGS, "G2P.cntk"), section="train",
                                            overrides=["DataDir=%s" % tmp_path],
                                            max_sweeps=1)
    info = {s.name: s for s in src.stream_infos()}
    assert sorted(info) == ["rawInput", "rawLabels"]
    mb = src.next_minibatch(100)
    assert mb[info["rawInput"]].num_samples == 3
    d = _ctfio.bsconfig_load(os.path.join(CONFIGS, "ATIS.cntk"), "Test", ["DataDir=/x"])
    assert d["path"] == "/x/ATIS.test.cntk.sparse" and d["randomize"] is False
    assert [s[:3] for s in d["streams"]] == [("featuresPW", "PW", 944), ("featuresCW", "CW", 944),
                                             ("featuresNW", "NW", 944), ("labels", "L", 127)]


def test_corpus_and_joins_are_reported(tmp_path):
    d = _ctfio.bsconfig_load(os.path.join(CONFIGS, "ctfio", "composite.cntk"),
                             overrides=["DataDir=/d"])
    assert d["paths"] == ["/d/features-a.ctf", "/d/features-b.ctf"]
    assert len(d["joins"]) == 1
    paths, streams, skip, origin = d["joins"][0]
    assert paths == ["/d/labels.ctf"] and streams == [("labels", "l", 2, True, False)]
    assert skip is False and origin.endswith("composite.cntk:28:17")
    # A plain configuration keeps the dict usable as Reader keyword arguments.
    plain = _ctfio.bsconfig_load(os.path.join(CONFIGS, "lr_bs.cntk"), "Train")
    assert "paths" not in plain and "joins" not in plain


def test_cntk_reader_test_sections_read_from_python(tmp_path):
    """Sections named as CNTK's reader tests name them (a leading digit), read for real: a
    plain one and a composite one whose two files are joined by sequence id."""
    (tmp_path / "1x1.txt").write_text("".join("|F %d\n" % i for i in range(5)))
    cfg = os.path.join(CONFIGS, "ctfio", "reader_tests.cntk")
    src = ctfio.MinibatchSource.from_config(cfg, section="1x1",
                                            overrides=["DataDir=%s" % tmp_path], max_sweeps=1)
    (info,) = src.stream_infos()
    mb = src.next_minibatch(10)
    assert mb[info].asarray().ravel().tolist() == [0, 1, 2, 3, 4]
    (tmp_path / "5x10_jagged.txt").write_text(
        "".join("%d |F %s\n" % (s, " ".join(["%d" % s] * 10))
                for s in range(5) for _ in range(1 + s % 2)))
    (tmp_path / "5x5_jagged.txt").write_text(
        "".join("%d |L %s\n" % (s, " ".join(["%d" % (10 * s)] * 5)) for s in range(5)))
    src = ctfio.MinibatchSource.from_config(cfg, section="5x10_and_5x5_jagged_composite",
                                            overrides=["DataDir=%s" % tmp_path], max_sweeps=1)
    info = {s.name: s for s in src.stream_infos()}
    mb = src.next_minibatch(100)
    assert mb[info["features"]].num_sequences == mb[info["labels"]].num_sequences == 5
    assert mb[info["features"]].num_samples == 7
    assert sorted(int(v) for v in mb[info["labels"]].asarray()[:, 0, 0]) == [0, 10, 20, 30, 40]


def test_network_forms_and_early_close_from_python():
    d = _ctfio.bsconfig_load(os.path.join(CONFIGS, "ctfio", "network_forms.cntk"), "write",
                             ["DataDir=/x"])
    assert d["path"] == "/x/test.ctf"
    d = _ctfio.bsconfig_load(os.path.join(CONFIGS, "ctfio", "early_close.cntk"), "Train",
                             ["DataDir=/x"])
    assert d["path"] == "/x/early.ctf"


def test_sample_window_without_a_size_is_the_whole_data_set(tmp_path):
    """sampleBasedRandomizationWindow without randomizationWindow shuffles over the whole data
    set: the first minibatch draws from all of it, not from its first 128 samples."""
    n = 3000
    data = tmp_path / "d.ctf"
    data.write_text("".join("|x %d\n" % i for i in range(n)))

    def first_batch(extra):
        cfg = tmp_path / "w.cntk"
        cfg.write_text('reader = [ file = "%s"; randomize = true; randomizationSeed = 5\n'
                       '  sampleBasedRandomizationWindow = true; chunkSizeInBytes = 512\n%s\n'
                       '  input = [ x = [ dim = 1; format = "dense" ] ] ]\n' % (data, extra))
        src = ctfio.MinibatchSource.from_config(str(cfg), max_sweeps=1)
        (info,) = src.stream_infos()
        return [int(v) for v in src.next_minibatch(200)[info].asarray().ravel()]

    whole = first_batch("")
    small = first_batch("randomizationWindow = 128")
    # Chunks are about 80 lines: a window of 128 samples mixes a few chunks at a time, the
    # whole data set mixes all of them.
    def blocks(values):
        return len({v // 100 for v in values})

    assert blocks(small) <= 10 and blocks(whole) >= 25, (blocks(small), blocks(whole))
    d = _ctfio.bsconfig_load(str(tmp_path / "w.cntk"))
    assert d["randomization_window"] == 128 and d["window_in_samples"] is True
