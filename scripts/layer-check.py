#!/usr/bin/env python3
"""Checks shardbox-core's imports against the layer order that docs/architecture.md states.

The order is read from one place: the table that follows the `<!-- layer-order -->` marker in
docs/architecture.md (one row per top-level module of core/src, first column `name/` or
`name.rs`). A module may use the modules above it in that table, never one below. The check
fails on:

- an import that goes against the order: in non-test code of a module, a path that reaches a
  module below it — `use crate::x::…` (grouped `use crate::{x::…, …}` trees included),
  `crate::x::…` in an expression or type, `super::`/`self::` chains that climb out of the
  module, and `crate::Name` where the crate root re-exports `Name` from module x;
- a table that does not match the tree: a top-level module missing from it, a row naming no
  module, a module listed twice;
- core/src/lib.rs's own list of the layers (the first ```text block of its module doc) in
  another order than the table;
- an import cycle between the files of one folder (the order says nothing inside a folder).

Comments, string and char literals are not code; test code (an item under `#[cfg(test)]`, a
file under `#![cfg(test)]` or declared by `#[cfg(test)] mod x;`) may use any layer.

Usage:
  python3 scripts/layer-check.py [core/src] [--doc docs/architecture.md]
  python3 scripts/layer-check.py --self-test   plants back-edges in a copy of core/src and
                                               checks that each one fails the check
"""
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_ROOT = os.path.join(REPO, "core", "src")
DEFAULT_DOC = os.path.join(REPO, "docs", "architecture.md")
MARKER = "<!-- layer-order -->"


# --- reading Rust -------------------------------------------------------------------------

def strip_non_code(text):
    """The text with comments and string/char literals blanked (newlines kept, so offsets and
    line numbers stay those of the file)."""
    out = list(text)
    n = len(text)
    i = 0

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c == '"' or (c in "rbc" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
                          and re.match(r'(?:b|c)?r#*"|(?:b|c)"', text[i:i + 260])):
            m = re.match(r'(?:b|c)?(r)(#*)"', text[i:i + 260])
            if m:  # raw string: ends at a quote followed by as many hashes
                end = '"' + m.group(2)
                j = text.find(end, i + m.end())
                j = n if j < 0 else j + len(end)
            else:
                j = text.index('"', i) + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            blank(i, j)
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}', b'x'); otherwise a lifetime or label.
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", text[i:i + 16])
            if m:
                blank(i, i + m.end())
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def match_close(code, i):
    """Index after the bracket that closes the one at `i`."""
    pairs = {"{": "}", "[": "]", "(": ")"}
    stack = [pairs[code[i]]]
    j = i + 1
    while j < len(code) and stack:
        ch = code[j]
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        j += 1
    return j


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")


def test_spans(code):
    """(start, end) of every item under `#[cfg(test)]`, the attribute included."""
    spans = []
    for m in CFG_TEST.finditer(code):
        j = m.end()
        while True:  # further attributes of the same item
            k = j
            while k < len(code) and code[k].isspace():
                k += 1
            if code.startswith("#", k) and code[k + 1:k + 2] == "[":
                j = match_close(code, k + 1)
            else:
                j = k
                break
        is_use = re.match(r"(?:pub(?:\s*\([^)]*\))?\s+)?use\b", code[j:])
        depth = 0
        while j < len(code):
            ch = code[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == ";" and depth == 0:
                j += 1
                break
            elif ch == "{" and depth == 0 and not is_use:
                j = match_close(code, j)
                break
            j += 1
        spans.append((m.start(), j))
    return spans


def blank_spans(code, spans):
    out = list(code)
    for a, b in spans:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)


USE_TOKEN = re.compile(r"::|[{},*]|\$?[A-Za-z_][A-Za-z0-9_]*")


