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
