"""Fails when docs/design.md's index of Notes and the code disagree.

Every `Note [name]` block in the code (a comment line holding only the Note's name) must be listed in
the index with its file, every listed Note must stand in that file, and every Note the code cites
must exist. Usage: check_notes_index.py ROOT
"""

import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
folders = ["pipeline", "io", "stages", "assembly", "copy", "cli", "python/src"]
sources = sorted(p for folder in folders for p in (root / folder).rglob("*") if p.suffix in (".h", ".cpp"))
index = (root / "docs/design.md").read_text()
listed = dict(re.findall(r"^\| \[([^\]]+)\] \| `([^`]+)` \|", index, re.M))

defined: dict[str, str] = {}
cited: list[tuple[str, str]] = []
for path in sources:
    name_of = str(path.relative_to(root))
    for line in path.read_text().splitlines():
        block = re.fullmatch(r"\s*//+ Note \[([^\]]+)\]\s*", line)
        if block:
            defined[block.group(1)] = name_of
        else:
            cited += [(name_of, note) for note in re.findall(r"Note \[([^\]]+)\]", line)]

problems = []
for note, where in defined.items():
    if listed.get(note) != where:
        problems.append(f"Note [{note}] ({where}) is not in docs/design.md's index under its file")
for note, where in listed.items():
    if defined.get(note) != where:
        problems.append(f"docs/design.md lists Note [{note}] in {where}, which does not define it")
for where, note in cited:
    if note not in defined:
        problems.append(f"{where} cites Note [{note}], which no file defines")
if problems:
    print("Notes:\n  " + "\n  ".join(sorted(set(problems))))
    sys.exit(1)
print(f"Notes: all {len(defined)} defined, listed in docs/design.md with their files, every citation resolves")
