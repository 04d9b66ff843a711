#!/usr/bin/env python3
"""Lists Rust files whose non-test code is too long, and functions whose bodies are.

Non-test code is the lines before a file's `#[cfg(test)]` module (a file that is a test
module, or lives under `tests/`, counts for nothing). A function's length is counted from
its `fn` line to the line of the brace that closes its body, found by brace depth with
strings, chars and comments skipped: good enough for this codebase, which has no braces in
raw strings that would fool it into a wrong answer without also failing to compile.

    python3 scripts/size-check.py            # report, exit 1 if anything is over
    python3 scripts/size-check.py --file 400 --fn 100
"""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SKIP_DIRS = {"target", ".git", "tests"}
FN_RE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def rust_files():
    for path in sorted(ROOT.rglob("*.rs")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.startswith("target") for part in rel.parts[:-1]):
            continue
        yield rel, path


def non_test_lines(lines):
    """The lines before the first `#[cfg(test)]` attribute at column 0."""
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            return lines[:i]
    return lines


def strip_code(text):
    """`text` with strings, chars and comments blanked (newlines kept), so braces count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        m = re.match(r'r(#*)"', text[i:i + 10]) if c == "r" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if m:
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def long_functions(lines, limit):
    code = strip_code("\n".join(lines)).split("\n")
    found = []
    for start, line in enumerate(code):
        m = FN_RE.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(code)):
            for ch in code[end]:
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    break  # a declaration without a body
            else:
                if opened and depth == 0:
                    length = end - start + 1
                    if length > limit:
                        found.append((start + 1, m.group(7), length))
                    break
                continue
            break
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=int, default=400, help="most non-test lines a file may have")
    parser.add_argument("--fn", type=int, default=100, help="most lines a function may have")
    args = parser.parse_args()
    over = 0
    for rel, path in rust_files():
        lines = non_test_lines(path.read_text().splitlines())
        if len(lines) > args.file:
            print(f"file {len(lines):5} lines  {rel}")
            over += 1
        for line, name, length in long_functions(lines, args.fn):
            print(f"fn   {length:5} lines  {rel}:{line} {name}")
            over += 1
    if over:
        print(f"{over} over the limits (file {args.file}, fn {args.fn})")
        return 1
    print(f"every file within {args.file} non-test lines, every function within {args.fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
