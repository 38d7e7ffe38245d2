#!/usr/bin/env python3
"""Fails when an #include points up a floor.

The floors are the fenced ```floors block of docs/ARCHITECTURE.md, top floor
first; a file may include its own floor and any floor below it. A folder's
subfolders (graph/passes, quant/ukernels, ...) are on the folder's floor.
Only quoted includes of the project's own headers are read; system headers
(<...>) are not the floor plan's business.

    check_floors.py [--root DIR] [--doc FILE]

Prints one line per upward include, `file:line: ...`, and exits 1 if any.
Standard library only: it runs before the venv exists.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_floors(doc: pathlib.Path) -> list[str]:
    m = re.search(r"```floors\n(.*?)```", doc.read_text(), re.S)
    if not m:
        sys.exit(f"{doc}: no ```floors block")
    floors = [line.split("#")[0].strip() for line in m.group(1).splitlines()]
    return [f for f in floors if f]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=pathlib.Path(__file__).resolve().parents[2], type=pathlib.Path)
    ap.add_argument("--doc", type=pathlib.Path)
    args = ap.parse_args()
    root = args.root
    floors = read_floors(args.doc or root / "docs" / "ARCHITECTURE.md")
    # Top floor first in the doc: height = distance from the ground.
    height = {name: len(floors) - 1 - i for i, name in enumerate(floors)}
    bad = 0
    checked = 0
    for folder in floors:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".cc", ".hpp"):
                continue
            checked += 1
            rel = path.relative_to(root)
            for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1).split("/")[0]
                if target not in height:
                    continue  # a header beside the file, or not the project's
                if height[target] > height[folder]:
                    print(f"{rel}:{lineno}: {folder}/ (floor {height[folder]}) includes "
                          f'"{m.group(1)}" from {target}/ (floor {height[target]}), which is above it')
                    bad += 1
    if checked == 0:
        print(f"{root}: no sources found under {', '.join(floors)}")
        return 1
    print(f"check_floors: {checked} files, {bad} upward include(s); floors bottom up: "
          + " < ".join(reversed(floors)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
