#!/usr/bin/env python3
"""What keeping each replaced version costs the filesystem itself, without vikingfs: a 100 MiB
file rewritten in the order the mount sees an overwrite (an fd open, the old version kept by
FICLONE, the file truncated, 100 MiB written through the fd, fsync), beside the same rewrite
keeping nothing. Prints the seconds of each round, write+fsync, so the trend shows.

    scripts/keep-fsync.py DIR [ROUNDS]     (DIR on the filesystem to measure: XFS, btrfs)
"""

import fcntl
import os
import sys
import time

FICLONE = 0x40049409
d = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
f = os.path.join(d, "keep-fsync.dat")
new = os.urandom(100 << 20)
with open(f, "wb") as o:
    o.write(new)
os.sync()


def one(i, keep):
    a = os.open(f, os.O_WRONLY)
    if keep:
        src = os.open(f, os.O_RDONLY)
        b = os.open(f"{f}.kept{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        fcntl.ioctl(b, FICLONE, src)
        os.close(b)
        os.close(src)
    os.truncate(f, 0)
    t = time.time()
    for off in range(0, len(new), 128 << 10):
        os.write(a, new[off:off + (128 << 10)])
    os.fsync(a)
    os.close(a)
    return time.time() - t


for keep in (False, True):
    times = [one(i, keep) for i in range(rounds)]
    print(f"{'kept by FICLONE' if keep else 'nothing kept':16}", " ".join(f"{t:.3f}" for t in times))
for name in os.listdir(d):
    if name.startswith("keep-fsync.dat"):
        os.remove(os.path.join(d, name))
