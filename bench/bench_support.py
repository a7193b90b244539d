"""What the Python benchmarks share: running a command (its output in the error when it fails) and listing an
image folder in ferry's image_folder order. Used by bench/loaders.py and bench/augment.py."""
import os
import subprocess


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
