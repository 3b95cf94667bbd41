#!/usr/bin/env python3
"""Print vikingfs's import graph between the crate's top-level modules (and, with --in DIR,
between the files of one folder, e.g. `--in ops`), from every `crate::x` and `super::x` path
in src/. docs/architecture.md is drawn from it; `--check LAYERS` fails when an arrow runs up.

    scripts/import-graph.py                 # module -> the modules it uses
    scripts/import-graph.py --in ops        # file -> the sibling files it uses
"""
import argparse
import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def strip(text):
    # Comments and doc comments name modules without using them.
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def top_graph():
    mods = sorted({p.stem if p.parent == SRC else p.relative_to(SRC).parts[0]
                   for p in SRC.rglob("*.rs")} - {"lib", "main"})
    graph = {m: set() for m in mods}
    for p in SRC.rglob("*.rs"):
        rel = p.relative_to(SRC)
        me = rel.stem if len(rel.parts) == 1 else rel.parts[0]
        if me not in graph:
            continue
        text = strip(p.read_text())
        for m in re.findall(r"\bcrate::(\w+)", text):
            if m in graph and m != me:
                graph[me].add(m)
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            for m in re.findall(r"(?:^|,)\s*(\w+)", group):
                if m in graph and m != me:
                    graph[me].add(m)
    return graph


def folder_graph(folder):
    """File -> sibling files it uses, inside src/FOLDER. A name re-exported by the folder's
    mod.rs (`pub use a::X`) counts as a use of `a`; mod.rs uses a child it names (`a::`)."""
    base = SRC / folder
    files = {p: (p.stem if p.parent == base else p.relative_to(base).parts[0])
             for p in base.rglob("*.rs")}
    children = set(files.values()) - {"mod"}
    graph = {n: set() for n in children | {"mod"}}
    root = strip((base / "mod.rs").read_text())
    owner = {}
    for child, names in re.findall(r"\bpub(?:\([a-z]+\))? use (\w+)::\{?([\w\s,]*)\}?;", root):
        for n in re.findall(r"\w+", names):
            owner[n] = child
    for p, me in files.items():
        text = strip(p.read_text())
        depth = len(p.relative_to(base).parts) - (1 if p.name == "mod.rs" else 0)
        found = set()
        if depth == 0:
            found |= {c for c in re.findall(r"(?<![:\w])(\w+)::", text) if c in children}
        else:
            sup = r"\bsuper::" * depth
            found |= set(re.findall(sup + r"(\w+)", text))
            for group in re.findall(sup + r"\{([^}]*)\}", text):
                found |= set(re.findall(r"(?:^|,)\s*(\w+)", group))
        found |= set(re.findall(rf"\bcrate::{folder}::(\w+)", text))
        for m in found:
            target = m if m in children else owner.get(m, "mod")
            if target != me and target in graph:
                graph[me].add(target)
    return graph


# The layers, lowest first: a module may use its own layer and those below (docs/architecture.md).
LAYERS = {
    None: [
        "sys uri error errno failpoint metrics pg process db sql tail spoolfile",
        "fsx dirtimes workspace content config embed semantic daemon sharedfs",
        "lock index queue journal fs",
        "ops",
        "session fuse",
        "server",
        "cli",
    ],
    "ops": [
        "keys at source error",
        "stores derive reserve lifecycle history prune",
        "locked rm mv add write recover light settle undo past tags",
        "derivers jobs rederive refresher rebuild reindex search gauges",
        "fsck migrate status",
        "mod",
    ],
}


def upward(graph, layers):
    """The arrows that run up, and the modules no layer names."""
    rank = {m: i for i, names in enumerate(layers) for m in names.split()}
    up = [(a, b) for a in graph for b in graph[a]
          if a in rank and b in rank and rank[b] > rank[a]]
    unplaced = sorted(m for m in graph if m not in rank)
    return sorted(up), unplaced


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="folder")
    ap.add_argument("--check", action="store_true",
                    help="fail when an arrow runs up a layer, or a module has no layer")
    a = ap.parse_args()
    folders = [a.folder] if a.folder or not a.check else [None, "ops"]
    bad = 0
    for folder in folders:
        g = folder_graph(folder) if folder else top_graph()
        if not a.check:
            for m in sorted(g):
                print(f"{m:10} -> {' '.join(sorted(g[m])) or '-'}")
            continue
        up, unplaced = upward(g, LAYERS.get(folder, []))
        where = f"src/{folder}" if folder else "src"
        for x, y in up:
            print(f"import-graph: {where}: {x} uses {y}, a layer above it")
        for m in unplaced:
            print(f"import-graph: {where}: {m} is in no layer (scripts/import-graph.py LAYERS)")
        bad += len(up) + len(unplaced)
    if a.check:
        print(f"import-graph: {bad} upward arrow(s) or unplaced module(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
