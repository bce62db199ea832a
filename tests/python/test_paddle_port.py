"""Porting PaddlePaddle providers unchanged: a single input's bare values, should_shuffle given
as a word, and define_py_data_sources2 as a trainer configuration calls it. The providers below
are written as PaddlePaddle's own examples write them (language model, autoencoder, a
trainer configuration module)."""

import logging
import sys

import numpy as np
import pytest

from ctfio.paddle import (
    DataProvider,
    SampleError,
    define_py_data_sources2,
    dense_vector,
    integer_value,
    integer_value_sequence,
    integer_value_sub_sequence,
    provider,
    sparse_binary_vector,
)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


# ---------------------------------------------------------------------------------------------
# one input: the value itself
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def corpus(tmp_path):
    text = write_lines(tmp_path / "text.txt", ["4 8 15", "16 23", "42"])
    return write_lines(tmp_path / "train.list", [text])


def test_language_model_yields_the_sequence_itself(corpus):
    @provider(input_types=[integer_value_sequence(100)], should_shuffle=False)
    def process(settings, filename):
        with open(filename) as f:
            for line in f:
                yield [int(w) for w in line.split()]

    (batch,) = list(process(corpus, batch_size=3))
    words = batch[0]
    assert words.ids.tolist() == [4, 8, 15, 16, 23, 42]
    assert words.seq_starts.tolist() == [0, 3, 5, 6]


def test_autoencoder_yields_a_bare_dense_vector(tmp_path):
    data = write_lines(tmp_path / "x.txt", ["0.1 0.2 0.3", "0.4 0.5 0.6"])

    @provider(input_types={"pixel": dense_vector(3)}, should_shuffle=False)
    def process(settings, filename):
        with open(filename) as f:
            for line in f:
                yield [float(v) for v in line.split()]

    (batch,) = list(process([data], batch_size=2))
    np.testing.assert_allclose(batch["pixel"].value, [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]],
                               rtol=1e-6)


def test_bare_integer_and_sparse_values(tmp_path):
    @provider(input_types=[integer_value(10)], should_shuffle=False)
    def labels(settings, filename):
        yield 3
        yield 7

    @provider(input_types=[sparse_binary_vector(20)], should_shuffle=False)
    def bags(settings, filename):
        yield [1, 5, 19]
        yield []

    assert list(labels(["f"], batch_size=2))[0][0].ids.tolist() == [3, 7]
    (b,) = list(bags(["f"], batch_size=2))
    assert b[0].indices.tolist() == [1, 5, 19] and b[0].indptr.tolist() == [0, 3, 3]


def test_the_one_item_list_form_still_reads(tmp_path):
    """`yield [3]` (the sample as a list in input order) and `yield 3` give the same batch;
    calc_batch_size always sees the list form."""
    seen = []

    def units(sample):
        seen.append(sample)
        return 1

    def make(bare):
        @provider(input_types=[integer_value_sequence(50)], should_shuffle=False,
                  calc_batch_size=units)
        def process(settings, filename):
            for s in ([1, 2], [3], [4, 5, 6]):
                yield s if bare else [s]
        return process

    bare = list(make(True)(["f"], batch_size=3))[0][0]
    listed = list(make(False)(["f"], batch_size=3))[0][0]
    assert bare.ids.tolist() == listed.ids.tolist() == [1, 2, 3, 4, 5, 6]
    assert bare.seq_starts.tolist() == listed.seq_starts.tolist() == [0, 2, 3, 6]
    assert seen[:3] == [[[1, 2]], [[3]], [[4, 5, 6]]]


def test_a_dict_is_still_keyed_by_name_and_a_bad_value_is_reported():
    @provider(input_types={"w": integer_value_sub_sequence(9)}, should_shuffle=False)
    def process(settings, filename):
        yield {"w": [[1, 2], [3]]}
        yield "not a sequence"

    dp = process(["f"], batch_size=1)
    it = iter(dp)
    assert next(it)["w"].ids.tolist() == [1, 2, 3]
    with pytest.raises(SampleError, match="sample 1"):
        next(it)


# ---------------------------------------------------------------------------------------------
# should_shuffle as PaddlePaddle reads it
# ---------------------------------------------------------------------------------------------

def id_order(should_shuffle, is_train, caplog=None):
    @provider(input_types=[integer_value(1000)], should_shuffle=should_shuffle)
    def process(settings, filename):
        for i in range(40):
            yield int(filename[1:]) * 100 + i

    return [int(x) for b in process(["f0", "f1", "f2"], batch_size=8, is_train=is_train)
            for x in b[0].ids]


@pytest.mark.parametrize("word, shuffled", [
    ("t", True), ("TRUE", True), ("On", True), (1, True),
    ("f", False), ("False", False), ("OFF", False), (0, False)])