def use_trees(code):
    """(offset, [(segments, bound name)]) for every `use` declaration of the code."""
    found = []
    for m in re.finditer(r"(?<![\w$])use\b", code):
        j, depth = m.end(), 0
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
            elif code[j] == ";" and depth == 0:
                break
            j += 1
        tokens = USE_TOKEN.findall(code[m.end():j])
        paths = []
        parse_tree(tokens, 0, [], paths)
        found.append((m.start(), j, paths))
    return found


def parse_tree(tokens, i, prefix, paths):
    """Parses one use tree at tokens[i], appending (segments, bound name) to `paths`; returns
    the index after it."""
    segs = list(prefix)
    if i < len(tokens) and tokens[i] == "::":  # `use ::x` — an extern crate
        segs.append("::")
        i += 1
    while i < len(tokens):
        t = tokens[i]
        if t == "{":
            i += 1
            while i < len(tokens) and tokens[i] != "}":
                if tokens[i] == ",":
                    i += 1
                    continue
                i = parse_tree(tokens, i, segs, paths)
            return i + 1
        if t == "*":
            paths.append((segs + ["*"], None))
            return i + 1
        if t in (",", "}"):
            return i
        if t == "::":
            i += 1
            continue
        segs.append(t)
        i += 1
        if i < len(tokens) and tokens[i] == "::":
            continue
        name = segs[-1] if segs[-1] != "self" else (segs[-2] if len(segs) > 1 else None)
        if i + 1 < len(tokens) and tokens[i] == "as":
            name = tokens[i + 1]
            i += 2
        paths.append((segs, name))
        return i
    return i


INLINE_PATH = re.compile(r"(?<![\w$:])(\$?crate|super|self)((?:\s*::\s*(?:\*|[A-Za-z_][A-Za-z0-9_]*))+)")


def inline_paths(code, skip):
    """(offset, segments) of every `crate::`/`super::`/`self::` path outside the `skip` spans
    (the use declarations); a `pub(in crate::x)` visibility is not a use."""
    found = []
    for m in INLINE_PATH.finditer(code):
        if any(a <= m.start() < b for a, b in skip):
            continue
        if re.search(r"\bin\s*$", code[max(0, m.start() - 8):m.start()]):
            continue
        rest = re.findall(r"\*|[A-Za-z_][A-Za-z0-9_]*", m.group(2))
        found.append((m.start(), [m.group(1)] + rest))
    return found


# --- the crate ----------------------------------------------------------------------------

