#!/usr/bin/env python3
"""Writes WebDataset shards with Python's tarfile, for tar_shard_source_test's cross-check.

usage: write_tar.py OUT_DIR

For each format (ustar, pax, gnu) writes OUT_DIR/<format>.tar and OUT_DIR/<format>.manifest, one
line per member a reader must deliver, in archive order: key, extension and the data in hex, tab
separated. Keys and extensions come from WebDataset's own rule (the regex below), independently of
ferry's C++ code. Directories and a metadata member are written too; they are not in the manifest.
"""
import io
import random
import re
import sys
import tarfile

BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset.tariterators.base_plus_ext


def members(rng, fmt):
    long_dir = "d" * 60 + "/" + "e" * 60  # 121 bytes: over the 100-byte name field, splittable for ustar
    sizes = [0, 1, 511, 512, 513, 1024, 1025] + [rng.randrange(0, 3000) for _ in range(8)]
    names = []
    for i, size in enumerate(sizes):
        key = f"{long_dir}/{i:06d}" if i % 3 == 0 else f"part/{i:06d}"
        if fmt == "pax" and i == 4:
            key = "ünïcode/" + "x" * 120 + f"{i:06d}"  # non-ASCII and too long for ustar: pax path
        if fmt == "gnu" and i == 5:
            key = "g/" + "y" * 200 + f"{i:06d}"  # GNU long name
        exts = ["jpg", "cls", "seg.png"] if i % 2 == 0 else ["jpg", "cls", "JSON"]
        for ext in exts:
            data = bytes(rng.randrange(256) for _ in range(size if ext == "jpg" else rng.randrange(0, 40)))
            if ext == "cls":
                data = f"{rng.randrange(1000)}\n".encode()
            names.append((f"{key}.{ext}", data))
    return names


def main():
    out = sys.argv[1]
    rng = random.Random(20240607)
    formats = {"ustar": tarfile.USTAR_FORMAT, "pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT}
    for name, fmt in formats.items():
        pax_headers = {"comment": "ferry cross-check"} if fmt == tarfile.PAX_FORMAT else None  # a 'g' header
        with tarfile.open(f"{out}/{name}.tar", "w", format=fmt, pax_headers=pax_headers) as tar, open(f"{out}/{name}.manifest", "w",
                                                                             encoding="utf-8") as manifest:
            directory = tarfile.TarInfo("part")
            directory.type = tarfile.DIRTYPE
            tar.addfile(directory)
            meta = tarfile.TarInfo("__meta__")
            meta.size = 3
            tar.addfile(meta, io.BytesIO(b"abc"))
            for member_name, data in members(rng, name):
                info = tarfile.TarInfo(member_name)
                info.size = len(data)
                info.mtime = 1700000000
                tar.addfile(info, io.BytesIO(data))
                key, ext = BASE_PLUS_EXT.match(member_name).groups()
                manifest.write(f"{key}\t{ext.lower()}\t{data.hex()}\n")


if __name__ == "__main__":
    main()
