"""OpenViking's own Python client (openviking_sdk) against `vikingfs serve`: add a local
directory (the SDK zips and uploads it) and a file, wait, then ls, tree, stat, read,
abstract, download, mkdir, write (create, append, replace), mv, rm, and the errors it maps.

    python sdk_fs.py URL [--key API_KEY] [--held URI]

With --held, URI is a tree another process holds locked: removing it must fail busy
(409 CONFLICT, path_busy), checked first. Exits non-zero naming the first check that failed.
"""

import argparse
import atexit
import os
import shutil
import tempfile

from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidURIError,
    NotFoundError,
    OpenVikingError,
)
from checks import check, raises


ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("--key")
ap.add_argument("--held")
a = ap.parse_args()
c = SyncHTTPClient(url=a.url, api_key=a.key)
c.initialize()

if a.held:
    e = raises("rm of a held tree", ConflictError, lambda: c.rm(a.held, recursive=True))
    check(
        "busy: path_busy, retryable",
        e.details.get("conflict_type") == "path_busy" and e.details.get("retryable") is True,
        e.details,
    )
    check("busy: still there", c.stat(a.held)["isDir"] is True)

src = tempfile.mkdtemp(prefix="sdk-fs-")
atexit.register(shutil.rmtree, src, True)
docs = os.path.join(src, "docs")
os.makedirs(os.path.join(docs, "sub"))
alpha = "# Alpha guide\n\nThe alpha service handles authentication tokens.\nSecond line.\n"
with open(os.path.join(docs, "alpha.md"), "w") as f:
    f.write(alpha)
with open(os.path.join(docs, "sub", "beta.md"), "w") as f:
    f.write("Beta notes about vector embeddings.\n")
single = os.path.join(src, "single.txt")
with open(single, "w") as f:
    f.write("Standalone note about kubernetes.\n")

# A local directory: zipped, uploaded, unpacked by the server, processed before the answer.
r = c.add_resource(docs, to="viking://resources/docs", wait=True)
check("add_resource dir: root_uri", r.get("root_uri") == "viking://resources/docs", r)
check("add_resource dir: status", r.get("status") == "success", r)
r = c.add_resource(single, wait=False)
check("add_resource file: root_uri", r.get("root_uri") == "viking://resources/single.txt", r)
r = c.add_resource(single, parent="viking://resources/docs")
check("add_resource into a parent", r.get("root_uri") == "viking://resources/docs/single.txt", r)
c.wait_processed()

entries = c.ls("viking://resources")
names = sorted(e["name"] for e in entries if e["name"] != "held")
check("ls: names", names == ["docs", "single.txt"], entries)
docs_e = next(e for e in entries if e["name"] == "docs")
check("ls: a directory", docs_e["isDir"] is True and docs_e["uri"] == "viking://resources/docs", docs_e)
page = c.ls_page("viking://resources", node_limit=1)
check("ls_page: has_more", page["has_more"] is True and len(page["result"]) == 1, page)
uris = c.ls("viking://resources/docs", simple=True, recursive=True)
check(
    "ls simple recursive",
    sorted(uris)
    == [
        "viking://resources/docs/alpha.md",
        "viking://resources/docs/single.txt",
        "viking://resources/docs/sub",
        "viking://resources/docs/sub/beta.md",
    ],
    uris,
)
agent = c.ls("viking://resources", output="agent")
check("ls agent: abstracts", any("Alpha" in (e.get("abstract") or "") for e in agent), agent)

tree = c.tree("viking://resources")
rels = [e["rel_path"] for e in tree]
check("tree: depth first", rels.index("docs") < rels.index("docs/sub") < rels.index("docs/sub/beta.md"), rels)
check("tree: no summaries listed", not any(".abstract.md" in r for r in rels), rels)

st = c.stat("viking://resources/docs/alpha.md")
check("stat file", st["isDir"] is False and st["size"] == len(alpha.encode()), st)
st = c.stat("viking://resources/docs")
check("stat dir", st["isDir"] is True and st["isLocked"] is False and st.get("count", 0) >= 2, st)
raises("stat missing", NotFoundError, lambda: c.stat("viking://resources/docs/nope.md"))

check("read", c.read("viking://resources/docs/alpha.md") == alpha)
check("read offset/limit", c.read("viking://resources/docs/alpha.md", offset=2, limit=1) == "The alpha service handles authentication tokens.\n")
raises("read missing", NotFoundError, lambda: c.read("viking://resources/nope.md"))
raises("read ..", InvalidURIError, lambda: c.read("viking://resources/../../etc/passwd"))
ab = c.abstract("viking://resources/docs")
check("abstract", isinstance(ab, str) and "Alpha" in ab and "not ready" not in ab, ab)
ov = c.overview("viking://resources/docs")
check("overview", "alpha.md" in ov, ov)
check("download_bytes", c.download_bytes("viking://resources/docs/alpha.md") == alpha.encode())

c.mkdir("viking://resources/newdir")
raises("mkdir again", AlreadyExistsError, lambda: c.mkdir("viking://resources/newdir"))
r = c.write("viking://resources/newdir/n.md", "hello world", mode="create")
check("write create", r.get("written_bytes") == 11 and r.get("uri") == "viking://resources/newdir/n.md", r)
r = c.write("viking://resources/newdir/n.md", "\nmore", mode="append", wait=True)
check("write append", r.get("written_bytes") == 16, r)
check("read after append", c.read("viking://resources/newdir/n.md") == "hello world\nmore")
c.write("viking://resources/newdir/n.md", "replaced", mode="replace")
check("read after replace", c.read("viking://resources/newdir/n.md") == "replaced")
raises("write bad mode", OpenVikingError, lambda: c.write("viking://resources/newdir/n.md", "x", mode="upsert"))

c.mv("viking://resources/newdir/n.md", "viking://resources/newdir/m.md")
check("mv: new name", c.read("viking://resources/newdir/m.md") == "replaced")
raises("mv: old name gone", NotFoundError, lambda: c.stat("viking://resources/newdir/n.md"))
c.mv("viking://resources/newdir", "viking://resources/moved")
check("mv dir", [e["name"] for e in c.ls("viking://resources/moved")] == ["m.md"])

c.wait_processed()
c.rm("viking://resources/moved/m.md")
raises("rm file", NotFoundError, lambda: c.stat("viking://resources/moved/m.md"))
c.rm("viking://resources/docs", recursive=True)
raises("rm -r", NotFoundError, lambda: c.stat("viking://resources/docs"))
raises("rm missing", NotFoundError, lambda: c.rm("viking://resources/docs", recursive=True))
left = sorted(e["name"] for e in c.ls("viking://resources") if e["name"] != "held")
check("ls after rm", left == ["moved", "single.txt"], left)

c.close()
print("sdk_fs: all checks passed")
