//! Who a request is, and what it may see: OpenViking's API keys and identity headers.
//!
//! - A key arrives as `Authorization: Bearer KEY` or `X-API-Key: KEY`. The root key
//!   (`server.root_api_key`) may act as any user of the served account through
//!   `X-OpenViking-Account` / `X-OpenViking-User`; a user key (made by `vikingfs key add`, kept
//!   only as its SHA-256 in `WORKSPACE/.vikingfs/keys.json`, mode 0600) is its own user, and
//!   headers naming anyone else are refused. [`Keys`] is that file: the CLI and the admin
//!   routes change it under a lock, and a running daemon sees a change at the next request.
//! - With no key configured at all the server is open (OpenViking's dev mode) and binds only to
//!   loopback (`super::Listen::check`); a server bound beyond loopback never becomes open, even
//!   when its last key is removed. The workspace's Unix socket is owner-only and always
//!   trusted as root.
//! - A user sees its account's `resources` and `agent` trees and its own `user/{id}` tree,
//!   never another user's: [`Identity`] decides, once, what may leave the server for a caller,
//!   and every route and tool applies it to every byte it returns — [`Identity::path`] to a
//!   URI it is given, [`Identity::may_see`] to each path it names or reads (listings, grep,
//!   glob, history), [`Identity::may_read`] to each index hit (a directory's summary is
//!   readable only by who may read all its children: never `viking://` and `viking://user`
//!   for one user), [`Identity::visible_trees`] to an operation over a whole tree.
//!   A workspace serves one account (its files are `viking/{account}/`): another account is
//!   not found.

use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use axum::http::HeaderMap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::reply::{ApiError, Code};
use crate::index::Level;
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
    /// Root acting as the user a header named: it sees what that user sees (to read another
    /// user's tree it acts as that user), while its role still opens the admin routes.
    pub acting: bool,
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

    /// Does this caller see every user's tree (root or an admin, not acting as one user)?
    pub fn may_see_every_user(&self) -> bool {
        self.role != Role::User && !self.acting
    }

    /// May this caller see `p`: its name, and its bytes when it is a file (a listing filters
    /// its entries by this)?
    pub fn may_see(&self, p: &VPath) -> bool {
        if self.may_see_every_user() {
            return true;
        }
        let mut c = p.components();
        match (c.next(), c.next()) {
            (Some("user"), Some(u)) => u == self.user,
            _ => true,
        }
    }

    /// May this caller read the summary (abstract, overview, and their index records) of
    /// directory `dir`? A summary quotes its children's names and text, so the summary of a
    /// directory that holds several users' trees (`viking://`, `viking://user`) would hand one
    /// user the others': none is made there now (`ops::keys::has_summary`), and one an older
    /// vikingfs made is shown only to a caller who sees every user.
    pub fn may_read_summary(&self, dir: &VPath) -> bool {
        self.may_see_every_user() || (self.may_see(dir) && !dir.holds_user_trees())
    }

    /// May this caller read the text the index keeps of `p` at `level` (a search hit, its
    /// snippet, the file or sidecar behind it)? The one rule every face applies to what it
    /// found: a file's text is its own ([`Self::may_see`]), a directory's is its summary
    /// ([`Self::may_read_summary`]).
    pub fn may_read(&self, p: &VPath, level: Level) -> bool {
        match level {
            Level::Content => self.may_see(p),
            Level::Abstract | Level::Overview => self.may_read_summary(p),
        }
    }

    /// The trees below `p` this caller sees whole: `p` itself, or, for a directory that holds
    /// other users' trees, the parts of it that are not theirs (`viking://user` is the
    /// caller's own `user/{id}`; the root is every scope, `user` narrowed so). What an
    /// operation over a whole tree (a restore) is confined to.
    pub fn visible_trees(&self, p: &VPath) -> Vec<VPath> {
        if self.may_see_every_user() || !p.holds_user_trees() {
            return vec![p.clone()];
        }
        let own = VPath::root().join("user").and_then(|u| u.join(&self.user));
        if !p.is_root() {
            return own.into_iter().collect();
        }
        crate::uri::SCOPES
            .iter()
            .filter_map(|s| match *s {
                "user" => own.clone().ok(),
                s => VPath::root().join(s).ok(),
            })
            .collect()
    }
}

