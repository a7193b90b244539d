"""The datasets of bench/python_dataset.py, in a module of their own that imports neither torch nor ferry:
both loaders' worker processes load them by name, as they would a training project's module."""
import os

import numpy as np


class MemoryImages:
    def __init__(self, length, distinct=32):
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 256, size=(3, 224, 224), dtype=np.uint8) for _ in range(distinct)]
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return {"image": self.images[index % len(self.images)], "label": np.int64(index % 1000)}


class SmallSamples:
    def __init__(self, length):
        self.features = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return {"features": self.features[index % 256], "label": np.int64(index)}


class JpegFiles:
    def __init__(self, files, length):
        self.files = files
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        from PIL import Image

        with Image.open(self.files[index % len(self.files)]) as image:
            image = np.asarray(image.convert("RGB").resize((224, 224), Image.BILINEAR))
        if np.random.default_rng(index).random() < 0.5:
            image = image[:, ::-1]
        return {"image": np.ascontiguousarray(image.transpose(2, 0, 1)), "label": np.int64(index % 1000)}


class PythonWork:
    def __init__(self, length, loops=4000):
        self.length = length
        self.loops = loops

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        total = index
        for i in range(self.loops):  # pure Python: holds the GIL throughout
            total = (total * 31 + i) % 1000003
        return {"values": np.full(64, total, dtype=np.int64), "label": np.int64(index)}


def make_jpegs(folder, count):
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    files = []
    rng = np.random.default_rng(1)
    for i in range(count):
        path = os.path.join(folder, f"{i:04d}.jpg")
        if not os.path.exists(path):
            base = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
            Image.fromarray(base).resize((320, 256), Image.BICUBIC).save(path, quality=90)
        files.append(path)
    return files
