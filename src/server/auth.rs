//! Who a request is, and what it may see: OpenViking's API keys and identity headers.
//!
//! - A key arrives as `Authorization: Bearer KEY` or `X-API-Key: KEY`. The root key
//!   (`server.root_api_key`) may act as any user of the served account through
//!   `X-OpenViking-Account` / `X-OpenViking-User`; a user key (made by `vikingfs key add`, kept
//!   only as its SHA-256 in `WORKSPACE/.vikingfs/keys.json`, mode 0600) is its own user, and
//!   headers naming anyone else are refused.
//! - With no key configured at all the server is open (OpenViking's dev mode) and binds only to
//!   loopback (`super::Listen::check`); the workspace's Unix socket is owner-only and always
//!   trusted as root.
//! - A user sees its account's `resources` and `agent` trees and its own `user/{id}` tree,
//!   never another user's: [`Identity::path`] is the one check every route and tool makes.
//!   A workspace serves one account (its files are `viking/{account}/`): another account is
//!   not found.

use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use axum::http::HeaderMap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::reply::ApiError;
use crate::uri::VPath;
use crate::workspace::Workspace;

pub const ACCOUNT_HEADER: &str = "x-openviking-account";
pub const USER_HEADER: &str = "x-openviking-user";
pub const PEER_HEADER: &str = "x-openviking-actor-peer";
pub const AGENT_HEADER: &str = "x-openviking-agent";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The root key, the Unix socket, or an open server: any user of the account.
    Root,
    /// An account administrator: every user of its account.
    Admin,
    /// One user: the shared trees and its own.
    User,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Root => "root",
            Role::Admin => "admin",
            Role::User => "user",
        }
    }
}

/// The caller of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub account: String,
    pub user: String,
    pub role: Role,
    /// `X-OpenViking-Actor-Peer`: who the agent acts for (kept in session metadata).
    pub peer: Option<String>,
    /// `X-OpenViking-Agent`.
    pub agent: Option<String>,
}

impl Identity {
    /// The path `uri` names, if this caller may see it: `INVALID_URI` for a malformed one,
    /// `PERMISSION_DENIED` for another user's tree (never its content).
    pub fn path(&self, uri: &str) -> Result<VPath, ApiError> {
        let p = VPath::parse_uri(uri, &self.user).map_err(|e| ApiError::invalid_uri(uri, e))?;
        if !self.may_see(&p) {
            return Err(ApiError::denied(format!(
                "{uri} belongs to another user; this key is user {}'s",
                self.user
            ))
            .with_details(serde_json::json!({ "resource": uri })));
        }
        Ok(p)
    }

    /// May this caller see `p` (a listing filters its entries by this)?
    pub fn may_see(&self, p: &VPath) -> bool {
        if self.role != Role::User {
            return true;
        }
        let mut c = p.components();
        match (c.next(), c.next()) {
            (Some("user"), Some(u)) => u == self.user,
            _ => true,
        }
    }
}

/// One user key as stored: never the key itself.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyRecord {
    pub id: String,
    pub account: String,
    pub user: String,
    pub role: Role,
    /// SHA-256 of the key, hex.
    pub sha256: String,
    pub created_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyFileBody {
    keys: Vec<KeyRecord>,
}

/// The user keys of a workspace (`.vikingfs/keys.json`), read again when the file changes, so a
/// key added by `vikingfs key add` works at once in a running daemon.
#[derive(Debug)]
pub struct Keys {
    path: PathBuf,
    cache: Mutex<(Option<SystemTime>, Vec<KeyRecord>)>,
}

