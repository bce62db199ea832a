"""The seed's second PyDataProvider2 scenario: sentiment classification of word-id sequences.
The dictionary (word -> id) reaches the provider through ``init_hook``, which also sets
``settings.input_types`` at run time; ``process`` turns each ``label<TAB>sentence`` line into
``{'data': [word ids], 'label': 0/1}``. The batches carry the sequences as one flat id array
plus start positions, which a bag-of-words logistic regression (NumPy) consumes directly.

It writes its own small corpus under a temporary directory. Run:
``python examples/paddle_sentiment.py``.
"""
# ruff: noqa: F405 - PaddlePaddle's provider files use PaddlePaddle's star import

import os
import tempfile

import numpy as np

from ctfio.paddle import *  # noqa: F401,F403 - PaddlePaddle's names

# --- PaddlePaddle's tutorial sentimental_provider.py, unchanged but for the import ---------------

def on_init(settings, dictionary, **kwargs):
    # on_init will invoke when data provider is initialized. The dictionary
    # is passed from trainer_config, and is a dict object with type
    # (word string => word id int).

    # set input types in runtime. It will do the same thing as
    # @provider(input_types) will do, but it is set dynamically during runtime.
    settings.input_types = {
        # The text is a sequence of integer values, and each value is a word id.
        # The whole sequence is the sentences that we want to predict its
        # sentimental.
        "data": integer_value_sequence(len(dictionary)),  # text input
        "label": integer_value(2),  # label positive/negative
    }

    # save dictionary as settings.dictionary.
    # It will be used in process method.
    settings.dictionary = dictionary


@provider(init_hook=on_init)
def process(settings, filename):
    f = open(filename, "r")  # noqa: SIM115, UP015 - PaddlePaddle's tutorial code, kept as it is

    for line in f:  # read each line of file
        label, sentence = line.split("\t")  # get label and sentence
        words = sentence.split(" ")  # get words

        # convert word string to word id
        # the word not in dictionary will be ignored.
        word_ids = []

        for each_word in words:
            if each_word in settings.dictionary:
                word_ids.append(settings.dictionary[each_word])

        # give data to paddle.
        yield {"data": word_ids, "label": int(label)}

    f.close()


# --- data --------------------------------------------------------------------------------------

POSITIVE = ["good", "great", "excellent", "wonderful", "enjoyable", "brilliant", "superb",
            "moving", "fun"]
NEGATIVE = ["bad", "awful", "boring", "terrible", "dull", "poor", "weak", "tedious", "mess"]
NEUTRAL = ["the", "a", "movie", "film", "plot", "actors", "story", "it", "was", "and", "is",
           "this", "very", "quite"]


def write_corpus(root, rng, name, n_files, per_file):
    paths = []
    for k in range(n_files):
        path = os.path.join(root, "%s_%d.txt" % (name, k))
        with open(path, "w") as f:
            for _ in range(per_file):
                label = int(rng.integers(2))
                mood = POSITIVE if label else NEGATIVE
                other = NEGATIVE if label else POSITIVE
                words = list(rng.choice(NEUTRAL, rng.integers(3, 12)))
                words += list(rng.choice(mood, rng.integers(1, 4)))
                if rng.random() < 0.3:
                    words.append(str(rng.choice(other)))
                rng.shuffle(words)
                f.write("%d\t%s\n" % (label, " ".join(words + ["<unk-%d>" % k])))
        paths.append(path)
    list_path = os.path.join(root, "%s.list" % name)
    with open(list_path, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    return list_path


def bag_of_words(batch, vocab):
    """(n, vocab) word counts from the flat ids and the sequence start positions."""
    data = batch["data"]
    rows = np.repeat(np.arange(data.num_sequences), np.diff(data.seq_starts))
    counts = np.zeros((data.num_sequences, vocab), np.float32)
    np.add.at(counts, (rows, data.ids), 1.0)
    return counts


def main():
    rng = np.random.default_rng(0)
    dictionary = {w: i for i, w in enumerate(sorted(set(POSITIVE + NEGATIVE + NEUTRAL)))}
    with tempfile.TemporaryDirectory() as root:
        train_list = write_corpus(root, rng, "train", 3, 400)
        test_list = write_corpus(root, rng, "test", 1, 300)
        # the dictionary travels like the tutorial's `args={'dictionary': word_dict}`
        train = process(train_list, batch_size=32, is_train=True, args={"dictionary": dictionary},
                        seed=3)
        test = process(test_list, batch_size=100, is_train=False,
                       args={"dictionary": dictionary})
        first = next(iter(test))
        print("a batch:", first["data"], "first sequence:",
              first["data"].ids[first["data"].seq_starts[0]:first["data"].seq_starts[1]])
        vocab = len(dictionary)
        w = np.zeros(vocab, np.float32)
        b = 0.0
        for epoch in range(3):
            for batch in train:
                x, y = bag_of_words(batch, vocab), batch["label"].ids
                p = 1 / (1 + np.exp(-(x @ w + b)))
                w -= 0.5 * x.T @ (p - y) / len(y)
                b -= 0.5 * float((p - y).mean())
            correct = total = 0
            for batch in test:
                pred = (bag_of_words(batch, vocab) @ w + b) > 0
                correct += int((pred == batch["label"].ids.astype(bool)).sum())
                total += len(pred)
            print("pass %d: test accuracy %.3f" % (epoch, correct / total))
        train.close()
        test.close()
        assert correct / total > 0.85, "the model should separate the two moods"
        print("ok")


if __name__ == "__main__":
    main()