/// One user key as stored: never the key itself.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyRecord {
    pub id: String,
    pub account: String,
    pub user: String,
    pub role: Role,
    /// SHA-256 of the key, hex. The keys are 128 random bits (or derived from a seed the
    /// caller keeps), so an unsalted hash is as good as a slow one: nothing to guess.
    pub sha256: String,
    /// The key's first 8 characters (`vk-` and 5 of its 32 hex digits), as OpenViking keeps
    /// one: it tells keys apart in a listing and gives away 20 of the 128 bits.
    #[serde(default)]
    pub key_prefix: String,
    pub created_at: String,
}

/// A user of the account as the keys make it: a user exists while it has a key, and all of a
/// user's keys have one role.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyUser {
    pub user: String,
    pub role: Role,
    /// Its keys, oldest first.
    pub keys: Vec<KeyRecord>,
}

/// Why a change to the keys was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("user {user} of account {account} already exists (it has a key)")]
    Exists { account: String, user: String },
    #[error("no user {user} in account {account} (no key names it)")]
    NoUser { account: String, user: String },
    #[error(
        "user {user} of account {account} has role {}, and all of a user's keys have one \
         role (promote the user through the admin API, or remove its keys first)",
        role.name()
    )]
    Role {
        account: String,
        user: String,
        role: Role,
    },
    #[error("invalid {what} name {name:?}: letters, digits and -_.@ only, at most 128 bytes")]
    Name { what: &'static str, name: String },
    #[error("a seed must not be empty")]
    EmptySeed,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyFileBody {
    keys: Vec<KeyRecord>,
}

/// What the cached copy of the file was read from: a change replaces the file (a rename), so
/// its inode changes even when two writes fall in one tick of the clock that stamps mtimes.
type Stamp = (u64, u64, SystemTime);

/// The user keys of a workspace (`.vikingfs/keys.json`, mode 0600), read again when the file
/// changes, so a key added or removed by `vikingfs key` works at once in a running daemon.
/// Every change is a read-modify-write under an exclusive `flock` of `keys.lock` beside it:
/// the CLI and the daemon's admin routes never lose each other's keys.
#[derive(Debug)]
pub struct Keys {
    path: PathBuf,
    cache: Mutex<Option<(Stamp, Vec<KeyRecord>)>>,
}

fn digest(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Equal without leaking where they differ by how long the comparison took.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A user or account name as a path component: what `Workspace::open` accepts, and nothing a
/// path or a header could misread. Never a summary's or an internal file's name: a user named
/// `.abstract.md` would own `user/.abstract.md`, the summary of every user's tree.
pub fn valid_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 128
        && v != "."
        && v != ".."
        && !crate::uri::is_sidecar_name(v)
        && !crate::uri::is_internal_name(v)
        && v.chars().all(|c| c.is_alphanumeric() || "-_.@".contains(c))
}

/// A new key: 128 random bits, or, with `seed`, derived from it (OpenViking's `seed`: the
/// same seed gives the same key again, for set-ups that must know a key in advance).
fn new_key(account: &str, user: &str, seed: Option<&str>) -> Result<String, KeysError> {
    let secret = match seed {
        Some("") => return Err(KeysError::EmptySeed),
        Some(s) => hex::encode(
            &Sha256::digest(format!("vikingfs key\0{account}\0{user}\0{s}").as_bytes())[..16],
        ),
        None => uuid::Uuid::new_v4().simple().to_string(),
    };
    Ok(format!("vk-{secret}"))
}

impl Keys {
    pub fn of(ws: &Workspace) -> Keys {
        Keys::at(ws.internal_dir().join("keys.json"))
    }

    /// The keys kept in the file `path`.
    pub fn at(path: PathBuf) -> Keys {
        Keys {
            path,
            cache: Mutex::new(None),
        }
    }

    fn stamp(&self) -> io::Result<Option<Stamp>> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(&self.path) {
            Ok(m) => Ok(Some((m.ino(), m.len(), m.modified()?))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read(&self) -> io::Result<Vec<KeyRecord>> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let body: KeyFileBody = serde_json::from_slice(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", self.path.display()),
            )
        })?;
        Ok(body.keys)
    }

    /// Every key record (a missing file: none).
    pub fn list(&self) -> io::Result<Vec<KeyRecord>> {
        let Some(stamp) = self.stamp()? else {
            return Ok(Vec::new());
        };
        let mut cache = self.cache.lock();
        match &*cache {
            Some((s, keys)) if *s == stamp => Ok(keys.clone()),
            _ => {
                let keys = self.read()?;
                *cache = Some((stamp, keys.clone()));
                Ok(keys)
            }
        }
    }

    /// The record `key` is the key of.
    pub fn find(&self, key: &str) -> io::Result<Option<KeyRecord>> {
        let d = digest(key);
        Ok(self
            .list()?
            .into_iter()
            .find(|r| same(r.sha256.as_bytes(), d.as_bytes())))
    }

    /// The users of `account` the keys make, in the order their first key was made.
    pub fn users(&self, account: &str) -> io::Result<Vec<KeyUser>> {
        Ok(users_of(&self.list()?, account))
    }

    /// Change the keys: `f` gets the file's records as they are now (read under the lock, not
    /// from the cache) and what it leaves is written back (only when it changed them).
    fn update<T>(
        &self,
        f: impl FnOnce(&mut Vec<KeyRecord>) -> Result<T, KeysError>,
    ) -> Result<T, KeysError> {
        use std::os::unix::fs::OpenOptionsExt;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.path.with_extension("lock"))?;
        crate::sys::flock(&lock, crate::sys::FlockOperation::LockExclusive)?;
        let mut keys = self.read()?;
        let before = keys.clone();
        let out = f(&mut keys)?;
        if keys != before {
            let text =
                serde_json::to_vec_pretty(&KeyFileBody { keys }).map_err(io::Error::other)?;
            crate::fsx::replace(&self.path, &text, 0o600, crate::fsx::Durable::Content)?;
            *self.cache.lock() = None;
        }
        // The lock goes with its descriptor.
        drop(lock);
        Ok(out)
    }

    /// Make a key for `user` of `account`: the key is returned once and kept only hashed. A
    /// user that has keys gets one more (to replace a key without a moment without one), of
    /// its role; `new_user` refuses a user that exists (OpenViking's register).
    pub fn add(
        &self,
        account: &str,
        user: &str,
        role: Role,
        seed: Option<&str>,
        new_user: bool,
    ) -> Result<(KeyRecord, String), KeysError> {
        for (what, name) in [("account", account), ("user", user)] {
            if !valid_name(name) {
                return Err(KeysError::Name {
                    what,
                    name: name.to_string(),
                });
            }
        }
        let key = new_key(account, user, seed)?;
        self.update(|keys| {
            if let Some(u) = users_of(keys, account).into_iter().find(|u| u.user == user) {
                if new_user {
                    return Err(KeysError::Exists {
                        account: account.into(),
                        user: user.into(),
                    });
                }
                if u.role != role {
                    return Err(KeysError::Role {
                        account: account.into(),
                        user: user.into(),
                        role: u.role,
                    });
                }
            }
            let rec = KeyRecord {
                id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
                account: account.to_string(),
                user: user.to_string(),
                role,
                sha256: digest(&key),
                key_prefix: key[..8].to_string(),
                created_at: jiff::Timestamp::now().to_string(),
            };
            keys.retain(|k| k.sha256 != rec.sha256);
            keys.push(rec.clone());
            Ok((rec, key.clone()))
        })
    }

    /// A new key for `user` in place of all its keys, which stop working at once.
    pub fn regenerate(
        &self,
        account: &str,
        user: &str,
        seed: Option<&str>,
    ) -> Result<(KeyRecord, String), KeysError> {
        let key = new_key(account, user, seed)?;
        self.update(|keys| {
            let role = user_role(keys, account, user)?;
            let first = keys
                .iter()
                .position(|k| k.account == account && k.user == user)
                .unwrap_or(keys.len());
            keys.retain(|k| !(k.account == account && k.user == user));
            let rec = KeyRecord {
                id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
                account: account.to_string(),
                user: user.to_string(),
                role,
                sha256: digest(&key),
                key_prefix: key[..8].to_string(),
                created_at: jiff::Timestamp::now().to_string(),
            };
            // Where its first key was: the user keeps its place in the listing.
            keys.insert(first.min(keys.len()), rec.clone());
            Ok((rec, key.clone()))
        })
    }

    /// Give `user` (every key of it) `role`.
    pub fn set_role(&self, account: &str, user: &str, role: Role) -> Result<(), KeysError> {
        self.update(|keys| {
            user_role(keys, account, user)?;
            for k in keys
                .iter_mut()
                .filter(|k| k.account == account && k.user == user)
            {
                k.role = role;
            }
            Ok(())
        })
    }

    /// Remove the keys `pred` picks; how many went.
    pub fn remove(&self, pred: impl Fn(&KeyRecord) -> bool) -> Result<usize, KeysError> {
        self.update(|keys| {
            let before = keys.len();
            keys.retain(|k| !pred(k));
            Ok(before - keys.len())
        })
    }
}