class Crate:
    def __init__(self, root):
        self.root = root
        self.tops = sorted(
            n[:-3] if n.endswith(".rs") else n
            for n in os.listdir(root)
            if n not in ("lib.rs", "main.rs")
            and (n.endswith(".rs") or os.path.isdir(os.path.join(root, n)))
        )
        self.files = {}  # relative path -> (module path, code without non-code and tests)
        test_only = set()
        for d, _, fs in os.walk(root):
            for f in sorted(fs):
                if not f.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(d, f), root)
                with open(os.path.join(root, rel), encoding="utf-8") as fh:
                    code = strip_non_code(fh.read())
                if re.search(r"#\s*!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", code):
                    test_only.add(rel)
                spans = test_spans(code)
                for a, b in spans:  # `#[cfg(test)] mod x;` makes x's file test code
                    m = re.search(r"\bmod\s+(\w+)\s*;", code[a:b])
                    if m:
                        base = os.path.dirname(rel) if f in ("mod.rs", "lib.rs") else rel[:-3]
                        test_only.add(os.path.join(base, m.group(1) + ".rs"))
                        test_only.add(os.path.join(base, m.group(1), "mod.rs"))
                parts = rel[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib"):
                    parts = parts[:-1]
                self.files[rel] = (parts, blank_spans(code, spans))
        for rel in test_only:
            self.files.pop(rel, None)
        # Names the crate root re-exports (`pub use model::ids::ShardIndex;`) -> their module.
        self.root_names = {}
        lib = self.files.get("lib.rs")
        if lib:
            for _, _, paths in use_trees(lib[1]):
                for segs, name in paths:
                    if segs and segs[0] in ("crate", "self"):
                        segs = segs[1:]
                    if segs and segs[0] in self.tops and name:
                        self.root_names[name] = segs[0]

    def resolve(self, segs, modpath, inline_mods):
        """The absolute module path `segs` names from inside `modpath` (+ inline modules), or
        None for a path outside the crate."""
        here = modpath + inline_mods
        if segs[0] in ("crate", "$crate"):
            path = segs[1:]
        elif segs[0] in ("super", "self"):
            path = list(here)
            rest = list(segs)
            if rest[0] == "self":
                rest = rest[1:]
            while rest and rest[0] == "super":
                path = path[:-1]
                rest = rest[1:]
            path += rest
        else:
            return None
        while path and path[-1] == "self":
            path = path[:-1]
        if path and path[0] in self.root_names:
            path = [self.root_names[path[0]]] + path
        return path

    def references(self):
        """(file, line, text, absolute path, module path) of every path into the crate."""
        for rel, (modpath, code) in sorted(self.files.items()):
            mods = [(m.group(1), m.end() - 1, match_close(code, m.end() - 1))
                    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code)]

            def inline_at(pos):
                return [name for name, a, b in mods if a < pos < b]

            uses = use_trees(code)
            for start, end, paths in uses:
                for segs, _ in paths:
                    if segs and segs[0] == "::":
                        continue
                    path = self.resolve(segs, modpath, inline_at(start))
                    if path is not None:
                        yield rel, code.count("\n", 0, start) + 1, "::".join(segs), path, modpath
            for pos, segs in inline_paths(code, [(a, b) for a, b, _ in uses]):
                path = self.resolve(segs, modpath, inline_at(pos))
                if path is not None:
                    yield rel, code.count("\n", 0, pos) + 1, "::".join(segs), path, modpath


# --- the layer order ----------------------------------------------------------------------

def read_order(doc_text):
    """The module names of the table after the marker, in order (with a problem list)."""
    at = doc_text.find(MARKER)
    if at < 0:
        return [], [f"no `{MARKER}` marker: the layer table cannot be found"]
    rows = []
    started = False
    for line in doc_text[at + len(MARKER):].splitlines():
        s = line.strip()
        if not s.startswith("|"):
            if started:
                break
            continue
        started = True
        cell = s.strip("|").split("|")[0].strip()
        m = re.fullmatch(r"`([a-z_][a-z0-9_]*)(/|\.rs)`", cell)
        if m:
            rows.append(m.group(1))
        elif cell not in ("folder", "module") and not re.fullmatch(r":?-+:?", cell):
            rows.append(cell)
    return rows, []


def lib_order(crate):
    """The layer names listed in the first ```text block of core/src/lib.rs's module doc."""
    path = os.path.join(crate.root, "lib.rs")
    if not os.path.exists(path):
        return None
    doc = [l[3:] for l in open(path, encoding="utf-8").read().splitlines() if l.startswith("//!")]
    names, inside = [], False
    for line in doc:
        if line.strip().startswith("```"):
            if inside:
                return names
            inside = line.strip() == "```text"
            continue
        if inside and line.strip():
            names.append(re.sub(r"(/|\.rs)$", "", line.split()[0]))
    return names or None


