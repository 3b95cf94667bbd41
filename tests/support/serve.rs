//! A real `vikingfs serve` daemon of a fresh workspace ([`Served`]), on a port the kernel picks,
//! stopped (SIGTERM, then SIGKILL) on drop; plain HTTP requests to it ([`Served::call`]); and
//! the real clients the API is tested with ([`clients`]: OpenViking's Python SDK, `ov`, the
//! MCP client), from `scripts/fetch-clients.sh`'s directory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::vikingfs;

pub struct Served {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
    pub addr: SocketAddr,
    pub child: Child,
}

impl Served {
    /// A daemon with no key configured (open, loopback only).
    pub fn new() -> Served {
        Self::with_config(serde_json::json!({}))
    }

    /// A daemon whose config file is `config` (its `server.port` is set to 0 unless given).
    pub fn with_config(config: Value) -> Served {
        Self::with_config_env(config, &[])
    }

    /// `with_config`, the daemon run with the environment variables `env` too.
    pub fn with_config_env(mut config: Value, env: &[(&str, &Path)]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        if config["server"]["port"].is_null() {
            config["server"]["port"] = 0.into();
        }
        let cfg = dir.path().join("config.json");
        std::fs::write(&cfg, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
        let child = vikingfs(&home)
            .arg("--config")
            .arg(&cfg)
            .arg("--workspace")
            .arg(&ws)
            .arg("serve")
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let addr = wait_for_api(&ws, &dir.path().join("serve.log"));
        Served {
            dir,
            home,
            ws,
            addr,
            child,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A new key of user `user` (role `role`) of the default account, as `vikingfs key add`
    /// makes one.
    pub fn user_key(&self, user: &str, role: vikingfs::server::auth::Role) -> String {
        let ws = vikingfs::workspace::Workspace::open(&self.ws, "default", "default").unwrap();
        vikingfs::server::auth::Keys::of(&ws)
            .add("default", user, role, None, false)
            .unwrap()
            .1
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// `vikingfs ARGS` against this daemon's workspace.
    pub fn cli(&self, args: &[&str]) -> Output {
        vikingfs(&self.home)
            .arg("--workspace")
            .arg(&self.ws)
            .args(args)
            .output()
            .unwrap()
    }

    /// `POST /api/v1/resources/temp_upload` of `bytes` named `name` as the multipart field
    /// `file`, with `headers`: the status and the answer.
    pub fn upload(&self, headers: &[&str], name: &str, bytes: &[u8]) -> (u16, Value) {
        let boundary = "vikingfs-test-boundary";
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let ct = format!("Content-Type: multipart/form-data; boundary={boundary}");
        let mut h = headers.to_vec();
        h.push(&ct);
        self.call("POST", "/api/v1/resources/temp_upload", &h, Some(&body))
    }

    /// One HTTP/1.1 request (`headers` as `Name: value` lines); the status and the body as
    /// JSON (`Value::Null` when the body is not JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: Option<&[u8]>,
    ) -> (u16, Value) {
        let (status, bytes) = self.call_raw(method, path, headers, body);
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// `call` with a JSON body.
    pub fn json(&self, method: &str, path: &str, headers: &[&str], body: &Value) -> (u16, Value) {
        let b = serde_json::to_vec(body).unwrap();
        let mut h = headers.to_vec();
        h.push("Content-Type: application/json");
        self.call(method, path, &h, Some(&b))
    }

    pub fn call_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: Option<&[u8]>,
    ) -> (u16, Vec<u8>) {
        http(self.addr, method, path, headers, body)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        super::signal(pid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API address the daemon of `ws` registered (it binds before it registers).
pub fn wait_for_api(ws: &Path, log: &Path) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dir = ws.join(".vikingfs/daemons");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let rec: Value = std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            if let Some(a) = rec["api"].as_str() {
                return a.parse().unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "vikingfs serve did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The name OpenViking's SDK gives the zip it makes of a directory (`temp_upload_<uuid4
/// hex>.zip`): the one upload name (with `ov`'s `.tmpXXXXXX.zip`) the server unpacks.
pub const DIR_ZIP: &str = "temp_upload_0123456789abcdef0123456789abcdef.zip";

/// Percent-encoding of a query value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain HTTP/1.1 request with `Connection: close`.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&[u8]>,
) -> (u16, Vec<u8>) {
    let (status, _, body) = http_full(addr, method, path, headers, body);
    (status, body)
}

/// [`http`], with the response's head (status line and headers) too.
pub fn http_full(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&[u8]>,
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.unwrap_or(b"");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response");
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut rest = out[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        rest = dechunk(&rest);
    }
    (status, head, rest)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
    out
}

/// Where the real clients are (`scripts/fetch-clients.sh`): `None`, with the reason printed,
/// when they are not fetched (CI fetches them, so there the tests always run).
pub fn clients() -> Option<PathBuf> {
    let dir = std::env::var_os("VIKINGFS_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/clients"));
    if dir.join("venv/bin/python").exists() && dir.join("bin/ov").exists() {
        Some(dir)
    } else {
        crate::support::skip(&format!(
            "the real clients are not fetched ({}): run scripts/fetch-clients.sh",
            dir.display()
        ));
        None
    }
}

/// Run a Python script of tests/api with the clients' interpreter; its output (it exits
/// non-zero on a failed check, printing which).
pub fn python(clients: &Path, script: &str, args: &[&str]) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/api")
        .join(script);
    Command::new(clients.join("venv/bin/python"))
        .arg(path)
        .args(args)
        .output()
        .unwrap()
}
