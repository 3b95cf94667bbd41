#!/usr/bin/env python3
"""Replay hybrid fusion offline, to choose its weights (src/index/hybrid.rs, `fused_score`).

Reads a corpus's qrels (scripts/search_eval.py's corpus directory) and two runs of the new
build over the same indexed workspace, each `find --json --mode M --limit 30 --queries FILE`
output (one JSON array per query, with `evidence`): lexical (BM25 values) and semantic
(cosines, already at or above the floor). Fuses them as the daemon does for each lexical
weight in a grid and prints MRR@10 and recall@10 beside the two single modes. The daemon's
hybrid also puts an identifier's defining file first and hides what is gone: those are the
same for every weight, so the grid ranks the weights as the daemon would.

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


def fuse(lex, sem, w, floor):
    best_b = max((b for _, b in lex), default=0.0)
    best_c = max((c for _, c in sem), default=floor)
    score = {}
    for f, b in lex:
        score[f] = w * (b / best_b if best_b > 0 else 0.0)
    for f, c in sem:
        s = (c - floor) / (best_c - floor) if best_c > floor else 1.0
        score[f] = score.get(f, 0.0) + (1 - w) * s
    bm = dict(lex)
    return sorted(score, key=lambda f: (-score[f], -bm.get(f, 0.0), f))


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
        print(f"{name:>16}  MRR@10 {m['MRR@10']:.3f}  R@10 {m['recall@10']:.3f}")

    report("lexical", [[f for f, _ in x] for x in L])
    report("semantic", [[f for f, _ in x] for x in S])
    for w in [i / 20 for i in range(4, 20)]:
        report(f"hybrid w={w:.2f}", [fuse(x, y, w, a.floor) for x, y in zip(L, S)])


if __name__ == "__main__":
    main()