def check(root, doc_text, doc_name="docs/architecture.md", out=print):
    """Runs every check; prints what it finds and returns the number of problems."""
    crate = Crate(root)
    order, problems = read_order(doc_text)
    rank = {}
    for i, name in enumerate(order):
        if name in rank:
            problems.append(f"{doc_name}: `{name}` is listed twice in the layer table")
        elif name not in crate.tops:
            problems.append(f"{doc_name}: the layer table names `{name}`, which is not a "
                            f"top-level module of core/src")
        else:
            rank[name] = i
    for t in crate.tops:
        if t not in rank:
            problems.append(f"{doc_name}: core/src/{t} is not in the layer table (add a row "
                            f"where it belongs)")
    listed = lib_order(crate)
    ranked = [n for n in order if n in rank]
    if listed is not None and listed != ranked:
        problems.append(f"core/src/lib.rs lists the layers as {', '.join(listed)}; "
                        f"{doc_name} (the source) says {', '.join(ranked)}")

    deps = {t: {} for t in crate.tops}
    inner = {}
    back_edges = {}  # (file, module it must not use) -> [(line, path)]
    for rel, line, text, path, modpath in crate.references():
        top = modpath[0] if modpath else None
        if not path:
            continue
        if path[0] == "*":
            problems.append(f"core/src/{rel}:{line}: `{text}` imports the whole crate root; "
                            f"name the modules, so that their layers can be checked")
            continue
        target = path[0]
        if top is None or target not in deps or target == top:
            if top is not None and target == top and len(modpath) >= 2 and len(path) >= 2 \
                    and path[1] != modpath[1]:
                inner.setdefault(top, {}).setdefault(modpath[1], set()).add(path[1])
            continue
        deps[top].setdefault(target, (rel, line, text))
        if top in rank and target in rank and rank[target] > rank[top]:
            back_edges.setdefault((rel, target), []).append((line, text))

    for (rel, target), seen in sorted(back_edges.items()):
        line, text = seen[0]
        more = f", and {len(seen) - 1} more in this file" if len(seen) > 1 else ""
        problems.append(f"core/src/{rel}:{line}: {rel.split(os.sep)[0].removesuffix('.rs')} "
                        f"uses {target} (`{text}`{more}), which {doc_name} puts below it")

    out(f"layer order ({doc_name}; each may use those before it): {', '.join(order)}")
    for t in sorted(crate.tops, key=lambda t: rank.get(t, len(rank))):
        out(f"  {t:10} -> {', '.join(sorted(deps[t], key=lambda d: rank.get(d, 99))) or '-'}")

    for top in sorted(inner):
        graph = {}
        children = {f[:-3] if f.endswith(".rs") else f for f in os.listdir(os.path.join(root, top))}
        for m, ds in inner[top].items():
            graph[m] = {d for d in ds if d in children}
        state = {}

        def walk(n, stack):
            state[n] = "open"
            for d in sorted(graph.get(n, ())):
                if state.get(d) == "open":
                    problems.append(f"cycle in core/src/{top}/: "
                                    + " -> ".join(stack[stack.index(d):] + [d]))
                elif d not in state:
                    walk(d, stack + [d])
            state[n] = "done"

        for m in sorted(graph):
            if m not in state:
                walk(m, [m])

    for p in problems:
        out(p)
    if not problems:
        out("no import against the layer order, no import cycle among the files of a folder")
    return len(problems)


# --- self-test ----------------------------------------------------------------------------

def plant_after_docs(path, line):
    """Inserts `line` after the file's leading `//!` module doc."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    at = 0
    while at < len(lines) and (lines[at].startswith("//!") or not lines[at].strip()):
        at += 1
    lines.insert(at, line)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def move_lib_line(path, name):
    """Moves the line of layer `name` in lib.rs's ```text list to the end of the list."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    at = next(i for i, l in enumerate(lines) if re.match(r"//!\s+" + name + r"[/ ]", l))
    moved = lines.pop(at)
    end = next(i for i in range(at, len(lines)) if lines[i].strip() == "//! ```")
    lines.insert(end, moved)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def append(path, text):
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n" + text + "\n")


