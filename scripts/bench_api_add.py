"""Add N files through an OpenViking-compatible server's API until `find` answers for every one
(issue 24's target: 200 files searchable in at most 1 s; OpenViking 0.5.2 took 20.7 s here).

    target/clients/venv/bin/python scripts/bench_api_add.py URL [--key KEY] [--files 200]

The client is OpenViking's own SDK: it zips the directory, uploads it (temp_upload), adds it
(POST /api/v1/resources, wait=false), then this script searches (POST /api/v1/search/find)
for each file's unique word until all are found. Prints one line: the seconds to upload and
add, and to all found, and how many find requests it took.
"""

import argparse
import os
import sys
import tempfile
import time
import uuid

from openviking_sdk import SyncHTTPClient

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("--key")
ap.add_argument("--files", type=int, default=200)
ap.add_argument("--timeout", type=float, default=300)
a = ap.parse_args()

c = SyncHTTPClient(url=a.url, api_key=a.key)
c.initialize()
run = uuid.uuid4().hex[:8]
tokens = {}
with tempfile.TemporaryDirectory() as d:
    root = os.path.join(d, f"bench{run}")
    os.makedirs(root)
    for i in range(a.files):
        tok = f"zq{run}w{i:04d}"
        tokens[tok] = i
        with open(os.path.join(root, f"note{i:04d}.md"), "w") as f:
            f.write(f"# Note {i}\n\nThis note is about {tok} and nothing else.\n")
    t0 = time.monotonic()
    c.add_resource(root, to=f"viking://resources/bench{run}", wait=False)
    added = time.monotonic() - t0

left = set(tokens)
finds = 0
while left and time.monotonic() - t0 < a.timeout:
    for tok in sorted(left):
        r = c.find(tok, target_uri=f"viking://resources/bench{run}", limit=3)
        finds += 1
        hits = (r.get("resources") or []) if isinstance(r, dict) else getattr(r, "resources", [])
        if hits:
            left.discard(tok)
        else:
            break  # files are processed in order: wait for this one before asking the rest
    if left:
        time.sleep(0.05)
took = time.monotonic() - t0
print(
    f"{a.url}: {a.files} files: added in {added:.2f} s, all found after {took:.2f} s "
    f"({finds} finds){'' if not left else f'; {len(left)} never found within {a.timeout} s'}"
)
sys.exit(1 if left else 0)
