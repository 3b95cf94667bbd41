//! MCP with the reference client (the `mcp` package, tests/api/mcp_client.py): streamable HTTP
//! at a real `vikingfs serve`'s `/mcp`, and `vikingfs mcp` on stdio, both through the daemon's
//! socket and with the engine opened in the process; and `/mcp` refusing a caller without a key.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::serve::{clients, Served};
use crate::support::BIN;

/// tests/api/mcp_client.py ARGS with the clients' Python, `vikingfs` (which it may start) seeing
/// `home` as HOME and none of the caller's vikingfs variables.
fn mcp_client(clients: &Path, home: &Path, args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api/mcp_client.py");
    Command::new(clients.join("venv/bin/python"))
        .arg(script)
        .args(args)
        .env("HOME", home)
        .env_remove("VIKINGFS_CONFIG")
        .env_remove("VIKINGFS_WORKSPACE")
        .env_remove("VIKINGFS_CRASH_AT")
        .output()
        .unwrap()
}

fn assert_passed(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "mcp_client.py {what} failed ({:?}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_mcp_client_lists_and_calls_the_tools_over_http_and_stdio() {
    let Some(clients) = clients() else { return };
    let s = Served::new();
    let url = format!("{}/mcp", s.url());
    let out = mcp_client(&clients, &s.home, &["--http", &url]);
    assert_passed(&out, "over HTTP");

    // With the daemon live, `vikingfs mcp` goes through its socket.
    let ws = s.ws.to_str().unwrap();
    let out = mcp_client(&clients, &s.home, &["--stdio", BIN, ws, "--via", "daemon"]);
    assert_passed(&out, "over stdio, through the daemon");

    // A workspace no daemon serves: the engine in the process.
    let other = s.dir.path().join("ws-no-daemon");
    let other = other.to_str().unwrap();
    let out = mcp_client(
        &clients,
        &s.home,
        &["--stdio", BIN, other, "--via", "engine"],
    );
    assert_passed(&out, "over stdio, with the engine in the process");
    assert!(
        Path::new(other).join(".vikingfs").is_dir(),
        "the in-process engine opened the workspace"
    );
}

#[test]
fn mcp_needs_the_key_the_api_needs() {
    let s = Served::with_config(serde_json::json!({"server": {"root_api_key": "mcp-root-key"}}));
    let init = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}},
    });
    let accept = "Accept: application/json, text/event-stream";
    let (code, v) = s.json("POST", "/mcp", &[accept], &init);
    assert_eq!(code, 401, "{v}");
    assert_eq!(v["error"]["code"], -32001, "a JSON-RPC error: {v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("API key"),
        "{v}"
    );
    let (code, v) = s.json("POST", "/mcp", &[accept, "X-API-Key: wrong"], &init);
    assert_eq!(code, 401, "{v}");
    let (code, v) = s.json(
        "POST",
        "/mcp",
        &[accept, "Authorization: Bearer mcp-root-key"],
        &init,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["result"]["serverInfo"]["name"], "openviking", "{v}");

    let Some(clients) = clients() else { return };
    let url = format!("{}/mcp", s.url());
    let with_key = [
        "--http",
        &url,
        "--header",
        "Authorization: Bearer mcp-root-key",
    ];
    assert_passed(&mcp_client(&clients, &s.home, &with_key), "with the key");
    // The socket is the owner's: `vikingfs mcp` needs no key.
    let ws = s.ws.to_str().unwrap();
    let out = mcp_client(&clients, &s.home, &["--stdio", BIN, ws, "--via", "daemon"]);
    assert_passed(&out, "over stdio with a key configured");
}
