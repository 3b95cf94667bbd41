"""OpenViking's own Python client (openviking_sdk) against `vikingfs serve`: its snapshot
namespace over the history. Write files, overwrite one and remove another through the API;
then `snapshot.log` lists the changes newest first, `snapshot.show` reads a file as it was
before them, `snapshot.diff` compares the two versions, and `snapshot.restore` (dry run, then
for real) brings the directory back; a user key without paths is refused.

    python sdk_snapshot.py URL --key API_KEY [--user-key USER_KEY]

Exits non-zero naming the first check that failed.
"""

import argparse

from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import NotFoundError, OpenVikingError, PermissionDeniedError
from checks import check, raises


ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("--key")
ap.add_argument("--user-key")
a = ap.parse_args()
c = SyncHTTPClient(url=a.url, api_key=a.key)
c.initialize()
snap = c.snapshot

d = "viking://resources/snap"
c.mkdir(d)
c.write(f"{d}/a.md", "alpha one\nalpha two\n", mode="create", wait=True)
c.write(f"{d}/b.md", "bravo\n", mode="create", wait=True)
# Creating files keeps nothing (nothing was there): the replace and the rm below are the
# history's changes, and the state before them the files as written here.
c.write(f"{d}/a.md", "alpha one\nalpha 2\n", mode="replace", wait=True)
c.rm(f"{d}/b.md")

log = snap.log(paths=[d])
# Two requests, two commits: the rm (newest), the replace before it.
check("log: commits newest first", isinstance(log, list) and len(log) == 2, log)
newest, replaced = log
check("log: a commit's fields", all(k in newest for k in ("oid", "parents", "message", "author")), newest)
check("log: oid is 40 hex digits", len(newest["oid"]) == 40, newest["oid"])
check("log: a change names its API caller", newest["author"]["name"].startswith("api: user "), newest["author"])
check("log: each commit's parent is the one before", newest["parents"] == [replaced["oid"]], log)
check("log: one commit per request", "rm" in newest["message"] and "write" in replaced["message"], log)
before = replaced["parents"][0]

blob = snap.show(before, path=f"{d}/b.md")
check("show: b.md before its rm", blob["bytes"] == b"bravo\n", blob)
check("show: size header", blob["size"] == 6, blob)
blob = snap.show(before, path=f"{d}/a.md")
check("show: a.md before its overwrite", blob["bytes"] == b"alpha one\nalpha two\n", blob)
raises("show: a path that never was", NotFoundError, lambda: snap.show(before, path=f"{d}/zz.md"))
raises("show: an unknown ref", NotFoundError, lambda: snap.show("not-a-ref", path=f"{d}/a.md"))

df = snap.diff(f"{d}/a.md", from_ref=before, to_ref="main")
check("diff: modified", df.get("change_type") == "modified", df)
check("diff: unified text", "-alpha two" in df["diff_text"] and "+alpha 2" in df["diff_text"], df)
df = snap.diff(f"{d}/b.md", from_ref=before, to_ref="main")
check("diff: deleted", df.get("change_type") == "deleted", df)

plan = snap.restore(project_dir=d, source_commit=before, dry_run=True)
check("restore dry run: a plan", plan.get("result") == "dry_run", plan)
check("restore dry run: b.md would come back", f"{d}/b.md" in plan.get("to_write", []), plan)
check("restore dry run: nothing changed", c.read(f"{d}/a.md") == "alpha one\nalpha 2\n")
r = snap.restore(project_dir=d, source_commit=before)
check("restore: applied", r.get("result") == "applied", r)
check("restore: a.md as it was", c.read(f"{d}/a.md") == "alpha one\nalpha two\n")
check("restore: b.md back", c.read(f"{d}/b.md") == "bravo\n")
# The restore is itself a change: what it replaced is kept, and the log shows it.
after = snap.log(paths=[d])
check("log after restore: a commit of its own, after the change it undid",
      after[0]["parents"] == [newest["oid"]] and after[1]["oid"] == newest["oid"], after[:2])

head = snap.commit(message="checkpoint", paths=[d])
check("commit: answers the newest commit", head.get("oid") == after[0]["oid"], head)

if a.user_key:
    u = SyncHTTPClient(url=a.url, api_key=a.user_key)
    u.initialize()
    raises("user log without paths", PermissionDeniedError, lambda: u.snapshot.log())
    raises("user restore without project_dir", OpenVikingError,
           lambda: u.snapshot.restore(source_commit=before, dry_run=True))
    raises("user log of another user's tree", PermissionDeniedError,
           lambda: u.snapshot.log(paths=["viking://user/default"]))
    shared = u.snapshot.log(paths=[d])
    check("user log of the shared resources", shared and shared[0]["oid"] == head["oid"], shared)

print("all checks passed")
