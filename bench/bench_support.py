"""What the Python benchmarks share: running a command (its output in the error when it fails), making an
image folder once and listing it in ferry's image_folder order, matplotlib for the plots. Used by bench/loaders.py,
bench/augment.py and the benchmarks that draw a plot."""
import json
import os
import shutil
import subprocess


def pyplot():
    """matplotlib.pyplot drawing to files, or None (saying so) where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    return plt


def run(command, **kwargs):
    """Runs a command; on failure raises with its output, which says why."""
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} exited with {result.returncode}:\n"
                           f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def image_files(root):
    """The files in ferry's image_folder order: class folders by name, files by path within each."""
    files, labels = [], []
    classes = sorted(d for d in os.listdir(root) if not d.startswith(".") and os.path.isdir(os.path.join(root, d)))
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        found = []
        for here, dirs, names in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            found += [os.path.relpath(os.path.join(here, n), folder) for n in names
                      if not n.startswith(".") and n.lower().endswith((".jpg", ".jpeg"))]
        for relative in sorted(found, key=lambda p: p.encode()):
            files.append(os.path.join(folder, relative))
            labels.append(label)
    return files, labels


def make_image_folder(ferry, root, samples, image_size, stamp_name, log):
    """`ferry make-dataset images ROOT` with `samples` images of `image_size` (N, HxW or imagenet), unless
    ROOT already holds what a run with the same settings made (ROOT/stamp_name records them)."""
    stamp = os.path.join(root, stamp_name)
    wanted = {"samples": samples, "image_size": image_size}
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == wanted:
                return
        log(f"{root} was made by an earlier run with other settings: making it again")
        shutil.rmtree(root)  # the stamp says a benchmark made it
    elif os.path.exists(root) and os.listdir(root):
        raise RuntimeError(f"{root} exists without {stamp}: remove it or pass another --data")
    log(f"making {samples} JPEGs ({image_size}) in {root}")
    log(run([ferry, "make-dataset", "images", root, "--samples", samples, "--image-size", image_size]).stdout.strip())
    with open(stamp, "w") as f:
        json.dump(wanted, f)
