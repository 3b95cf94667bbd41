"""OpenViking 0.5.2's `ov` command against `vikingfs serve`: add a local directory (ov zips
and uploads it) and a file, wait, ls, tree, stat, read, abstract, get, mkdir, write, mv,
rm, and the errors it shows.

    python ov_fs.py URL OV [--key API_KEY] [--held URI]

`ov` finds the server through the file OPENVIKING_CLI_CONFIG_FILE names (ovcli.conf:
`{"url": ..., "api_key": ...}`) and wants a display language in ~/.openviking, so both
are made in a private HOME. With --held, URI is a tree another process holds locked:
`ov rm -r` of it must fail with CONFLICT, checked first. Exits non-zero naming the first
check that failed.
"""

import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import tempfile
from checks import check

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("ov")
ap.add_argument("--key")
ap.add_argument("--held")
a = ap.parse_args()
url, ov, key = a.url, a.ov, a.key

home = tempfile.mkdtemp(prefix="ov-fs-home-")
atexit.register(shutil.rmtree, home, True)
os.makedirs(os.path.join(home, ".openviking"))
with open(os.path.join(home, ".openviking", "ovcli.settings.conf"), "w") as f:
    json.dump({"language": "en"}, f)
conf = os.path.join(home, "ovcli.conf")
with open(conf, "w") as f:
    json.dump({"url": url, **({"api_key": key} if key else {})}, f)
env = dict(os.environ, HOME=home, OPENVIKING_CLI_CONFIG_FILE=conf, NO_COLOR="1")


def run(*args):
    p = subprocess.run([ov, *args], env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def ok(*args):
    rc, out = run(*args)
    check(f"ov {' '.join(args)}: exit 0", rc == 0, out)
    return out


def fails(what, needle, *args):
    rc, out = run(*args)
    check(f"{what}: ov {' '.join(args)} fails with {needle}", rc != 0 and needle in out, (rc, out))


def result(*args):
    """`ov -o json ARGS`: its {"ok": true, "result": ...}."""
    out = ok("-o", "json", *args)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            doc = json.loads(line)
            check(f"ov -o json {' '.join(args)}: ok", doc.get("ok") is True, doc)
            return doc["result"]
    check(f"ov -o json {' '.join(args)}: a JSON answer", False, out)


if a.held:
    fails("rm of a held tree", "CONFLICT", "rm", a.held, "-r")

src = tempfile.mkdtemp(prefix="ov-fs-")
atexit.register(shutil.rmtree, src, True)
docs = os.path.join(src, "docs")
os.makedirs(os.path.join(docs, "sub"))
alpha = "# Alpha guide\n\nThe alpha service handles authentication tokens.\n"
with open(os.path.join(docs, "alpha.md"), "w") as f:
    f.write(alpha)
with open(os.path.join(docs, "sub", "beta.md"), "w") as f:
    f.write("Beta notes about vector embeddings.\n")
single = os.path.join(src, "single.txt")
with open(single, "w") as f:
    f.write("Standalone note about kubernetes.\n")

out = ok("add-resource", docs, "--to", "viking://resources/cli-docs", "--wait")
check("add-resource dir: root_uri", "viking://resources/cli-docs" in out, out)
out = ok("add-resource", single, "--parent", "viking://resources", "--wait")
check("add-resource file: root_uri", "viking://resources/single.txt" in out, out)
ok("wait")

entries = result("ls", "viking://resources")
listed = sorted(e["uri"] for e in entries if not e["uri"].endswith("/held"))
check("ls", listed == ["viking://resources/cli-docs", "viking://resources/single.txt"], entries)
check("ls: abstracts", "Alpha" in next(e for e in entries if e["isDir"])["abstract"], entries)
tree = result("tree", "viking://resources/cli-docs")
check("tree", [e["rel_path"] for e in tree] == ["alpha.md", "sub", "sub/beta.md"], tree)
st = result("stat", "viking://resources/cli-docs/alpha.md")
check("stat", st["isDir"] is False and st["size"] == len(alpha), st)
check("read", ok("read", "viking://resources/cli-docs/alpha.md").strip() == alpha.strip())
check("abstract", "Alpha" in ok("abstract", "viking://resources/cli-docs"))
dl = os.path.join(src, "dl.md")
ok("get", "viking://resources/cli-docs/alpha.md", dl)
with open(dl) as f:
    check("get", f.read() == alpha)

ok("mkdir", "viking://resources/clidir")
ok("write", "viking://resources/clidir/x.md", "--content", "hello")
ok("write", "viking://resources/clidir/x.md", "--content", " world", "--append", "--wait")
check("read after write", ok("read", "viking://resources/clidir/x.md").strip() == "hello world")

ok("mv", "viking://resources/cli-docs", "viking://resources/cli-docs2")
check("mv", result("stat", "viking://resources/cli-docs2")["isDir"] is True)
fails("mv: old name", "NOT_FOUND", "stat", "viking://resources/cli-docs")
ok("rm", "viking://resources/cli-docs2", "-r")
fails("rm -r", "NOT_FOUND", "stat", "viking://resources/cli-docs2")
ok("rm", "viking://resources/clidir/x.md")
fails("read missing", "NOT_FOUND", "read", "viking://resources/nope.md")

# issue 45: the commit ids `ov snapshot log` shows are real and distinct (an oid that was the
# time zero-padded showed as 000000000000 for every commit).
out = ok("snapshot", "log", "--paths", "viking://resources")
# The table: a header line (`oid  author  subject`), then one commit a line, its id first.
lines = [l for l in out.splitlines() if l.strip()]
ids = [l.split()[0] for l in lines[1:]]
check("snapshot log: commit ids shown", len(ids) >= 3 and lines[0].split()[0] == "oid", out)
check("snapshot log: commit ids are hex", all(re.fullmatch(r"[0-9a-f]{7,40}", i) for i in ids), out)
check("snapshot log: commit ids distinct", len(set(ids)) == len(ids), out)
check("snapshot log: commit ids are not zeros", not any(set(i) == {"0"} for i in ids), out)
full = result("snapshot", "log", "--paths", "viking://resources")
oids = [c["oid"] for c in full]
check("snapshot log -o json: 40-digit oids, distinct",
      all(len(o) == 40 for o in oids) and len(set(oids)) == len(oids), full)
check("snapshot log: the table shows the oids' heads",
      all(any(o.startswith(i) for o in oids) for i in ids), (ids, oids))
fails("a traversal", "INVALID_URI", "read", "viking://resources/../etc/passwd")

print("ov_fs: all checks passed")