def self_test(root, doc_text):
    def drop_row(name):
        return lambda text: re.sub(r"\n\| `" + name + r"/` \|[^\n]*", "", text, count=1)

    cases = [
        # (what, file edit or None, doc edit or None, expected substring or None for a pass)
        ("the tree as it is", None, None, None),
        ("`use crate::runner::…` in a model file",
         lambda r: plant_after_docs(f"{r}/model/ids.rs", "use crate::runner::delivery::Delivery;"),
         None, "model uses runner"),
        ("a grouped `use crate::{…}` in a storage file",
         lambda r: plant_after_docs(f"{r}/storage/inbox.rs",
                                    "use crate::{model::ids::ShardIndex, send::inbox::Inbox};"),
         None, "storage uses send"),
        ("`super::super::` climbing out of model",
         lambda r: plant_after_docs(f"{r}/model/clock.rs", "use super::super::stage::Station;"),
         None, "model uses stage"),
        ("a crate-root re-export (`crate::LocalRunner`) in model",
         lambda r: plant_after_docs(f"{r}/model/config.rs", "use crate::LocalRunner;"),
         None, "model uses runner"),
        ("a path in an expression, after a `#[cfg(test)]` item",
         lambda r: append(f"{r}/model/ids.rs",
                          "#[cfg(test)]\nfn planted_helper() {}\n"
                          "fn planted() { let _ = crate::telemetry::describe::describe_metrics; }"),
         None, "model uses telemetry"),
        ("the same import inside test code (allowed)",
         lambda r: append(f"{r}/model/ids.rs",
                          "#[cfg(test)]\nmod planted_tests {\n    use crate::runner::delivery::Delivery;\n}"),
         None, None),
        ("the same path in a comment and a string (not code)",
         lambda r: append(f"{r}/model/ids.rs",
                          "// use crate::runner::delivery::Delivery;\n"
                          "const _PLANTED: &str = \"crate::runner::delivery::Delivery\";"),
         None, None),
        ("a cycle between the files of one folder",
         lambda r: plant_after_docs(f"{r}/model/hash.rs", "use crate::model::strategy::StableHashStrategy;"),
         None, "cycle in core/src/model/"),
        ("a layer table without the `send/` row", None, drop_row("send"),
         "core/src/send is not in the layer table"),
        ("a layer table with `send/` twice", None,
         lambda text: re.sub(r"(\n\| `send/` \|[^\n]*)", r"\1\1", text, count=1),
         "`send` is listed twice"),
        ("core/src/lib.rs listing the layers in another order",
         lambda r: move_lib_line(f"{r}/lib.rs", "sync"), None, "core/src/lib.rs lists the layers as"),
    ]
    failures = 0
    for what, edit, doc_edit, expect in cases:
        tmp = tempfile.mkdtemp(prefix="layer-check-")
        try:
            copy = os.path.join(tmp, "src")
            shutil.copytree(root, copy)
            if edit:
                edit(copy)
            lines = []
            problems = check(copy, doc_edit(doc_text) if doc_edit else doc_text, out=lines.append)
        finally:
            shutil.rmtree(tmp)
        said = [l for l in lines if not l.startswith(("layer order", "  "))]
        if expect is None:
            ok = problems == 0
            verdict = "passes" if problems == 0 else f"fails: {said}"
        else:
            hit = [l for l in said if expect in l]
            ok = problems > 0 and bool(hit)
            verdict = f"fails: {hit[0]}" if hit else (f"fails, but not with `{expect}`: {said}"
                                                      if problems else "passes")
        print(f"{'ok ' if ok else 'BAD'} {what}: {verdict}")
        failures += not ok
    print(f"self-test: {len(cases) - failures} of {len(cases)} cases as expected")
    return failures


def main(argv):
    root, doc = DEFAULT_ROOT, DEFAULT_DOC
    args = list(argv)
    run_self_test = "--self-test" in args
    if run_self_test:
        args.remove("--self-test")
    if "--doc" in args:
        i = args.index("--doc")
        doc = args[i + 1]
        del args[i:i + 2]
    if args:
        root = args[0]
    with open(doc, encoding="utf-8") as f:
        doc_text = f.read()
    doc_name = os.path.relpath(doc, REPO) if os.path.abspath(doc).startswith(REPO) else doc
    if run_self_test:
        return 1 if self_test(root, doc_text) else 0
    return 1 if check(root, doc_text, doc_name) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
