#!/usr/bin/env python3
"""Checks that the top-level modules of shardbox-core import each other without cycles.

For every module (a folder or a file directly under core/src), collects the other top-level
modules its non-test code names as `crate::<module>`, ignoring doc comments and everything
from the first `#[cfg(test)]` on. Prints the dependency graph and exits 1 on a cycle.
Usage: python3 scripts/layer-check.py [core/src]
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "core", "src")
tops = sorted(
    n[:-3] if n.endswith(".rs") else n
    for n in os.listdir(root)
    if n != "lib.rs" and (n.endswith(".rs") or os.path.isdir(os.path.join(root, n)))
)
deps = {t: set() for t in tops}
for top in tops:
    path = os.path.join(root, top)
    files = [path + ".rs"] if os.path.isfile(path + ".rs") else [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")
    ]
    for f in files:
        text = open(f, encoding="utf-8").read()
        text = text.split("#[cfg(test)]")[0]
        code = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
        for m in re.finditer(r"\bcrate::([a-z_]+)", code):
            if m.group(1) in deps and m.group(1) != top:
                deps[top].add(m.group(1))

for t in tops:
    print(f"{t:10} -> {', '.join(sorted(deps[t])) or '-'}")

state = {}
def visit(n, stack):
    state[n] = "open"
    for d in sorted(deps[n]):
        if state.get(d) == "open":
            cycle = stack[stack.index(d):] + [d]
            print("cycle: " + " -> ".join(cycle))
            sys.exit(1)
        if d not in state:
            visit(d, stack + [d])
    state[n] = "done"

for t in tops:
    if t not in state:
        visit(t, [t])
print("no import cycle among the top-level modules of core")

# Inside each folder: the files (modules) must not import each other in a circle either.
failed = False
for top in tops:
    path = os.path.join(root, top)
    if not os.path.isdir(path):
        continue
    mods = sorted(f[:-3] for f in os.listdir(path) if f.endswith(".rs") and f != "mod.rs")
    inner = {m: set() for m in mods}
    for m in mods:
        text = open(os.path.join(path, m + ".rs"), encoding="utf-8").read().split("#[cfg(test)]")[0]
        code = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
        for ref in re.finditer(r"\b(?:crate::" + top + r"|super)::([a-z_]+)", code):
            if ref.group(1) in inner and ref.group(1) != m:
                inner[m].add(ref.group(1))
    seen = {}
    def walk(n, stack):
        global failed
        seen[n] = "open"
        for d in sorted(inner[n]):
            if seen.get(d) == "open":
                print(f"cycle in {top}/: " + " -> ".join(stack[stack.index(d):] + [d]))
                failed = True
            elif d not in seen:
                walk(d, stack + [d])
        seen[n] = "done"
    for m in mods:
        if m not in seen:
            walk(m, [m])
if failed:
    sys.exit(1)
print("no import cycle among the files of any core folder")
