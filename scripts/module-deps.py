#!/usr/bin/env python3
"""Prints the module dependency edges of mirrorfs's library and fails on a cycle or an upward
edge.

Edges are read from the source: every `crate::MODULE` path (in `use` lines and in code) makes an
edge between top-level modules; inside a module, every `super::SIBLING` and `crate::MODULE::SIBLING`
path makes an edge between its submodules. Comments, string literals and the unit tests at the end
of each file (`#[cfg(test)]`) do not count.

Rules checked:
  - top-level modules sit in the layers below, and a module only uses modules in layers below its
    own (no upward edge, no edge between two modules of one layer);
  - no cycle between the submodules of one module.

Usage: scripts/module-deps.py [SRC_DIR]   (default: src/ next to this script's directory)
Exit status: 0 clean, 1 a rule is broken, 2 usage error.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

# Top to bottom; a module may use only modules of a later layer. Keep docs/architecture.md in step.
# `cli` is the command (arguments, client subcommands); `daemon` is what runs in the mount's own
# processes (startup, serving, the keeper, events, logging, notify, utab).
LAYERS = [
    ["cli"],
    ["daemon"],
    ["fuse"],
    ["fs"],
    ["recovery", "config"],
    ["mirror", "stats"],
    ["integrity"],
    ["meta"],
    ["tree", "leg", "policy"],
    ["sys"],
    ["errno", "value", "lock_order"],
]


def strip(text):
    """Source without unit tests, comments and string literals."""
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"' or text.startswith('r"', i) or text.startswith('r#"', i):
            if c == '"':
                end, i = '"', i + 1
            else:
                hashes = text[i + 1 :].index('"')
                end, i = '"' + "#" * hashes, i + 2 + hashes
            while i < n and not text.startswith(end, i):
                i += 2 if (end == '"' and text[i] == "\\") else 1
            i += len(end)
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]):
            # a char literal (not a lifetime)
            i = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1) + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def brace_items(text, start):
    """The first path segment of each item in the brace group opening at text[start]."""
    depth, item, items = 0, "", []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                items.append(item)
                break
        if depth == 1 and ch == ",":
            items.append(item)
            item = ""
        elif depth >= 1:
            item += ch
    return [re.split(r"::|\s", it.strip())[0] for it in items if it.strip()]


def references(text, prefix):
    """Names that follow `prefix::` (or `prefix::{a, b}`) in text."""
    names = []
    for m in re.finditer(r"\b" + prefix + r"::", text):
        rest = text[m.end() :]
        if rest.startswith("{"):
            names += brace_items(text, m.end())
        else:
            w = re.match(r"\w+", rest)
            if w:
                names.append(w.group(0))
    return names


def module_of(path, src):
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return parts


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "src"
    if not (src / "lib.rs").is_file():
        print(f"module-deps: {src} has no lib.rs", file=sys.stderr)
        return 2
    layer = {m: i for i, ms in enumerate(LAYERS) for m in ms}
    files = sorted(p for p in src.rglob("*.rs") if p.name not in ("lib.rs", "main.rs"))
    tops = sorted({module_of(p, src)[0] for p in files})
    subs = defaultdict(set)
    for p in files:
        m = module_of(p, src)
        if len(m) >= 2:
            subs[m[0]].add(m[1])
    top_edges = defaultdict(int)
    sub_edges = defaultdict(lambda: defaultdict(int))
    for p in files:
        m = module_of(p, src)
        text = strip(p.read_text())
        for name in references(text, "crate"):
            if name in tops and name != m[0]:
                top_edges[(m[0], name)] += 1
        if len(m) >= 2:
            # super:: from a submodule file is its module; its siblings are submodules there.
            supers = references(text, "super") if len(m) == 2 else []
            inner = [n for n in re.findall(r"\bcrate::" + m[0] + r"::(\w+)", text)]
            for name in supers + inner:
                if name in subs[m[0]] and name != m[1]:
                    sub_edges[m[0]][(m[1], name)] += 1

    problems = []
    print("module edges (uses, references):")
    for (a, b), n in sorted(top_edges.items()):
        note = ""
        if a not in layer or b not in layer:
            note = "  <- module not in the layer table"
            problems.append(f"{a} -> {b}: a module missing from LAYERS")
        elif layer[b] <= layer[a]:
            note = "  <- UPWARD" if layer[b] < layer[a] else "  <- SAME LAYER"
            problems.append(f"{a} -> {b}: {note.strip('<- ').lower()} edge")
        print(f"  {a:9} -> {b:9} {n:4}{note}")
    for t in tops:
        if t not in layer:
            problems.append(f"module {t} is not in the layer table")

    print("submodule edges:")
    for top in sorted(sub_edges):
        for (a, b), n in sorted(sub_edges[top].items()):
            print(f"  {top}::{a} -> {top}::{b} {n}")
        # cycles among the submodules of `top`
        graph = defaultdict(set)
        for a, b in sub_edges[top]:
            graph[a].add(b)
        state = {}

        def visit(node, stack):
            state[node] = 1
            stack.append(node)
            for nxt in sorted(graph[node]):
                if state.get(nxt) == 1:
                    cyc = stack[stack.index(nxt) :] + [nxt]
                    problems.append(f"cycle: {' -> '.join(top + '::' + c for c in cyc)}")
                elif nxt not in state:
                    visit(nxt, stack)
            stack.pop()
            state[node] = 2

        for node in sorted(graph):
            if node not in state:
                visit(node, [])

    print("layers, top to bottom: " + " | ".join(", ".join(ms) for ms in LAYERS))
    if problems:
        for p in problems:
            print(f"module-deps: {p}", file=sys.stderr)
        return 1
    print("module-deps: no cycle, no upward edge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
