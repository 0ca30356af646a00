#!/usr/bin/env python3
"""Checks that meshnn's folders depend only downwards.

Every #include "meshnn/<area>/..." in include/meshnn/<area>/ and src/<area>/ must name an area
below it in LAYERS (or its own). Areas on one line are peers and may not include each other.
Prints each offending include and exits 1; exits 0 when the graph has no upward arrow (and so no
cycle). Run by ctest (meshnn_layering) and by hand: scripts/check_layers.py [ROOT].
"""
import pathlib
import re
import sys

LAYERS = [
    ["core"],
    ["mesh"],
    ["tensor"],
    ["kernels", "ccl"],
    ["ops"],
    ["distributed"],
    ["io"],
    ["text"],
    ["runtime"],
    ["serving"],
    ["server"],
    ["models"],
]
RANK = {area: rank for rank, areas in enumerate(LAYERS) for area in areas}
INCLUDE = re.compile(r'^\s*#\s*include\s+"meshnn/([a-z_]+)/')


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = []
    for base in (root / "include" / "meshnn", root / "src"):
        for path in sorted(base.rglob("*.[ch]pp")):
            area = path.relative_to(base).parts[0]
            if area not in RANK:
                problems.append(f"{path}: folder '{area}' is not in scripts/check_layers.py's LAYERS")
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == area:
                    continue
                target = m.group(1)
                if target not in RANK:
                    problems.append(f"{path}:{number}: includes unknown area '{target}'")
                elif RANK[target] >= RANK[area]:
                    problems.append(f"{path}:{number}: {area} includes {target} (layer {RANK[target]} is not below {RANK[area]})")
    for p in problems:
        print(p)
    if not problems:
        print("layers: every include points down (" + " < ".join("/".join(a) for a in LAYERS) + ")")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
