"""OpenViking's own Python client (openviking-sdk) against `vikingfs serve`: search and
sessions. Run by tests/api/api_clients_search.rs as `python sdk_search.py URL`; the server
holds the files that test wrote. Exits non-zero naming the first failed check."""

import sys
import time

from openviking_sdk import OpenVikingError, SyncHTTPClient

URL = sys.argv[1]


def check(cond, what, detail=None):
    if not cond:
        print(f"FAILED: {what}: {detail!r}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


c = SyncHTTPClient(url=URL)
c.initialize()

w = c.wait_processed()
check(w.get("drained") is True, "wait_processed drains", w)

# find: the shape the SDK hands its callers.
r = c.find("authentication tokens", limit=5)
check(set(r) >= {"memories", "resources", "skills", "total"}, "find's buckets", r)
hits = r["memories"] + r["resources"] + r["skills"]
check(r["total"] == len(hits) and 0 < len(hits) <= 5, "find's total and limit", r)
alpha = [h for h in r["resources"] if h["uri"] == "viking://resources/docs/alpha.md"]
check(alpha and alpha[0]["level"] == 2 and alpha[0]["context_type"] == "resource",
      "find names the file", r)
check("authentication" in alpha[0]["abstract"], "find's abstract quotes the file", alpha)
mem = [h for h in r["memories"] if "/memories/" in h["uri"]]
check(mem and mem[0]["context_type"] == "memory", "a memory is in memories", r)
# score is 0..1, best first, and score_threshold cuts at it (issue 45).
scores = [h["score"] for h in hits]
check(all(0 < x <= 1 for x in scores), "find's scores are 0..1", scores)
best = max(scores)
top = c.find("authentication tokens", limit=5, options={"score_threshold": best})
check(top["total"] >= 1 and all(h["score"] >= best
                                 for h in top["memories"] + top["resources"] + top["skills"]),
      "score_threshold keeps the hits at or above it", top)
under = c.find("vector embeddings", target_uri="viking://resources/docs/sub", limit=5)
uris = [h["uri"] for h in under["resources"] + under["memories"] + under["skills"]]
check(uris and all(u.startswith("viking://resources/docs/sub") for u in uris),
      "find under a target", uris)

# The query syntax holds through the API: a path filter and an exclusion.
only = c.find("authentication tokens path:*.md -nonexistentword", limit=5)
ouris = [h["uri"] for h in only["resources"] if h["level"] == 2]
check(ouris and all(u.endswith(".md") for u in ouris), "find with path:*.md", only)
# A phrase no file holds is not what the user meant: the query is run again as its words.
again = c.find('"tokens authentication alpha"', limit=5)
check("viking://resources/docs/alpha.md" in [h["uri"] for h in again["resources"]],
      "a phrase no file holds is run again as text", again)

# search: list mode as find, then the context block.
s = c.search("authentication tokens", limit=5)
check([h["uri"] for h in s["resources"]] == [h["uri"] for h in r["resources"]],
      "search lists as find does", s)
ctx = c.search_context("authentication tokens")
check(ctx["entries"] and ctx["rendered"].startswith("<memory uri="), "search_context", ctx)
check(ctx["stats"]["used_tokens"] <= ctx["stats"]["max_tokens"], "the budget holds",
      ctx["stats"])

# grep and glob.
g = c.grep("viking://resources", "alpha")
check(g["count"] == 1 and g["matches"][0]["line"] == 3, "grep finds the line", g)
gl = c.glob("**/*.md", uri="viking://resources")
check(gl["matches"] == ["viking://resources/docs/alpha.md",
                        "viking://resources/docs/sub/beta.md"], "glob", gl)

# A session: create, messages, commit as a task, get, context, list, delete.
created = c.create_session(session_id="sdk1")
check(created["session_id"] == "sdk1", "create_session", created)
m = c.add_message("sdk1", "user", "I prefer dark mode in editors")
check(m == {"session_id": "sdk1", "message_count": 1, "pending_tokens": 8}, "add_message", m)
m = c.add_message("sdk1", "assistant", parts=[{"type": "text", "text": "Noted."}])
check(m["message_count"] == 2, "add_message with parts", m)
b = c.batch_add_messages("sdk1", [{"role": "user", "content": "a"},
                                   {"role": "assistant", "content": "b"}])
check(b["added"] == 2 and b["message_count"] == 4, "batch_add_messages", b)
info = c.get_session("sdk1")
check(info["message_count"] == 4 and info["pending_tokens"] == 12, "get_session", info)
check(c.session_exists("sdk1") and not c.session_exists("nope"), "session_exists", None)
cx = c.get_session_context("sdk1", token_budget=4000)
check(len(cx["messages"]) == 4 and cx["estimatedTokens"] == 12, "get_session_context", cx)
commit = c.commit_session("sdk1")
check(commit["status"] == "accepted" and commit["archived"] and commit["task_id"],
      "commit_session", commit)
task = None
for _ in range(600):
    task = c.get_task(commit["task_id"])
    if task and task["status"] in ("completed", "failed", "cancelled"):
        break
    time.sleep(0.1)
check(task and task["status"] == "completed", "the commit's task completes", task)
tasks = c.list_tasks(task_type="session_commit", limit=3)
check(tasks and tasks[0]["task_id"] == commit["task_id"], "list_tasks", tasks)
after = c.get_session("sdk1")
check(after["commit_count"] == 1 and after["message_count"] == 0, "committed", after)
cx = c.get_session_context("sdk1")
check(cx["messages"] == [] and "dark mode" in cx["latest_archive_overview"],
      "the context holds the archive's overview", cx)
arch = c.get_session_archive("sdk1", "archive_001")
check(len(arch["messages"]) == 4, "get_session_archive", arch)
sessions = c.list_sessions()
check([x["session_id"] for x in sessions] == ["sdk1"], "list_sessions", sessions)
c.delete_session("sdk1")
check(not c.session_exists("sdk1"), "delete_session", None)
try:
    c.get_session("sdk1")
    check(False, "a deleted session is not found", None)
except OpenVikingError as e:
    check(e.code == "NOT_FOUND", "a deleted session is NOT_FOUND", e.code)
check(c.get_task("no-such-task") is None, "get_task of nothing", None)

# The observers, as `client.observer` reads them.
q = c.observer.queue
check(q["name"] == "queue" and "Pending" in q["status"], "observer.queue", q)
v = c.observer.vikingdb
check("Vector count" in v["status"], "observer.vikingdb", v)
c.close()
print("all checks passed")
