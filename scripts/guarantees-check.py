#!/usr/bin/env python3
"""Checks that every test docs/guarantees.md cites exists.

The doc cites tests in inline code spans, in these forms:

  `tests/delivery.rs`                          a file (it must exist)
  `core/src/model/ids.rs` tests                a file followed by the word "tests": it must
                                               hold at least one #[test] / #[tokio::test]
  `tests/delivery.rs::a_worker_that_…`         a test function of that file (or of the files
                                               of its module folder, tests/simulation/ for
                                               tests/simulation.rs)
  `tests/lease_fencing.rs::{sqlite,postgres}_a_worker_…`
                                               braces expand: one function per alternative
  `tests/handlers.rs::*_hung_and_panicking_…`  `*` matches any part of a name (one at least)
  `regressions::*::catch_up_whose_start_…`     a module path: the function in the module's file
  `a_panic_on_a_running_node_…`                a bare name of four words or more (three
                                               underscores): a function anywhere in the
                                               workspace (conformance cases, unit tests)

A function exists when its file has `fn <name>`. Every missing file, file without tests, or
function is printed with the doc's line; the exit status is 1 if any is missing.
Usage: python3 scripts/guarantees-check.py [docs/guarantees.md ...]
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {".git", "target", "node_modules"}


def rust_files():
    for d, dirs, fs in os.walk(REPO):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")]
        for f in fs:
            if f.endswith(".rs"):
                yield os.path.relpath(os.path.join(d, f), REPO)


_texts = {}


def text_of(rel):
    if rel not in _texts:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            _texts[rel] = f.read()
    return _texts[rel]


def expand(s):
    """Brace expansion: `{a,b}_x` -> [`a_x`, `b_x`]."""
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    out = []
    for alt in m.group(1).split(","):
        out += expand(s[:m.start()] + alt.strip() + s[m.end():])
    return out


def defines(rel, name):
    pattern = re.escape(name).replace(r"\*", r"\w*")
    return re.search(r"\bfn\s+" + pattern + r"\s*[<(]", text_of(rel)) is not None


def module_files(rel):
    """The file and, for `tests/x.rs` or `dir/mod.rs`, the files of its module folder."""
    files = [rel]
    folder = os.path.dirname(rel) if rel.endswith("mod.rs") else rel[:-3]
    if os.path.isdir(os.path.join(REPO, folder)):
        files += [r for r in rust_files() if r.startswith(folder + os.sep)]
    return files


def files_of_module(segments, all_files):
    """Files that can hold module path `segments` (`*` = any module): a file or folder named
    after the last named module."""
    named = [s for s in segments if s != "*"]
    if not named:
        return all_files
    last = named[-1]
    hits = [r for r in all_files
            if os.path.basename(r)[:-3] == last or last in r.split(os.sep)[:-1]]
    return hits or [r for r in all_files if re.search(r"\bmod\s+" + last + r"\b", text_of(r))]


def shown(path):
    """`path` relative to the repository when it is inside it."""
    full = os.path.abspath(path)
    return os.path.relpath(full, REPO) if full.startswith(REPO + os.sep) else path


def check(doc):
    text = open(doc, encoding="utf-8").read()
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    all_files = sorted(rust_files())
    missing, files, names = [], set(), 0
    for m in re.finditer(r"`([^`]+)`", text):
        span = re.sub(r"\s+", "", m.group(1))
        line = text.count("\n", 0, m.start()) + 1
        where = f"{shown(doc)}:{line}"
        cited = re.fullmatch(r"((?:[\w.-]+/)*[\w.-]+\.rs)(?:::(.+))?", span)
        if cited:
            rel, items = cited.group(1), cited.group(2)
            files.add(rel)
            if not os.path.isfile(os.path.join(REPO, rel)):
                missing.append(f"{where}: `{rel}` does not exist")
                continue
            if re.match(r"\s+tests\b", text[m.end():]) and not re.search(
                    r"#\[(?:tokio::)?test\b", text_of(rel)):
                missing.append(f"{where}: `{rel}` is cited for its tests and has none")
            for item in expand(items) if items else []:
                names += 1
                *mods, name = item.split("::")
                pool = module_files(rel)
                if mods:
                    pool = [r for r in pool if r in files_of_module(mods, pool)] or pool
                if not any(defines(r, name) for r in pool):
                    missing.append(f"{where}: `{rel}` has no test `{item}`")
            continue
        if not re.fullmatch(r"[a-z_*{},]+(?:::[a-z_*{},]+)*", span):
            continue
        for item in expand(span):
            *mods, name = item.split("::")
            if name.count("_") < 3:
                continue  # a field, a function of the API, not a test name
            names += 1
            pool = files_of_module(mods, all_files) if mods else all_files
            if not any(defines(r, name) for r in pool):
                scope = f" in module `{'::'.join(mods)}`" if mods else ""
                missing.append(f"{where}: no test `{name}`{scope} in the workspace")
    return missing, len(files), names


def main(docs):
    docs = docs or [os.path.join(REPO, "docs", "guarantees.md")]
    failed = 0
    for doc in docs:
        missing, files, names = check(doc)
        for line in missing:
            print(line)
        rel = shown(doc)
        if missing:
            print(f"{rel}: {len(missing)} cited test(s) or file(s) missing")
        else:
            print(f"{rel}: all {files} cited files and {names} cited tests exist")
        failed += len(missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
