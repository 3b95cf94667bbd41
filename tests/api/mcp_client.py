"""The reference MCP client (the `mcp` package) against vikingfs's MCP: over streamable HTTP
(`--http URL` of a `vikingfs serve`'s /mcp, with `--header 'Name: value'` for a key) and over
stdio (`--stdio BIN WORKSPACE`: `BIN --workspace WORKSPACE mcp`; `--via daemon|engine` checks,
in its log, whether it went through the workspace's daemon or opened the engine itself).

It lists the tools (names and annotations, as OpenViking 0.5.2 advertises them), calls health,
and round-trips a file through write, read, edit, list and forget. A tool whose route is not
on this build (a 404 for the route itself, not for the file) must still fail as a tool error
carrying the envelope's code; its checks are then reported as skipped. Exits non-zero naming
every failed check.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid

import httpx

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

READ_ONLY = {"find", "read", "list", "tree", "grep", "glob", "health", "fetch", "list_users",
             "list_groups", "get_acl", "privacy_tree", "privacy_resolve", "download",
             "list_watches"}
TOOLS = READ_ONLY | {"search", "write", "edit", "remember", "forget", "add_resource", "add_skill",
                     "set_acl",
                     "privacy_upsert", "cancel_watch"}
# OpenViking 0.5.2's tools vikingfs answers with an error saying why it does not serve them.
NOT_SUPPORTED = {"list_groups": {}, "set_acl": {"uri": "viking://resources", "acl": {}},
                 "privacy_tree": {}, "privacy_resolve": {"reference": "x"},
                 "privacy_upsert": {"category": "c", "target_key": "t", "values": {}},
                 "download": {"uri": "viking://resources"}, "list_watches": {},
                 "cancel_watch": {"to_uri": "viking://resources"}}
# OpenViking 0.5.2's annotations of its tools (its tools/list): (readOnly, destructive, idempotent).
ANNOTATIONS = {n: (True, False, True) for n in READ_ONLY}
ANNOTATIONS.update(
    {
        "search": (False, True, False),
        "write": (False, True, False),
        "edit": (False, True, False),
        "remember": (False, True, False),
        "forget": (False, True, True),
        "add_resource": (False, True, False),
        "add_skill": (False, True, False),
        "set_acl": (False, True, True),
        "privacy_upsert": (False, True, False),
        "cancel_watch": (False, True, True),
    }
)
HEALTHY = "OpenViking is healthy (service initialized, storage: VikingFS)"

failed = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failed.append(what)
    return ok


def text_of(r):
    return "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")


def missing_route(r):
    """A tool error whose route is not on this build (the framework's 404, not a file's)."""
    err = (r.structuredContent or {}).get("error") or {}
    return r.isError and err.get("code") == "NOT_FOUND" and text_of(r).startswith(
        "NOT_FOUND: Not Found: /api/"
    )


async def exercise(session, where):
    await session.initialize()
    listed = (await session.list_tools()).tools
    names = {t.name for t in listed}
    check(TOOLS <= names, f"{where}: tools/list has {sorted(TOOLS)} (got {sorted(names)})")
    for t in listed:
        if t.name not in ANNOTATIONS:
            continue
        a = t.annotations
        got = (a.readOnlyHint, a.destructiveHint, a.idempotentHint) if a else None
        check(got == ANNOTATIONS[t.name], f"{where}: {t.name} annotations {got}")
    by_name = {t.name: t for t in listed}
    check(
        by_name["read"].inputSchema["required"] == ["uris"]
        and "min_score" in by_name["find"].inputSchema["properties"],
        f"{where}: OpenViking's argument names (read.uris, find.min_score)",
    )

    r = await session.call_tool("health", {})
    check(not r.isError and text_of(r) == HEALTHY, f"{where}: health says {text_of(r)!r}")
    check(
        (r.structuredContent or {}).get("result") == HEALTHY,
        f"{where}: health's structured result {r.structuredContent}",
    )

    # issue 45: OpenViking's tools vikingfs does not serve say so, as a tool error.
    for name, arguments in NOT_SUPPORTED.items():
        r = await session.call_tool(name, arguments)
        err = (r.structuredContent or {}).get("error") or {}
        check(
            r.isError and err.get("code") == "UNIMPLEMENTED"
            and f"{name} is not supported by vikingfs: " in text_of(r),
            f"{where}: {name} says why it is not served: {text_of(r)!r}",
        )
    r = await session.call_tool("get_acl", {"uri": "viking://resources"})
    check(
        not r.isError
        and (r.structuredContent or {}).get("effective_entries")
        == [{"principal": "user:*", "level": "write"}],
        f"{where}: get_acl gives the access rule: {text_of(r)!r}",
    )

    uri = f"viking://resources/mcp-{uuid.uuid4().hex[:8]}/note.md"
    r = await session.call_tool("write", {"uri": uri, "content": "hello mcp world"})
    if missing_route(r):
        print(f"skip  {where}: write/read/edit/forget: {text_of(r)}", flush=True)
        check(
            r.structuredContent["result"] == text_of(r),
            f"{where}: a failed write is a tool error with the envelope's error beside it",
        )
        r = await session.call_tool("read", {"uris": uri})
        check(r.isError and text_of(r).startswith("NOT_FOUND"), f"{where}: read of a missing route fails")
        return
    check(
        not r.isError and text_of(r).startswith(f"Wrote 15 bytes to {uri} (mode=replace)."),
        f"{where}: write says {text_of(r)!r}",
    )
    r = await session.call_tool("read", {"uris": [uri]})
    check(not r.isError and text_of(r) == "hello mcp world", f"{where}: read gives {text_of(r)!r}")
    r = await session.call_tool("edit", {"uri": uri, "old_string": "mcp", "new_string": "MCP"})
    check(not r.isError and text_of(r).startswith(f"Edited {uri} (15 bytes written)."), f"{where}: edit says {text_of(r)!r}")
    r = await session.call_tool("edit", {"uri": uri, "old_string": "zzz", "new_string": "y"})
    check(
        r.isError and text_of(r).startswith(f"INVALID_ARGUMENT: old_string not found in {uri}."),
        f"{where}: an edit that does not match fails: {text_of(r)!r}",
    )
    r = await session.call_tool("read", {"uris": uri})
    check(text_of(r) == "hello MCP world", f"{where}: read after edit gives {text_of(r)!r}")
    parent = uri.rsplit("/", 1)[0]
    r = await session.call_tool("list", {"uri": parent})
    check(not r.isError and text_of(r) == "[file] note.md", f"{where}: list gives {text_of(r)!r}")
    r = await session.call_tool("forget", {"uri": parent, "recursive": True})
    check(not r.isError and text_of(r) == f"Deleted: {parent}", f"{where}: forget says {text_of(r)!r}")
    r = await session.call_tool("read", {"uris": [uri]})
    check(r.isError and text_of(r).startswith("NOT_FOUND"), f"{where}: read after forget fails: {text_of(r)!r}")

    name = f"mcp-skill-{uuid.uuid4().hex[:8]}"
    md = f"---\nname: {name}\ndescription: A skill added over MCP\n---\n\nDo it.\n"
    r = await session.call_tool("add_skill", {"data": md, "target_uri": "viking://agent/skills"})
    root = f"viking://agent/skills/{name}"
    check(
        not r.isError and text_of(r).startswith(f"Skill added: {root}\n"),
        f"{where}: add_skill says {text_of(r)!r}",
    )
    r = await session.call_tool("read", {"uris": [f"{root}/SKILL.md"]})
    check(not r.isError and text_of(r) == md, f"{where}: the skill's SKILL.md as given: {text_of(r)!r}")
    r = await session.call_tool("add_skill", {"data": "no frontmatter here"})
    check(
        r.isError and text_of(r).startswith("INVALID_ARGUMENT: SKILL.md must have YAML frontmatter"),
        f"{where}: add_skill of a bad SKILL.md fails: {text_of(r)!r}",
    )
    r = await session.call_tool("add_skill", {"path": "https://github.com/a/b"})
    check(r.isError and "fetches no Git" in text_of(r), f"{where}: add_skill of a Git URL says why not: {text_of(r)!r}")


async def over_http(url, headers):
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as http:
        async with streamable_http_client(url, http_client=http) as (rd, wr, _):
            async with ClientSession(rd, wr) as s:
                await exercise(s, f"http {url}")


async def over_stdio(binary, ws, via):
    env = dict(os.environ, RUST_LOG="info")
    params = StdioServerParameters(command=binary, args=["--workspace", ws, "mcp"], env=env)
    with tempfile.TemporaryFile("w+") as log:
        async with stdio_client(params, errlog=log) as (rd, wr):
            async with ClientSession(rd, wr) as s:
                await exercise(s, f"stdio {ws}")
        log.seek(0)
        text = log.read()
    if via:
        phrase = {
            "daemon": "MCP through the workspace's daemon",
            "engine": "MCP with the engine in this process",
        }[via]
        check(phrase in text, f"stdio {ws}: went via the {via} (log: {text.strip()[-400:]!r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--stdio", nargs=2, metavar=("BIN", "WORKSPACE"))
    ap.add_argument("--via", choices=["daemon", "engine"])
    a = ap.parse_args()
    headers = dict(h.split(": ", 1) for h in a.header)
    if a.http:
        asyncio.run(over_http(a.http, headers))
    if a.stdio:
        asyncio.run(over_stdio(a.stdio[0], a.stdio[1], a.via))
    if failed:
        print(f"{len(failed)} check(s) failed:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
