"""An agent's changes through MCP, with the reference client (the `mcp` package) naming itself
`undo-test-agent` in its initialize call: write NOTE "one", write it "two", forget its
directory (each a tool call of its own). `vikingfs undo` of the directory must then give back
"two" (tests/api/api_undo.rs checks that). `--http URL` of a `vikingfs serve`'s /mcp,
`--header 'Name: value'` for a key; or `--stdio BIN WORKSPACE HOME`: `BIN --workspace
WORKSPACE mcp` (through the workspace's daemon when one serves it).
"""

import argparse
import asyncio
import os
import sys

import httpx

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation


def text_of(r):
    return "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")


async def agent(rd, wr, note):
    me = Implementation(name="undo-test-agent", version="1")
    async with ClientSession(rd, wr, client_info=me) as s:
        await s.initialize()
        for content in ["one", "two"]:
            r = await s.call_tool("write", {"uri": note, "content": content})
            if r.isError:
                raise SystemExit(f"write {content}: {text_of(r)}")
        parent = note.rsplit("/", 1)[0]
        r = await s.call_tool("forget", {"uri": parent, "recursive": True})
        if r.isError:
            raise SystemExit(f"forget: {text_of(r)}")


async def over_http(url, headers, note):
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as http:
        async with streamable_http_client(url, http_client=http) as (rd, wr, _):
            await agent(rd, wr, note)


async def over_stdio(binary, ws, home, note):
    env = {"HOME": home, "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(command=binary, args=["--workspace", ws, "mcp"], env=env)
    async with stdio_client(params) as (rd, wr):
        await agent(rd, wr, note)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--stdio", nargs=3, metavar=("BIN", "WORKSPACE", "HOME"))
    ap.add_argument("--note", required=True)
    a = ap.parse_args()
    headers = dict(h.split(": ", 1) for h in a.header)
    if a.http:
        asyncio.run(over_http(a.http, headers, a.note))
    if a.stdio:
        asyncio.run(over_stdio(*a.stdio, a.note))
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