def test_should_shuffle_words(word, shuffled):
    in_order = sorted(id_order(False, True))
    got = id_order(word, is_train=not shuffled)  # the word, not is_train, decides
    assert sorted(got) == in_order
    assert (got != in_order) == shuffled


def test_an_unknown_should_shuffle_warns_and_takes_the_default(caplog):
    with caplog.at_level(logging.WARNING, logger="ctfio.provider"):
        train = id_order("yes", is_train=True)
        test = id_order("maybe", is_train=False)
    assert [r for r in caplog.records if "should_shuffle" in r.getMessage()
            and "'yes'" in r.getMessage()]
    assert test == sorted(test) and train != sorted(train)


# ---------------------------------------------------------------------------------------------
# define_py_data_sources2
# ---------------------------------------------------------------------------------------------

PROVIDER_MODULE = '''
from ctfio.paddle import *

def hook(settings, dictionary=None, **kwargs):
    settings.dictionary = dictionary
    settings.input_types = [integer_value(len(dictionary)), integer_value(2)]
    settings.train = kwargs["is_train"]

@provider(init_hook=hook)
def process(settings, filename):
    for line in open(filename):
        label, word = line.split()
        yield [settings.dictionary[word], int(label)]

@provider(input_types=[integer_value(10)], should_shuffle=False)
def process_test(settings, filename):
    for line in open(filename):
        yield int(line.split()[0]) + 5
'''


@pytest.fixture
def trainer_config(tmp_path, monkeypatch):
    (tmp_path / "sentiment_provider.py").write_text(PROVIDER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = write_lines(tmp_path / "d.txt", ["1 good", "0 bad", "1 fine"])
    yield (write_lines(tmp_path / "train.list", [data]),
           write_lines(tmp_path / "test.list", [data]))
    sys.modules.pop("sentiment_provider", None)


def test_define_py_data_sources2_binds_module_obj_and_args(trainer_config):
    train_list, test_list = trainer_config
    words = {"good": 0, "bad": 1, "fine": 2}
    train, test = define_py_data_sources2(train_list, test_list, module="sentiment_provider",
                                          obj="process", args={"dictionary": words},
                                          batch_size=3)
    assert isinstance(train, DataProvider) and isinstance(test, DataProvider)
    assert train.is_train and not test.is_train
    assert train.settings.train is True and test.settings.train is False
    assert train._shuffle and not test._shuffle
    (b,) = list(test)
    assert b[0].ids.tolist() == [0, 1, 2] and b[1].ids.tolist() == [1, 0, 1]
    assert sorted(list(train)[0][0].ids.tolist()) == [0, 1, 2]


def test_define_py_data_sources2_pairs_and_no_test_list(trainer_config):
    train_list, test_list = trainer_config
    train, test = define_py_data_sources2(train_list, test_list, module="sentiment_provider",
                                          obj=("process", "process_test"),
                                          args=({"dictionary": {"good": 0, "bad": 1,
                                                                "fine": 2}}, None),
                                          batch_size=3)
    assert list(test)[0][0].ids.tolist() == [6, 5, 6]
    only_train, none = define_py_data_sources2(train_list, None, "sentiment_provider",
                                               "process", args={"dictionary": {"good": 0,
                                                                              "bad": 1,
                                                                              "fine": 2}})
    assert none is None and only_train.is_train
    with pytest.raises(TypeError, match="not a @provider"):
        define_py_data_sources2(train_list, None, "sentiment_provider", "hook")
    with pytest.raises(ModuleNotFoundError):
        define_py_data_sources2(train_list, None, "no_such_provider_module", "process")


# ---------------------------------------------------------------------------------------------
# next_minibatch's device
# ---------------------------------------------------------------------------------------------

def test_next_minibatch_device_goes_through_the_staging():
    """None or the CPU: host ProviderData. Another PyTorch device: the batch is staged onto it
    (the 'meta' device runs that path without a GPU: tensors there have shapes, no data)."""
    torch = pytest.importorskip("torch")

    @provider(input_types={"x": dense_vector(4), "y": integer_value(3)}, should_shuffle=False)
    def process(settings, filename):
        for i in range(10):
            yield {"x": [float(i)] * 4, "y": i % 3}

    dp = process(["f"])
    host = dp.next_minibatch(4)
    cpu = dp.next_minibatch(4, device="cpu")
    assert [type(d).__name__ for d in host.values()] == ["ProviderData"] * 2
    assert cpu[dp.stream_infos()[0]].value.tolist()[0] == [4.0] * 4
    staged = dp.next_minibatch(2, device=torch.device("meta"))
    x, y = (staged[si] for si in dp.stream_infos())
    assert type(x).__name__ == "StagedData" and x.value.device.type == "meta"
    assert tuple(x.value.shape) == (2, 4) and tuple(y.ids.shape) == (2,)
    assert x.num_samples == 2
