#!/usr/bin/env python3
"""Module import cycles in a Rust crate.

For every module with children, the graph of which child uses which (through
`crate::a::b` paths, `use crate::a::{b, ...}` and `super::b`, comments ignored), and every
cycle in it, with the uses that close it. Exit 1 if any. Usage:
    scripts/module-cycles.py [SRC_DIR ...]   (default: src and every crates/*/src)
"""
import os, re, sys
import glob
roots = sys.argv[1:] or ["src"] + sorted(glob.glob("crates/*/src"))

def check(root):
    def modpath(path):
        rel = os.path.relpath(path, root)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main"):
            rel = rel[:-1]
        return rel

    files = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                files[tuple(modpath(p))] = open(p).read()

    def strip_comments(s):
        s = re.sub(r"//[^\n]*", "", s)
        return re.sub(r"/\*.*?\*/", "", s, flags=re.S)

    edges = {}
    for mod, text in files.items():
        text = strip_comments(text)
        # crate::a::b::c paths
        for m in re.finditer(r"\bcrate::((?:\w+::)*\w+)", text):
            target = m.group(1).split("::")
            edges.setdefault(mod, set()).add(tuple(target))
        # use crate::a::{b, c::d}
        for m in re.finditer(r"\buse\s+crate::(\w+(?:::\w+)*)::\{([^;]*)\}", text):
            base = m.group(1).split("::")
            for item in re.split(r"[,\s]+", m.group(2)):
                item = item.strip("{} ")
                if item and item[0].islower():
                    edges.setdefault(mod, set()).add(tuple(base + item.split("::")[:1]))
        # super::x paths
        for m in re.finditer(r"\bsuper::(\w+)", text):
            parent = list(mod[:-1]) if files.get(mod) is not None else list(mod)
            edges.setdefault(mod, set()).add(tuple(parent + [m.group(1)]))
        for m in re.finditer(r"\buse\s+super::\{([^;]*)\}", text):
            parent = list(mod[:-1])
            for item in re.split(r"[,\s]+", m.group(1)):
                item = item.strip("{} ")
                if item and item[0].islower():
                    edges.setdefault(mod, set()).add(tuple(parent + item.split("::")[:1]))

    known = set(files)
    def resolve(target):
        # longest prefix that is a module
        for n in range(len(target), 0, -1):
            if tuple(target[:n]) in known:
                return tuple(target[:n])
        return None

    # sibling graph per parent
    graphs = {}
    for src, targets in edges.items():
        for t in targets:
            t = resolve(t)
            if t is None or t == src:
                continue
            # common parent
            k = 0
            while k < min(len(src), len(t)) and src[k] == t[k]:
                k += 1
            if k >= len(src) or k >= len(t):
                continue  # ancestor/descendant
            parent = src[:k]
            a, b = src[k], t[k]
            graphs.setdefault(parent, {}).setdefault(a, set()).add(b)

    def sccs(g):
        index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
        def visit(v):
            index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
            for w in g.get(v, ()):
                if w not in index:
                    visit(w); low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v: break
                if len(comp) > 1: out.append(sorted(comp))
        for v in list(g):
            if v not in index: visit(v)
        return out

    found = 0
    for parent, g in sorted(graphs.items()):
        for comp in sccs(g):
            found += 1
            name = "::".join(("crate",) + parent)
            print(f"{root}: cycle in {name}: {' <-> '.join(comp)}")
            for a in comp:
                print(f"    {a} uses {sorted(set(g.get(a, ())) & set(comp))}")
    return found


total = sum(check(r) for r in roots)
if total == 0:
    print(f"no module import cycles in {', '.join(roots)}")
sys.exit(1 if total else 0)
