#!/usr/bin/env python3
"""The metadata job of the FUSE benchmarks: create, stat, rename and unlink N small files in
DIR/meta (one syscall each, as a program would). Prints the overall operations per second on
stdout and each phase's rate on stderr.

Usage: meta-job.py DIR [N]   (N defaults to 10000)
"""
import os
import sys
import time

d = os.path.join(sys.argv[1], "meta")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
os.mkdir(d)
phases = [
    ("create", lambda i: os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))),
    ("stat", lambda i: os.stat(f"{d}/f{i}")),
    ("rename", lambda i: os.rename(f"{d}/f{i}", f"{d}/g{i}")),
    ("unlink", lambda i: os.unlink(f"{d}/g{i}")),
]
took = []
for name, op in phases:
    t = time.perf_counter()
    for i in range(n):
        op(i)
    took.append((name, time.perf_counter() - t))
os.rmdir(d)
print(" ".join(f"{name}={n / s:.0f}/s" for name, s in took), file=sys.stderr)
print(f"{len(phases) * n / sum(s for _, s in took):.0f}")