fn users_of(keys: &[KeyRecord], account: &str) -> Vec<KeyUser> {
    let mut out: Vec<KeyUser> = Vec::new();
    for k in keys.iter().filter(|k| k.account == account) {
        match out.iter_mut().find(|u| u.user == k.user) {
            Some(u) => u.keys.push(k.clone()),
            None => out.push(KeyUser {
                user: k.user.clone(),
                role: k.role,
                keys: vec![k.clone()],
            }),
        }
    }
    out
}

fn user_role(keys: &[KeyRecord], account: &str, user: &str) -> Result<Role, KeysError> {
    keys.iter()
        .find(|k| k.account == account && k.user == user)
        .map(|k| k.role)
        .ok_or_else(|| KeysError::NoUser {
            account: account.into(),
            user: user.into(),
        })
}

/// How the server tells who is calling.
#[derive(Debug)]
pub struct Auth {
    /// SHA-256 of `server.root_api_key`: compared digest to digest, so how long a comparison
    /// takes says nothing about the key, not even its length.
    root_key: Option<String>,
    pub keys: Keys,
    /// Set once the API listens beyond loopback: from then on no key at all means nobody (but
    /// the socket) gets in, never everybody; `vikingfs key rm` of the last key must not open
    /// a server that listens on the network.
    exposed: std::sync::atomic::AtomicBool,
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

/// [`valid_name`], or `INVALID_ARGUMENT` naming what is wrong.
pub fn check_name(what: &str, v: &str) -> Result<(), ApiError> {
    if valid_name(v) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "invalid {what} name {v:?}: letters, digits and -_.@ only, at most 128 bytes"
        )))
    }
}

