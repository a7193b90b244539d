"""Fails when docs/design.md's index of Notes and the code disagree, or when a Note cited anywhere is gone.

Every `Note [name]` block in the code and the tests (a comment line holding only the Note's name) must
be listed in the index with its file, and every listed Note must stand in that file. Every Note cited in
the code, the tests, README.md or a page of docs/ must exist. Usage: check_notes_index.py ROOT
"""

import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
# Where Notes are defined and cited: C++ of the libraries, programs and tests.
code_folders = ["pipeline", "io", "stages", "assembly", "copy", "cli", "python/src", "tests"]
code = sorted(p for folder in code_folders for p in (root / folder).rglob("*") if p.suffix in (".h", ".cpp", ".cu"))
# Where Notes are only cited: the tests' scripts and CMake, the README and the docs.
prose = sorted(p for p in (root / "tests").rglob("*") if p.suffix in (".py", ".cmake", ".txt", ".supp", ".yaml"))
prose += [root / "README.md"] + sorted((root / "docs").glob("*.md"))
this_script = pathlib.Path(__file__).resolve()
index = (root / "docs/design.md").read_text()
listed = dict(re.findall(r"^\| \[([^\]]+)\] \| `([^`]+)` \|", index, re.M))
# How the docs write a Note's name in general, not a citation.
placeholders = {"name", "..."}

defined: dict[str, str] = {}
cited: list[tuple[str, str]] = []
for path in code + prose:
    if path.resolve() == this_script or not path.is_file():
        continue
    name_of = str(path.relative_to(root))
    for line in path.read_text(errors="replace").splitlines():
        block = re.fullmatch(r"\s*//+ Note \[([^\]]+)\]\s*", line) if path.suffix in (".h", ".cpp", ".cu") else None
        if block:
            defined[block.group(1)] = name_of
        else:
            cited += [(name_of, note) for note in re.findall(r"Note \[([^\]]+)\]", line) if note not in placeholders]

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
