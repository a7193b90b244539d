"""What the Python benchmarks share: running a command (its output in the error when it fails), making an
image folder once and listing it in ferry's image_folder order, and the plots: each benchmark draws a PNG beside
its JSON with these helpers (matplotlib), and again from the JSON alone with --plot; bench/plot.py draws the
C++ benchmarks' JSON with them too."""
import json
import os
import shutil
import subprocess
import textwrap


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


def read_json(path):
    with open(path) as f:
        return json.load(f)


def png_beside(json_path):
    """Where a benchmark's plot goes: beside its JSON, under the same name."""
    return os.path.splitext(json_path)[0] + ".png"


def figure(panels, title, rows=1, width=5.5, height=3.8):
    """A figure of `panels` axes (in `rows` rows) and a title over them: (figure, [axes]), or (None, [None, ...])
    where matplotlib is not installed (pyplot() has said so)."""
    plt = pyplot()
    if plt is None:
        return None, [None] * panels
    columns = -(-panels // rows)
    drawn, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    axes = list(axes.flat)
    for spare in axes[panels:]:
        spare.set_visible(False)
    drawn.suptitle(title, fontsize=9)
    return drawn, axes[:panels]


def save(drawn, path):
    """Writes the figure to `path` (a PNG) and frees it."""
    drawn.tight_layout()
    drawn.savefig(path, dpi=120)
    pyplot().close(drawn)
    print(f"plot: {path}")


def bars(axis, groups, series, ylabel, value_format="{:.0f}"):
    """Bars side by side in each of `groups` (the x labels): `series` maps a legend label to one value a group
    (None: no bar there). Each bar is labelled with its value in `value_format` (None: not labelled), so the
    figures can be read off the plot; long group names are wrapped."""
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        kept = [(g + offset, v) for g, v in enumerate(values) if v is not None]
        if not kept:
            continue
        drawn = axis.bar([x for x, _ in kept], [v for _, v in kept], width, label=label)
        if value_format:
            axis.bar_label(drawn, [value_format.format(v) for _, v in kept], fontsize=7)
    wrapped = ["\n".join(textwrap.fill(line, 16, break_on_hyphens=False) for line in group.split("\n"))
               for group in groups]
    axis.set_xticks(range(len(groups)), wrapped, fontsize=8)
    axis.set_ylabel(ylabel)
    axis.margins(y=0.12 if len(series) == 1 else 0.3)  # room for the labels and the legend above the bars
    if len(series) > 1:
        axis.legend(fontsize=7, loc="upper left")


def lines(axis, series, xlabel, ylabel, styles=None, log_y=False):
    """One line a legend label of `series` (a label to [(x, y), ...]; a label with no points is left out),
    with markers at the measured points; `styles` maps a label to matplotlib keywords (a baseline dashed).
    The y axis starts at 0, or is logarithmic with `log_y` (rates that differ by orders of magnitude)."""
    for label, points in series.items():
        if points:
            points = sorted(points)
            style = {"marker": "o", **(styles or {}).get(label, {})}
            axis.plot([x for x, _ in points], [y for _, y in points], label=label, **style)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    if log_y:
        axis.set_yscale("log")
    else:
        axis.set_ylim(bottom=0)
    axis.legend(fontsize=7)


def ratio_lines(axis, series, xlabel, ylabel):
    """lines() of ratios, each point labelled with its value, and the line where both sides are equal (1.0)."""
    axis.axhline(1.0, color="gray", linestyle=":", linewidth=1)
    lines(axis, series, xlabel, ylabel)
    values = [y for points in series.values() for _, y in points]
    for points in series.values():
        for x, y in points:
            axis.annotate(f"{y:.2f}x", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    axis.set_ylim(0, 1.2 * max(values + [1.0]))  # room for the labels above the highest point


def threads_axis(axis, counts):
    """An x axis of thread (or worker, or device) counts 1, 2, 4, ...: doubling at equal steps, ticks where
    something was measured."""
    counts = sorted(set(counts))
    if len(counts) > 1 and counts[0] > 0:
        axis.set_xscale("log", base=2)
    axis.set_xticks(counts, [str(c) for c in counts])
    axis.minorticks_off()


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


def made_before(stamp, wanted, paths, name, log):
    """Whether `paths` (a dataset's files or folder) hold what a run with the settings `wanted` made, as
    `stamp` records. Otherwise they are removed when the stamp says a benchmark made them with other
    settings (or some of them are gone), and refused when they exist without it (an empty folder is no
    dataset); then False, and the caller makes the dataset and calls stamp_made()."""
    if os.path.exists(stamp):
        with open(stamp) as f:
            same = json.load(f) == wanted
        if same and all(os.path.exists(p) for p in paths):
            return True
        log(f"{name} " + ("is missing files" if same else "was made by an earlier run with other settings") +
            ": making it again")
        for path in paths:  # the stamp says a benchmark made them
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
        if os.path.exists(stamp):
            os.remove(stamp)
    elif any(os.path.exists(p) and not (os.path.isdir(p) and not os.listdir(p)) for p in paths):
        raise RuntimeError(f"{name} exists without {stamp}: remove it or pass another --data")
    return False


def stamp_made(stamp, wanted):
    """Records the settings a dataset was made with, for made_before()."""
    with open(stamp, "w") as f:
        json.dump(wanted, f)


def make_image_folder(ferry, root, samples, image_size, stamp_name, log):
    """`ferry make-dataset images ROOT` with `samples` images of `image_size` (N, HxW or imagenet), unless
    ROOT already holds what a run with the same settings made (ROOT/stamp_name records them)."""
    stamp = os.path.join(root, stamp_name)
    wanted = {"samples": samples, "image_size": image_size}
    if made_before(stamp, wanted, [root], root, log):
        return
    log(f"making {samples} JPEGs ({image_size}) in {root}")
    log(run([ferry, "make-dataset", "images", root, "--samples", samples, "--image-size", image_size]).stdout.strip())
    stamp_made(stamp, wanted)