fn digest(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Equal without leaking where they differ by how long the comparison took.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Keys {
    pub fn of(ws: &Workspace) -> Keys {
        Keys {
            path: ws.internal_dir().join("keys.json"),
            cache: Mutex::new((None, Vec::new())),
        }
    }

    /// Every key record (a missing file: none).
    pub fn list(&self) -> io::Result<Vec<KeyRecord>> {
        let mtime = match std::fs::metadata(&self.path) {
            Ok(m) => m.modified().ok(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut cache = self.cache.lock();
        if cache.0.is_none() || cache.0 != mtime {
            let text = std::fs::read(&self.path)?;
            let body: KeyFileBody = serde_json::from_slice(&text).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", self.path.display()),
                )
            })?;
            *cache = (mtime, body.keys);
        }
        Ok(cache.1.clone())
    }

    /// The record `key` is the key of.
    pub fn find(&self, key: &str) -> io::Result<Option<KeyRecord>> {
        let d = digest(key);
        Ok(self
            .list()?
            .into_iter()
            .find(|r| same(r.sha256.as_bytes(), d.as_bytes())))
    }

    /// Make a key for `user` of `account`: the key is returned once and kept only hashed.
    pub fn add(&self, account: &str, user: &str, role: Role) -> io::Result<(KeyRecord, String)> {
        let mut keys = self.list()?;
        let key = format!("vk-{}", uuid::Uuid::new_v4().simple());
        let rec = KeyRecord {
            id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
            account: account.to_string(),
            user: user.to_string(),
            role,
            sha256: digest(&key),
            created_at: jiff::Timestamp::now().to_string(),
        };
        keys.push(rec.clone());
        self.store(keys)?;
        Ok((rec, key))
    }

    /// Remove the keys `pred` picks; how many went.
    pub fn remove(&self, pred: impl Fn(&KeyRecord) -> bool) -> io::Result<usize> {
        let keys = self.list()?;
        let before = keys.len();
        let kept: Vec<KeyRecord> = keys.into_iter().filter(|k| !pred(k)).collect();
        let n = before - kept.len();
        if n > 0 {
            self.store(kept)?;
        }
        Ok(n)
    }

    fn store(&self, keys: Vec<KeyRecord>) -> io::Result<()> {
        let text = serde_json::to_vec_pretty(&KeyFileBody { keys })?;
        crate::fsx::replace(&self.path, &text, 0o600, crate::fsx::Durable::Content)?;
        *self.cache.lock() = (None, Vec::new());
        Ok(())
    }
}

/// How the server tells who is calling.
#[derive(Debug)]
pub struct Auth {
    root_key: Option<String>,
    pub keys: Keys,
    /// The account the workspace holds.
    pub account: String,
    /// The user of a request that names none.
    pub default_user: String,
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// A user or account name as a path component: what `Workspace::open` accepts.
pub fn check_name(what: &str, v: &str) -> Result<(), ApiError> {
    let ok = !v.is_empty()
        && v.len() <= 128
        && v != "."
        && v != ".."
        && v.chars().all(|c| c.is_alphanumeric() || "-_.@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "invalid {what} name {v:?}: letters, digits and -_.@ only"
        )))
    }
}

impl Auth {
    pub fn new(ws: &Workspace, root_key: Option<String>) -> Auth {
        Auth {
            root_key: root_key.filter(|k| !k.is_empty()),
            keys: Keys::of(ws),
            account: ws.account().to_string(),
            default_user: ws.user().to_string(),
        }
    }

    /// No key of any kind: every caller is root (bind to loopback only).
    pub fn is_open(&self) -> bool {
        self.root_key.is_none() && self.keys.list().map(|k| k.is_empty()).unwrap_or(false)
    }

