#!/usr/bin/env python3
"""Replay hybrid fusion offline, to choose its rule (src/index/hybrid.rs, `fuse`).

Reads a corpus's qrels (scripts/search_eval.py's corpus directory) and two runs of the new
build over the same indexed workspace, each `find --json --mode M --limit 30 --queries FILE`
output (one JSON array per query, with `evidence`): lexical (BM25 values) and semantic
(cosines, already at or above the floor). Fuses them by each rule in a grid and prints
recall@1, MRR@10 and recall@10 beside the two single modes: the weighted blend of the
calibrated scores (`blend`), that blend with each list's first kept among the first 10
(`+firsts`, as the daemon does since issue 46), reciprocal rank fusion (`rrf`), and the blend
plus a share of the better of the two calibrated values (`max`). The daemon's hybrid also
puts an identifier's defining file first, raises a file named by the query and hides what is
gone: those are the same for every rule (and the benchmark's names are opaque), so the grid
ranks the rules as the daemon would.

Usage: scripts/fusion-sim.py CORPUS_DIR LEXICAL.jsonl SEMANTIC.jsonl [--floor 0.35]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_eval as se  # noqa: E402


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def files(hits, key):
    """(corpus file, value) of the content hits, best first, each file once."""
    out, seen = [], set()
    for h in hits:
        if h.get("level", 2) != 2:
            continue
        rel = se.rel_of(h.get("uri", ""))
        v = (h.get("evidence") or {}).get(key)
        if rel is None or v is None or rel in seen:
            continue
        seen.add(rel)
        out.append((rel, v))
    return out


def shares(lex, sem, floor):
    """Each list's calibrated values: BM25 over the query's best, the cosine's rise from the
    floor over the best's (hybrid.rs, `Calibration`)."""
    best_b = max((b for _, b in lex), default=0.0)
    best_c = max((c for _, c in sem), default=floor)
    L = {f: (b / best_b if best_b > 0 else 0.0) for f, b in lex}
    S = {f: ((c - floor) / (best_c - floor) if best_c > floor else 1.0) for f, c in sem}
    return L, S


def order(score, lex):
    bm = dict(lex)
    return sorted(score, key=lambda f: (-score[f], -bm.get(f, 0.0), f))


def fuse(lex, sem, w, floor):
    """The weighted blend of the calibrated values (the rule before issue 46)."""
    L, S = shares(lex, sem, floor)
    score = {f: w * L.get(f, 0.0) + (1 - w) * S.get(f, 0.0) for f in set(L) | set(S)}
    return order(score, lex)


def rrf(lex, sem, k):
    """Reciprocal rank fusion: the sum of 1 / (k + rank) over the lists."""
    score = {}
    for lst in (lex, sem):
        for r, (f, _) in enumerate(lst):
            score[f] = score.get(f, 0.0) + 1.0 / (k + r + 1)
    return order(score, lex)


def keep_firsts(ranked, lex, sem, depth=10, firsts=1):
    """`ranked` with each list's first `firsts` results moved up into the first `depth`
    places when they fell below (to the last places, in their lists' order)."""
    out = list(ranked)
    for lst in (lex, sem):
        for f, _ in lst[:firsts]:
            if f in out and out.index(f) >= depth:
                out.remove(f)
                # The last place of the head not held by another kept first.
                out.insert(depth - 1, f)
    return out


def blend_max(lex, sem, w, c, floor):
    """The blend plus c times the better of the two calibrated values: a page one list ranks
    high is not held down by the other list's silence."""
    L, S = shares(lex, sem, floor)
    score = {}
    for f in set(L) | set(S):
        a, b = L.get(f, 0.0), S.get(f, 0.0)
        score[f] = w * a + (1 - w) * b + c * max(a, b)
    return order(score, lex)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("lexical")
    ap.add_argument("semantic")
    ap.add_argument("--floor", type=float, default=0.35)
    a = ap.parse_args()
    qrels = se.read_qrels(a.corpus)
    lex, sem = load(a.lexical), load(a.semantic)
    if len(lex) != len(qrels) or len(sem) != len(qrels):
        sys.exit(f"{len(qrels)} queries, {len(lex)} lexical and {len(sem)} semantic lines")
    expected = [e for _, e, _ in qrels]
    L = [files(h, "bm25") for h in lex]
    S = [files(h, "cosine") for h in sem]

    def report(name, ranked):
        m = se.metrics(list(zip(expected, ranked)))
        print(f"{name:>24}  R@1 {m['recall@1']:.3f}  MRR@10 {m['MRR@10']:.3f}"
              f"  R@10 {m['recall@10']:.3f}")

    report("lexical", [[f for f, _ in x] for x in L])
    report("semantic", [[f for f, _ in x] for x in S])
    for w in [0.4, 0.5, 0.55, 0.6, 0.65, 0.7]:
        report(f"blend w={w:.2f}", [fuse(x, y, w, a.floor) for x, y in zip(L, S)])
        report(f"  +firsts w={w:.2f}",
               [keep_firsts(fuse(x, y, w, a.floor), x, y) for x, y in zip(L, S)])
    for k in [5, 10, 20, 60]:
        report(f"rrf k={k}", [rrf(x, y, k) for x, y in zip(L, S)])
    for w in [0.5, 0.6]:
        for c in [0.1, 0.2, 0.3, 0.5]:
            report(f"max w={w:.1f} c={c:.1f}",
                   [blend_max(x, y, w, c, a.floor) for x, y in zip(L, S)])
            report(f"  +firsts w={w:.1f} c={c:.1f}",
                   [keep_firsts(blend_max(x, y, w, c, a.floor), x, y) for x, y in zip(L, S)])


if __name__ == "__main__":
    main()
