//! Accounts and keys: `vikingfs key add|list|rm` against a running daemon, OpenViking's admin
//! routes over the same key store, who may call them, and where a server without a key may
//! listen.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::serve::Served;
use crate::support::vikingfs;

const ROOT: &str = "X-API-Key: root-secret";

fn keyed() -> Served {
    Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }))
}

fn key_header(key: &str) -> String {
    format!("X-API-Key: {key}")
}

/// `GET /api/v1/system/status` with `headers`: the status and the result (or the error).
fn whoami(s: &Served, headers: &[&str]) -> (u16, Value) {
    let (code, v) = s.call("GET", "/api/v1/system/status", headers, None);
    assert_eq!(
        v["status"],
        if code == 200 { "ok" } else { "error" },
        "not the envelope: {v}"
    );
    (
        code,
        if code == 200 {
            v["result"].clone()
        } else {
            v["error"].clone()
        },
    )
}

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn a_key_made_by_the_cli_works_at_once_and_stops_at_once() {
    let s = keyed();
    let key = stdout(&s.cli(&["key", "add", "--user", "bob"]))
        .trim()
        .to_string();
    assert!(key.starts_with("vk-"), "{key}");
    let (code, me) = whoami(&s, &[&key_header(&key)]);
    assert_eq!(code, 200, "{me}");
    assert_eq!(
        (me["user"].as_str(), me["role"].as_str()),
        (Some("bob"), Some("user"))
    );
    // Bearer works as well as X-API-Key.
    let (code, me) = whoami(&s, &[&format!("Authorization: Bearer {key}")]);
    assert_eq!((code, me["user"].as_str()), (200, Some("bob")));

    // Kept hashed: neither the listing nor the file holds the key.
    let list = stdout(&s.cli(&["key", "list"]));
    assert!(list.contains("bob") && !list.contains(&key[3..]), "{list}");
    let listed: Value = serde_json::from_str(&stdout(&s.cli(&["key", "list", "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(!listed.to_string().contains(&key[3..]));
    let file = std::fs::read_to_string(s.ws.join(".vikingfs/keys.json")).unwrap();
    assert!(!file.contains(&key[3..]));

    // A second key for bob; the first removed: it stops working, the second goes on.
    let key2 = stdout(&s.cli(&["key", "add", "--user", "bob"]))
        .trim()
        .to_string();
    let id = listed[0]["id"].as_str().unwrap();
    stdout(&s.cli(&["key", "rm", id]));
    let (code, e) = whoami(&s, &[&key_header(&key)]);
    assert_eq!(
        (code, e["code"].as_str()),
        (401, Some("UNAUTHENTICATED")),
        "{e}"
    );
    assert_eq!(whoami(&s, &[&key_header(&key2)]).0, 200);

    // Another account: refused in one line, nothing made.
    let out = s.cli(&["key", "add", "--account", "acme", "--user", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("serves account default"), "{err}");
    let listed: Value = serde_json::from_str(&stdout(&s.cli(&["key", "list", "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let out = s.cli(&["key", "rm", "no-such-id"]);
    assert!(!out.status.success());
}

#[test]
fn the_admin_routes_manage_the_accounts_users_over_the_same_keys() {
    let s = keyed();
    let a = "/api/v1/admin/accounts";
    // Accounts: the one this workspace serves.
    let (code, v) = s.call("GET", a, &[ROOT], None);
    assert_eq!(code, 200, "{v}");
    let accounts = v["result"].as_array().unwrap();
    assert_eq!(accounts.len(), 1, "{v}");
    assert_eq!(accounts[0]["account_id"], "default");
    assert_eq!(accounts[0]["status"], "active");
    let (code, v) = s.json(
        "POST",
        a,
        &[ROOT],
        &json!({"account_id": "acme", "admin_user_id": "x"}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (501, Some("UNIMPLEMENTED")),
        "{v}"
    );
    let (code, v) = s.json(
        "POST",
        a,
        &[ROOT],
        &json!({"account_id": "default", "admin_user_id": "x"}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (409, Some("ALREADY_EXISTS")),
        "{v}"
    );
    let (code, v) = s.call("GET", &format!("{a}/acme"), &[ROOT], None);
    assert_eq!(
        (code, v["error"]["details"]["type"].as_str()),
        (404, Some("account")),
        "{v}"
    );
    let (code, v) = s.call("DELETE", &format!("{a}/default"), &[ROOT], None);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (501, Some("UNIMPLEMENTED")),
        "{v}"
    );

    // Users: made by root, then by an admin of the account.
    let users = format!("{a}/default/users");
    let (code, v) = s.json(
        "POST",
        &users,
        &[ROOT],
        &json!({"user_id": "ann", "role": "admin"}),
    );
    assert_eq!(code, 200, "{v}");
    let ann = v["result"]["user_key"].as_str().unwrap().to_string();
    let ann_h = key_header(&ann);
    let (code, v) = s.json("POST", &users, &[&ann_h], &json!({"user_id": "bob"}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["result"]["account_id"], "default");
    let bob = v["result"]["user_key"].as_str().unwrap().to_string();
    let (code, v) = s.json("POST", &users, &[&ann_h], &json!({"user_id": "bob"}));
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (409, Some("ALREADY_EXISTS")),
        "{v}"
    );
    let (code, v) = s.json(
        "POST",
        &users,
        &[ROOT],
        &json!({"user_id": "r", "role": "root"}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{v}"
    );
    let (code, v) = s.json("POST", &users, &[ROOT], &json!({"user_id": "../x"}));
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (400, Some("INVALID_ARGUMENT")),
        "{v}"
    );
    let me = whoami(&s, &[&key_header(&bob)]).1;
    assert_eq!(
        (me["user"].as_str(), me["role"].as_str()),
        (Some("bob"), Some("user"))
    );

    // The same store as `vikingfs key list`.
    let listed = stdout(&s.cli(&["key", "list", "--json"]));
    assert!(
        listed.contains("\"ann\"") && listed.contains("\"bob\""),
        "{listed}"
    );

    // Who may call: a user key none of them; an admin key its account's users, not accounts.
    for (method, path) in [("GET", users.as_str()), ("GET", a)] {
        let (code, v) = s.call(method, path, &[&key_header(&bob)], None);
        assert_eq!(
            (code, v["error"]["code"].as_str()),
            (403, Some("PERMISSION_DENIED")),
            "{v}"
        );
    }
    let (code, v) = s.call("GET", a, &[&ann_h], None);
    assert_eq!(code, 403, "{v}");
    let (code, v) = s.call(
        "GET",
        &format!("{users}?include_summary=true"),
        &[&ann_h],
        None,
    );
    assert_eq!(code, 200, "{v}");
    let r = &v["result"];
    let names: Vec<_> = r["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["user_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ann", "bob"], "{v}");
    assert_eq!(
        (r["total"].as_u64(), r["manager_count"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    assert!(
        !v.to_string().contains(&bob[8..]),
        "a listing shows a key: {v}"
    );
    let (code, v) = s.call("GET", &format!("{users}?role=admin"), &[ROOT], None);
    assert_eq!(
        (code, v["result"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{v}"
    );
    // Another account: not an admin's (OpenViking's check), and not served (root).
    let (code, v) = s.call("GET", &format!("{a}/acme/users"), &[&ann_h], None);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{v}"
    );
    let (code, v) = s.call("GET", &format!("{a}/acme/users"), &[ROOT], None);
    assert_eq!(
        (code, v["error"]["details"]["type"].as_str()),
        (404, Some("account")),
        "{v}"
    );
    let (code, v) = s.call("GET", &format!("{users}/bob"), &[&ann_h], None);
    assert_eq!(
        v["result"],
        json!({"user_id": "bob", "role": "user"}),
        "{code} {v}"
    );

    // A new key for bob: the old one stops at once.
    let (code, v) = s.json("POST", &format!("{users}/bob/key"), &[&ann_h], &json!({}));
    assert_eq!(code, 200, "{v}");
    let bob2 = v["result"]["user_key"].as_str().unwrap().to_string();
    assert_eq!(whoami(&s, &[&key_header(&bob)]).0, 401);
    assert_eq!(whoami(&s, &[&key_header(&bob2)]).0, 200);

    // Promoted, bob manages users too; only promotion is a role change, as in OpenViking.
    let (code, v) = s.json(
        "PUT",
        &format!("{users}/bob/role"),
        &[ROOT],
        &json!({"role": "user"}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (400, Some("INVALID_ARGUMENT")),
        "{v}"
    );
    let (code, v) = s.json(
        "PUT",
        &format!("{users}/bob/role"),
        &[ROOT],
        &json!({"role": "admin"}),
    );
    assert_eq!(
        (code, v["result"]["role"].as_str()),
        (200, Some("admin")),
        "{v}"
    );
    assert_eq!(s.call("GET", &users, &[&key_header(&bob2)], None).0, 200);

    // Removed: 202, its key stops, it is gone.
    let (code, v) = s.call("DELETE", &format!("{users}/bob"), &[&ann_h], None);
    assert_eq!(
        (code, v["result"]["status"].as_str()),
        (202, Some("revoked")),
        "{v}"
    );
    assert_eq!(whoami(&s, &[&key_header(&bob2)]).0, 401);
    let (code, v) = s.call("GET", &format!("{users}/bob"), &[ROOT], None);
    assert_eq!(
        (code, v["error"]["details"]["type"].as_str()),
        (404, Some("user")),
        "{v}"
    );
    let (code, _) = s.call("DELETE", &format!("{users}/bob"), &[ROOT], None);
    assert_eq!(code, 404);
}

#[test]
fn an_open_server_has_no_admin_api_and_serves_loopback_only() {
    let s = Served::new();
    let (code, v) = s.call("GET", "/api/v1/admin/accounts", &[], None);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{v}"
    );
    let (code, v) = s.json(
        "POST",
        "/api/v1/admin/accounts/default/users",
        &[],
        &json!({"user_id": "bob"}),
    );
    assert_eq!(code, 403, "{v}");
    assert!(
        !s.ws.join(".vikingfs/keys.json").exists(),
        "the open server made a key"
    );
    assert!(s.addr.ip().is_loopback(), "{}", s.addr);
    let log = s.log();
    assert!(
        log.contains("no API key is configured") && log.contains("loopback only"),
        "the start does not say it is open: {log}"
    );
}

#[test]
fn beyond_loopback_a_key_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, "{}").unwrap();
    let started = Instant::now();
    let out = vikingfs(dir.path())
        .arg("--config")
        .arg(&cfg)
        .arg("--workspace")
        .arg(dir.path().join("ws"))
        .args(["serve", "--host", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let lines: Vec<_> = err.lines().filter(|l| l.starts_with("vikingfs:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("0.0.0.0 is not loopback and no API key is configured"),
        "{err}"
    );

    // With a root key it starts there, and asks for the key.
    let s = Served::with_config(json!({
        "server": { "host": "0.0.0.0", "root_api_key": "root-secret" }
    }));
    assert!(s.addr.ip().is_unspecified(), "{}", s.addr);
    assert_eq!(whoami(&s, &[]).0, 401);
    let (code, me) = whoami(&s, &[ROOT]);
    assert_eq!((code, me["role"].as_str()), (200, Some("root")), "{me}");
    assert!(!s.log().contains("no API key is configured"));
}

#[test]
fn openvikings_sdk_authenticates_with_the_root_key_and_a_cli_key() {
    let Some(clients) = crate::support::serve::clients() else {
        return;
    };
    let s = keyed();
    let key = stdout(&s.cli(&["key", "add", "--user", "bob"]))
        .trim()
        .to_string();
    let out = crate::support::serve::python(
        &clients,
        "sdk_auth.py",
        &[&s.url(), "root-secret", &key, "bob"],
    );
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{o}\n{e}");
    assert!(o.contains("all checks passed"), "{o}\n{e}");
}

#[test]
fn openvikings_ov_shows_the_identity_and_manages_users() {
    let Some(clients) = crate::support::serve::clients() else {
        return;
    };
    let s = keyed();
    let bob = stdout(&s.cli(&["key", "add", "--user", "bob"]))
        .trim()
        .to_string();
    let home = s.dir.path().join("ov-home");
    std::fs::create_dir_all(&home).unwrap();
    let conf = home.join("ovcli.conf");
    // `ov ARGS` with `api_key` as its key (and the root key for --sudo): (exit code, the JSON
    // it printed, on stdout or, for an error, stderr).
    let ov = |api_key: &str, args: &[&str]| -> (Option<i32>, Value) {
        let c = json!({"url": s.url(), "api_key": api_key, "root_api_key": "root-secret"});
        std::fs::write(&conf, c.to_string()).unwrap();
        let mut cmd = std::process::Command::new(clients.join("bin/ov"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OPENVIKING_")) {
            cmd.env_remove(k);
        }
        let out = cmd
            .env("HOME", &home)
            .env("OPENVIKING_CLI_CONFIG_FILE", &conf)
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v = text
            .lines()
            .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .unwrap_or(Value::Null);
        (out.status.code(), v)
    };
    assert_eq!(ov(&bob, &["language", "en"]).0, Some(0));
    let (code, v) = ov(&bob, &["-o", "json", "health"]);
    assert_eq!(code, Some(0), "{v}");
    let r = &v["result"];
    assert_eq!(
        (
            r["user_id"].as_str(),
            r["role"].as_str(),
            r["account_id"].as_str()
        ),
        (Some("bob"), Some("user"), Some("default")),
        "{v}"
    );
    let (code, v) = ov(
        &bob,
        &[
            "-o",
            "json",
            "--sudo",
            "admin",
            "register-user",
            "default",
            "fred",
        ],
    );
    assert_eq!(code, Some(0), "{v}");
    let fred = v["result"]["user_key"].as_str().unwrap().to_string();
    let (_, v) = ov(&fred, &["-o", "json", "health"]);
    assert_eq!(v["result"]["user_id"], "fred", "{v}");
    let (code, v) = ov(
        &bob,
        &["-o", "json", "--sudo", "admin", "list-users", "default"],
    );
    assert_eq!(code, Some(0), "{v}");
    let names: Vec<_> = v["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["user_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bob", "fred"], "{v}");
    // A user key is no admin; a wrong key is refused.
    let (code, v) = ov(&bob, &["-o", "json", "admin", "list-users", "default"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (Some(1), Some("PERMISSION_DENIED")),
        "{v}"
    );
    let (code, v) = ov("vk-wrong", &["-o", "json", "health"]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (Some(1), Some("UNAUTHENTICATED")),
        "{v}"
    );
}