    /// The caller of a request with `headers`; `local` is the owner-only Unix socket.
    pub fn resolve(&self, headers: &HeaderMap, local: bool) -> Result<Identity, ApiError> {
        let key = header(headers, "authorization")
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .or_else(|| header(headers, "x-api-key"));
        let account = header(headers, ACCOUNT_HEADER);
        let user = header(headers, USER_HEADER);
        let as_root = |account: Option<&str>, user: Option<&str>| -> Result<Identity, ApiError> {
            let account = account.unwrap_or(&self.account).to_string();
            let user = user.unwrap_or(&self.default_user).to_string();
            check_name("account", &account)?;
            check_name("user", &user)?;
            Ok(Identity {
                account,
                user,
                role: Role::Root,
                peer: header(headers, PEER_HEADER).map(str::to_string),
                agent: header(headers, AGENT_HEADER).map(str::to_string),
            })
        };
        let id = if local || self.is_open() {
            as_root(account, user)?
        } else {
            let Some(key) = key else {
                return Err(ApiError::unauthenticated(
                    "Missing API key: send Authorization: Bearer KEY or X-API-Key: KEY",
                ));
            };
            if self
                .root_key
                .as_deref()
                .is_some_and(|r| same(r.as_bytes(), key.as_bytes()))
            {
                as_root(account, user)?
            } else {
                let rec = self
                    .keys
                    .find(key)
                    .map_err(|e| ApiError::internal(format!("API keys: {e}")))?
                    .ok_or_else(|| ApiError::unauthenticated("Invalid API key"))?;
                if account.is_some_and(|a| a != rec.account)
                    || (rec.role == Role::User && user.is_some_and(|u| u != rec.user))
                {
                    return Err(ApiError::denied(format!(
                        "this key is user {} of account {}; it cannot act as another",
                        rec.user, rec.account
                    )));
                }
                let user = match rec.role {
                    Role::Admin => user.unwrap_or(&rec.user).to_string(),
                    _ => rec.user.clone(),
                };
                check_name("user", &user)?;
                Identity {
                    account: rec.account,
                    user,
                    role: rec.role,
                    peer: header(headers, PEER_HEADER).map(str::to_string),
                    agent: header(headers, AGENT_HEADER).map(str::to_string),
                }
            }
        };
        if id.account != self.account {
            return Err(ApiError::new(
                "NOT_FOUND",
                format!(
                    "account {} is not served here (this workspace holds account {})",
                    id.account, self.account
                ),
            ));
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::open(d.path().join("ws"), "acme", "alice").unwrap();
        (d, ws)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn keys_decide_who_calls() {
        let (_d, ws) = ws();
        let auth = Auth::new(&ws, Some("root-secret".into()));
        assert!(!auth.is_open());
        let e = auth.resolve(&HeaderMap::new(), false).unwrap_err();
        assert_eq!(e.code, "UNAUTHENTICATED");
        let e = auth
            .resolve(&headers(&[("x-api-key", "nope")]), false)
            .unwrap_err();
        assert_eq!(e.code, "UNAUTHENTICATED");
        let root = auth
            .resolve(
                &headers(&[
                    ("authorization", "Bearer root-secret"),
                    (USER_HEADER, "bob"),
                ]),
                false,
            )
            .unwrap();
        assert_eq!((root.role, root.user.as_str()), (Role::Root, "bob"));
        let (_, bob_key) = auth.keys.add("acme", "bob", Role::User).unwrap();
        let text = std::fs::read_to_string(ws.internal_dir().join("keys.json")).unwrap();
        assert!(!text.contains(&bob_key), "the key itself is never stored");
        let bob = auth
            .resolve(&headers(&[("x-api-key", &bob_key)]), false)
            .unwrap();
        assert_eq!((bob.role, bob.user.as_str()), (Role::User, "bob"));
        let e = auth
            .resolve(
                &headers(&[("x-api-key", &bob_key), (USER_HEADER, "alice")]),
                false,
            )
            .unwrap_err();
        assert_eq!(e.code, "PERMISSION_DENIED");
        assert!(bob.path("viking://user/bob/notes").is_ok());
        assert!(bob.path("viking://resources/x").is_ok());
        assert_eq!(
            bob.path("viking://user/alice/notes").unwrap_err().code,
            "PERMISSION_DENIED"
        );
        assert_eq!(
            bob.path("viking://resources/../../x").unwrap_err().code,
            "INVALID_URI"
        );
        let e = auth
            .resolve(
                &headers(&[("x-api-key", "root-secret"), (ACCOUNT_HEADER, "other")]),
                false,
            )
            .unwrap_err();
        assert_eq!(e.code, "NOT_FOUND");
    }

    #[test]
    fn an_open_server_and_the_socket_are_root() {
        let (_d, ws) = ws();
        let auth = Auth::new(&ws, None);
        assert!(auth.is_open());
        assert_eq!(
            auth.resolve(&HeaderMap::new(), false).unwrap().role,
            Role::Root
        );
        auth.keys.add("acme", "bob", Role::User).unwrap();
        assert!(!auth.is_open(), "a user key closes the server");
        assert!(auth.resolve(&HeaderMap::new(), false).is_err());
        assert_eq!(
            auth.resolve(&HeaderMap::new(), true).unwrap().role,
            Role::Root
        );
    }
}
