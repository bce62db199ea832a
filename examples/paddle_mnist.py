"""The seed's first PyDataProvider2 scenario: MNIST-style text files ``label;pixels`` read by a
@provider generator, batched by ctfio, and a softmax regression trained on the batches (NumPy).

It writes its own small data set (synthetic 28x28 "digits": a noisy prototype per class) under
a temporary directory, with a ``train.list`` / ``test.list`` naming the data files, exactly as
PaddlePaddle's documentation lays them out. Run: ``python examples/paddle_mnist.py``.
"""
# ruff: noqa: F405 - PaddlePaddle's provider files use PaddlePaddle's star import

import os
import tempfile

import numpy as np

from ctfio.paddle import *  # noqa: F401,F403 - PaddlePaddle's names: provider, dense_vector, ...

# --- PaddlePaddle's tutorial mnist_provider.py, unchanged but for the import ---------------------

@provider(input_types={"pixel": dense_vector(28 * 28), "label": integer_value(10)})
def process(settings, filename):  # settings is not used currently.
    f = open(filename, "r")  # open one of training file  # noqa: SIM115, UP015 - the tutorial's
    for line in f:  # read each line
        label, pixel = line.split(";")
        # get features and label
        pixels_str = pixel.split(" ")
        pixels_float = []
        for each_pixel_str in pixels_str:
            pixels_float.append(float(each_pixel_str))
        # give data to paddle.
        yield {"pixel": pixels_float, "label": int(label)}
    f.close()  # close file


# --- data: label;pixels lines, several files, a list file each for training and testing -------

def write_data(root, rng, n_files, per_file, prototypes, name):
    paths = []
    for k in range(n_files):
        path = os.path.join(root, "%s_%d.txt" % (name, k))
        with open(path, "w") as f:
            for _ in range(per_file):
                label = int(rng.integers(10))
                x = np.clip(prototypes[label] + rng.normal(0, 0.35, 784), 0, 1)
                f.write("%d;%s\n" % (label, " ".join("%.2f" % v for v in x)))
        paths.append(path)
    list_path = os.path.join(root, "%s.list" % name)
    with open(list_path, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    return list_path


def main():
    rng = np.random.default_rng(0)
    prototypes = (rng.random((10, 784)) < 0.2).astype(np.float64)
    with tempfile.TemporaryDirectory() as root:
        train_list = write_data(root, rng, 4, 300, prototypes, "train")
        test_list = write_data(root, rng, 1, 300, prototypes, "test")

        # training shuffles through a pool (seeded), testing reads in file order
        train = process(train_list, batch_size=64, is_train=True, seed=1)
        test = process(test_list, batch_size=100, is_train=False)

        w = np.zeros((784, 10), np.float32)
        b = np.zeros(10, np.float32)
        for epoch in range(3):
            loss_sum = seen = 0
            for batch in train:  # one pass
                x = batch["pixel"].value  # (n, 784) float32
                y = batch["label"].ids  # (n,) int64
                logits = x @ w + b
                logits -= logits.max(axis=1, keepdims=True)
                p = np.exp(logits)
                p /= p.sum(axis=1, keepdims=True)
                loss_sum += -np.log(p[np.arange(len(y)), y] + 1e-9).sum()
                seen += len(y)
                p[np.arange(len(y)), y] -= 1
                w -= 0.1 * x.T @ p / len(y)
                b -= 0.1 * p.mean(axis=0)
            correct = total = 0
            for batch in test:
                pred = (batch["pixel"].value @ w + b).argmax(axis=1)
                correct += int((pred == batch["label"].ids).sum())
                total += len(pred)
            print("pass %d: train loss %.3f, test accuracy %.3f" % (epoch, loss_sum / seen,
                                                                   correct / total))
        print("samples per pass: %d, pool peak %d, files opened %d"
              % (seen, train.stats()["pool_peak_samples"], train.stats()["files_opened"]))
        train.close()
        test.close()
        assert correct / total > 0.9, "the model should learn the synthetic digits"
        print("ok")


if __name__ == "__main__":
    main()
