#!/usr/bin/env python3
"""The layout rules of docs/architecture.md, checked the way a reader would check them.

For each library and the server crate:
- no import cycle between top-level modules: module `a` depends on `b` when a non-test, non-comment line of
  any file under `a` names `crate::b` (tests: `#[cfg(test)]` modules and `tests.rs` files are left out);
- no source file above 700 lines of non-test code (blank and comment lines not counted);
- x402-tower's crate root exposes at most 25 public names.
"""

import os
import re
import sys
from collections import defaultdict

CRATES = ["x402-tower/src", "registry-pagination/src", "reference-server/src"]
MAX_LINES = 700
MAX_ROOT_NAMES = 25
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def without_tests(text):
    """The text less `#[cfg(test)]` modules (inline or declared)."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i].strip()
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("#[cfg(test)]") and re.match(r"\s*(pub(\(\w+\))? )?mod \w+\s*;", nxt):
            i += 2
            continue
        if line.startswith("#[cfg(test)]") and re.match(r"\s*(pub(\(\w+\))? )?mod \w+\s*\{", nxt):
            depth, j, opened = 0, i + 1, False
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                opened = opened or "{" in lines[j]
                j += 1
                if opened and depth <= 0:
                    break
            i = j
            continue
        out.append(lines[i])
        i += 1
    return out


def code_lines(lines):
    return [l for l in lines if l.strip() and not l.strip().startswith("//")]


def crate_graph(src):
    top = set()
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if name.endswith(".rs") and name not in ("lib.rs", "main.rs"):
            top.add(name[:-3])
        elif os.path.isdir(path):
            top.add(name)
    graph, sizes = defaultdict(set), {}
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            code = code_lines(without_tests(open(path, encoding="utf-8").read()))
            sizes[os.path.relpath(path, ROOT)] = len(code)
            first = rel.split(os.sep)[0]
            module = first[:-3] if first.endswith(".rs") else first
            if module in ("lib", "main"):
                continue
            text = "\n".join(l for l in code if "doc =" not in l)
            named = set(re.findall(r"crate::(\w+)", text))
            for group in re.findall(r"crate::\{([^}]*)\}", text, re.S):
                named |= set(re.findall(r"(?:^|[,{\s])(\w+)", group))
            graph[module] |= {m for m in named if m in top and m != module}
    return top, graph, sizes


def cycles(nodes, graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(tuple(sorted(comp)))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def root_names(lib):
    text = "\n".join(code_lines(without_tests(open(lib, encoding="utf-8").read())))
    names = set(re.findall(r"^pub (?:mod|const|static|fn|struct|enum|trait|type) (\w+)", text, re.M))
    for group in re.findall(r"^pub use [\w:]*?(?:\{([^}]*)\}|::(\w+));", text, re.M | re.S):
        body = group[0] or group[1]
        for item in body.split(","):
            item = item.strip()
            if item:
                names.add(item.split(" as ")[-1].split("::")[-1])
    return names


def main():
    failures = []
    for src in CRATES:
        nodes, graph, sizes = crate_graph(os.path.join(ROOT, src))
        for comp in cycles(nodes, graph):
            failures.append(f"import cycle in {src.split('/')[0]}: " + " -> ".join(comp))
        for path, n in sorted(sizes.items()):
            if n > MAX_LINES:
                failures.append(f"{path}: {n} lines of non-test code (at most {MAX_LINES})")
    names = root_names(os.path.join(ROOT, "x402-tower/src/lib.rs"))
    if len(names) > MAX_ROOT_NAMES:
        failures.append(f"x402-tower's root has {len(names)} public names (at most {MAX_ROOT_NAMES}): {sorted(names)}")
    for entry in failures:
        print(f"layout: error: {entry}", file=sys.stderr)
    if failures:
        return 1
    print(f"layout: no import cycle, no file above {MAX_LINES} lines, x402-tower's root has {len(names)} public names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
