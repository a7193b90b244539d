"""Datasets and transforms for test_python_dataset.py, in a module of their own so that worker processes
import them by name (as they do a user's module)."""

import os
import time

import numpy as np

import ferry


class ArrayDataset:
    """Deterministic samples of the given fields: ``{name: (dtype, shape)}``; a shape whose first entry is
    None varies in length per sample, from 0 to ``max_length``."""

    def __init__(self, length, fields, seed=0, max_length=9):
        self.length = length
        self.fields = fields
        self.seed = seed
        self.max_length = max_length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if not 0 <= index < self.length:
            raise IndexError(index)
        rng = np.random.default_rng([self.seed, index])
        sample = {}
        for name, (dtype, shape) in self.fields.items():
            if shape and shape[0] is None:
                shape = (int(rng.integers(0, self.max_length + 1)),) + tuple(shape[1:])
            if np.dtype(dtype).kind == "f":
                sample[name] = rng.standard_normal(shape).astype(dtype)
            else:
                info = np.iinfo(dtype)
                sample[name] = rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, dtype=dtype)
        return sample


class RandomDataset:
    """Draws from ferry.sample_rng(): another value every epoch, the same on every run."""

    def __len__(self):
        return 40

    def __getitem__(self, index):
        epoch, at = ferry.sample_info()
        assert at == index
        return {"x": ferry.sample_rng().integers(0, 1 << 30, size=(3,)), "epoch": epoch, "index": index}


class FailingDataset(ArrayDataset):
    """Raises, dies or stalls on the samples it is told to."""

    def __init__(self, length, how, bad):
        super().__init__(length, {"x": ("int32", (4,))})
        self.how = how
        self.bad = set(bad)

    def __getitem__(self, index):
        if index in self.bad:
            if self.how == "raise":
                raise ValueError(f"sample {index} is broken")
            if self.how == "exit":
                os._exit(7)
            if self.how == "kill":
                os.kill(os.getpid(), 9)
            if self.how == "stall":
                time.sleep(3600)
            if self.how == "shape":
                return {"x": np.zeros(5, dtype=np.int32)}
            if self.how == "dtype":
                return {"x": np.zeros(4, dtype=np.float64)}
            if self.how == "missing":
                return {"y": np.zeros(4, dtype=np.int32)}
            if self.how == "list":
                return [1, 2, 3]
            if self.how == "sys.exit":
                raise SystemExit(3)
        return super().__getitem__(index)


class SlowDataset(ArrayDataset):
    def __getitem__(self, index):
        time.sleep(0.5)
        return super().__getitem__(index)


def make_arrays(length, seed=0):
    """A factory for YAML: source: {kind: python, dataset: python_datasets:make_arrays, args: {...}}."""
    return ArrayDataset(length, {"image": ("uint8", (3, 8, 8)), "label": ("int64", ())}, seed=seed)


def arrays_counted_in(path, seed=0):
    """make_arrays with its length read from the file at `path` (a YAML arg that names a file)."""
    with open(path) as f:
        return make_arrays(int(f.read()), seed=seed)


def add_noise(sample, scale=1):
    """A python transform: a float copy of the image plus noise from sample_rng(), and the label doubled."""
    noise = ferry.sample_rng().integers(0, 3, size=sample["image"].shape)
    return {"noisy": sample["image"].astype(np.float32) + scale * noise.astype(np.float32),
            "label": sample["label"] * 2}


class BigEndianDataset(ArrayDataset):
    """Arrays in the other byte order (as read from some files): delivered as their values."""

    def __getitem__(self, index):
        return {name: value.astype(value.dtype.newbyteorder(">")) for name, value in super().__getitem__(index).items()}