impl Auth {
    pub fn new(ws: &Workspace, root_key: Option<String>) -> Auth {
        Auth {
            root_key: root_key.filter(|k| !k.is_empty()).map(|k| digest(&k)),
            keys: Keys::of(ws),
            exposed: Default::default(),
            account: ws.account().to_string(),
            default_user: ws.user().to_string(),
        }
    }

    /// No key of any kind: every caller is root (bind to loopback only). An unreadable key
    /// file is not "no key": the server stays closed.
    pub fn is_open(&self) -> bool {
        !self.exposed.load(std::sync::atomic::Ordering::Relaxed)
            && self.root_key.is_none()
            && self.keys.list().map(|k| k.is_empty()).unwrap_or(false)
    }

    /// The API listens beyond loopback: an empty key set closes it from now on.
    pub fn expose(&self) {
        self.exposed
            .store(true, std::sync::atomic::Ordering::Relaxed);
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
            let user_name = user.unwrap_or(&self.default_user).to_string();
            check_name("account", &account)?;
            check_name("user", &user_name)?;
            Ok(Identity {
                account,
                // The socket's caller is the workspace's owner (the CLI, `vikingfs mcp`): its user
                // header names whose `viking://~` it means, not a confinement.
                acting: user.is_some() && !local,
                user: user_name,
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
                .is_some_and(|r| same(r.as_bytes(), digest(key).as_bytes()))
            {
                super::caller::note_key("root key");
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
                // Who the history's entries name (the key, not only its user).
                super::caller::note_key(&rec.id);
                let acting = rec.role == Role::Admin && user.is_some();
                let user = match rec.role {
                    Role::Admin => user.unwrap_or(&rec.user).to_string(),
                    _ => rec.user.clone(),
                };
                check_name("user", &user)?;
                Identity {
                    account: rec.account,
                    user,
                    acting,
                    role: rec.role,
                    peer: header(headers, PEER_HEADER).map(str::to_string),
                    agent: header(headers, AGENT_HEADER).map(str::to_string),
                }
            }
        };
        if id.account != self.account {
            return Err(ApiError::new(
                Code::NotFound,
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

    /// User bob of account acme, with a key of his own.
    fn bob() -> Identity {
        Identity {
            account: "acme".into(),
            user: "bob".into(),
            role: Role::User,
            peer: None,
            agent: None,
            acting: false,
        }
    }

    #[test]
    fn keys_decide_who_calls() {
        let (_d, ws) = ws();
        let auth = Auth::new(&ws, Some("root-secret".into()));
        assert!(!auth.is_open());
        let e = auth.resolve(&HeaderMap::new(), false).unwrap_err();
        assert_eq!(e.code, Code::Unauthenticated);
        let e = auth
            .resolve(&headers(&[("x-api-key", "nope")]), false)
            .unwrap_err();
        assert_eq!(e.code, Code::Unauthenticated);
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
        let (_, bob_key) = auth
            .keys
            .add("acme", "bob", Role::User, None, false)
            .unwrap();
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
        assert_eq!(e.code, Code::PermissionDenied);
        assert!(bob.path("viking://user/bob/notes").is_ok());
        assert!(bob.path("viking://resources/x").is_ok());
        assert_eq!(
            bob.path("viking://user/alice/notes").unwrap_err().code,
            Code::PermissionDenied
        );
        assert_eq!(
            bob.path("viking://resources/../../x").unwrap_err().code,
            Code::InvalidUri
        );
        let e = auth
            .resolve(
                &headers(&[("x-api-key", "root-secret"), (ACCOUNT_HEADER, "other")]),
                false,
            )
            .unwrap_err();
        assert_eq!(e.code, Code::NotFound);
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
        auth.keys
            .add("acme", "bob", Role::User, None, false)
            .unwrap();
        assert!(!auth.is_open(), "a user key closes the server");
        assert!(auth.resolve(&HeaderMap::new(), false).is_err());
        assert_eq!(
            auth.resolve(&HeaderMap::new(), true).unwrap().role,
            Role::Root
        );
    }

    #[test]
    fn no_key_left_on_an_exposed_server_lets_nobody_in() {
        let (_d, ws) = ws();
        let auth = Auth::new(&ws, None);
        let (rec, _) = auth
            .keys
            .add("acme", "bob", Role::User, None, false)
            .unwrap();
        auth.expose();
        auth.keys.remove(|k| k.id == rec.id).unwrap();
        assert!(!auth.is_open());
        let e = auth.resolve(&HeaderMap::new(), false).unwrap_err();
        assert_eq!(e.code, Code::Unauthenticated);
    }

    #[test]
    fn a_user_key_sees_its_own_tree_and_the_shared_ones_only() {
        let bob = bob();
        for ok in [
            "viking://",
            "viking://user",
            "viking://user/",
            "viking://user/bob",
            "viking://user/bob/memories/x.md",
            "viking://~/notes.md",
            "viking://session/s1",
            "viking://resources/a/b.md",
            "viking://agent/skills",
        ] {
            assert!(bob.path(ok).is_ok(), "{ok}");
        }
        for other in [
            "viking://user/alice",
            "viking://user/alice/",
            "viking://user/alice/secret.md",
            "viking://user/Bob/x",
            "viking://user/bobby/x",
        ] {
            let e = bob.path(other).unwrap_err();
            assert_eq!(
                (e.code, e.status().as_u16()),
                (Code::PermissionDenied, 403),
                "{other}"
            );
            assert_eq!(e.details.as_ref().unwrap()["resource"], other);
        }
        let long = format!("viking://resources/{}", "x".repeat(256));
        for bad in [
            "viking://resources/../../x",
            "viking://user/bob/../alice/x",
            "viking://user/./alice",
            "viking://user//alice",
            "viking://resources/a\0b",
            long.as_str(),
            "/etc/passwd",
            "viking://etc/passwd",
        ] {
            let e = bob.path(bad).unwrap_err();
            assert_eq!(
                (e.code, e.status().as_u16()),
                (Code::InvalidUri, 400),
                "{bad:?}"
            );
        }
        assert!(bob
            .path(&format!("viking://resources/{}", "x".repeat(255)))
            .is_ok());
        // An admin (and root) sees every user of its account.
        let admin = Identity {
            role: Role::Admin,
            ..bob.clone()
        };
        assert!(admin.path("viking://user/alice/secret.md").is_ok());
    }

    #[test]
    fn no_summary_of_a_shared_parent_reaches_one_user() {
        let bob = bob();
        let p = |s: &str| VPath::from_rel(s).unwrap();
        // `user` holds every user's tree: its summary quotes them all.
        for shared in ["", "user"] {
            assert!(!bob.may_read_summary(&p(shared)), "{shared:?}");
            assert!(!bob.may_read(&p(shared), Level::Abstract), "{shared:?}");
            assert!(!bob.may_read(&p(shared), Level::Overview), "{shared:?}");
        }
        assert!(bob.may_see(&p("user")), "the directory itself is listed");
        assert!(!bob.may_see(&p("user/.abstract.md")));
        for own in [
            "resources",
            "resources/a",
            "agent",
            "user/bob",
            "user/bob/memories",
        ] {
            assert!(bob.may_read_summary(&p(own)), "{own}");
            assert!(bob.may_read(&p(own), Level::Overview), "{own}");
        }
        assert!(!bob.may_read_summary(&p("user/alice")));
        assert!(!bob.may_read(&p("user/alice/x.md"), Level::Content));
        assert!(bob.may_read(&p("user/bob/x.md"), Level::Content));
        // A restore of a shared parent is confined to what the caller sees whole.
        let trees = |who: &Identity, s: &str| -> Vec<String> {
            who.visible_trees(&p(s))
                .iter()
                .map(|t| t.as_str().to_string())
                .collect()
        };
        assert_eq!(trees(&bob, "user"), ["user/bob"]);
        assert_eq!(trees(&bob, ""), ["resources", "user/bob", "agent"]);
        assert_eq!(trees(&bob, "resources/a"), ["resources/a"]);
        // Root (and an admin) sees every user: the shared parents are theirs to read.
        let root = Identity {
            role: Role::Root,
            ..bob.clone()
        };
        assert!(root.may_read_summary(&p("user")));
        assert_eq!(trees(&root, ""), [""]);
        let acting = Identity {
            acting: true,
            ..root
        };
        assert!(
            !acting.may_read_summary(&p("user")),
            "root acting as bob is bob"
        );
        // Nobody can be named as a summary (and so own `user/.abstract.md`).
        for bad in [".abstract.md", ".overview.md", ".path.ovlock"] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_name("bob.smith"));
    }

    #[test]
    fn keys_make_users_with_one_role_each() {
        let d = tempfile::tempdir().unwrap();
        let keys = Keys::at(d.path().join("keys.json"));
        let (k1, key1) = keys.add("acme", "bob", Role::User, None, false).unwrap();
        assert!(key1.starts_with("vk-") && key1.len() == 35, "{key1}");
        assert_eq!(k1.key_prefix, key1[..8]);
        // One more key for bob; of another role: refused.
        let (_, key2) = keys.add("acme", "bob", Role::User, None, false).unwrap();
        assert!(matches!(
            keys.add("acme", "bob", Role::Admin, None, false),
            Err(KeysError::Role {
                role: Role::User,
                ..
            })
        ));
        assert!(matches!(
            keys.add("acme", "bob", Role::User, None, true),
            Err(KeysError::Exists { .. })
        ));
        assert!(matches!(
            keys.add("acme", "../x", Role::User, None, false),
            Err(KeysError::Name { what: "user", .. })
        ));
        keys.add("acme", "carol", Role::Admin, None, true).unwrap();
        let users = keys.users("acme").unwrap();
        let names: Vec<_> = users
            .iter()
            .map(|u| (u.user.as_str(), u.role, u.keys.len()))
            .collect();
        assert_eq!(names, [("bob", Role::User, 2), ("carol", Role::Admin, 1)]);
        // A new key replaces both of bob's; bob keeps his place.
        let (_, key3) = keys.regenerate("acme", "bob", None).unwrap();
        assert!(keys.find(&key1).unwrap().is_none() && keys.find(&key2).unwrap().is_none());
        assert_eq!(keys.find(&key3).unwrap().unwrap().user, "bob");
        assert_eq!(keys.users("acme").unwrap()[0].user, "bob");
        keys.set_role("acme", "bob", Role::Admin).unwrap();
        assert_eq!(keys.find(&key3).unwrap().unwrap().role, Role::Admin);
        assert!(matches!(
            keys.set_role("acme", "nobody", Role::Admin),
            Err(KeysError::NoUser { .. })
        ));
        assert!(matches!(
            keys.regenerate("acme", "nobody", None),
            Err(KeysError::NoUser { .. })
        ));
        // A seed gives the same key again, and another user another key.
        let (_, s1) = keys.regenerate("acme", "carol", Some("s")).unwrap();
        let (_, s2) = keys.regenerate("acme", "carol", Some("s")).unwrap();
        let (_, s3) = keys
            .add("acme", "dave", Role::User, Some("s"), true)
            .unwrap();
        assert_eq!(s1, s2);
        assert_ne!(s1, s3);
        assert!(matches!(
            keys.regenerate("acme", "carol", Some("")),
            Err(KeysError::EmptySeed)
        ));
        assert_eq!(keys.remove(|k| k.user == "carol").unwrap(), 1);
        assert!(keys.find(&s1).unwrap().is_none());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join("keys.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_change_by_another_process_is_seen_at_once() {
        let d = tempfile::tempdir().unwrap();
        let daemon = Keys::at(d.path().join("keys.json"));
        let cli = Keys::at(d.path().join("keys.json"));
        assert!(daemon.list().unwrap().is_empty());
        // Many changes within one tick of the file clock: each is seen.
        for i in 0..20 {
            let (_, key) = cli
                .add("acme", &format!("u{i}"), Role::User, None, false)
                .unwrap();
            assert!(daemon.find(&key).unwrap().is_some(), "key {i}");
            cli.remove(|k| k.user == format!("u{i}")).unwrap();
            assert!(daemon.find(&key).unwrap().is_none(), "key {i} removed");
        }
    }

    #[test]
    fn concurrent_adds_lose_no_key() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("keys.json");
        let made: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let path = path.clone();
                    s.spawn(move || {
                        // A store of its own per thread, as separate processes have.
                        let keys = Keys::at(path);
                        (0..5)
                            .map(|i| {
                                keys.add("acme", &format!("t{t}u{i}"), Role::User, None, true)
                                    .unwrap()
                                    .1
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let keys = Keys::at(path);
        assert_eq!(keys.list().unwrap().len(), 40);
        for k in made {
            assert!(keys.find(&k).unwrap().is_some());
        }
    }
}
