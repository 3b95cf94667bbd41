//! Where a session's files live, as OpenViking lays them out:
//!
//! ```text
//! viking://user/{uid}/sessions/{sid}/messages.jsonl                 live conversation
//! viking://user/{uid}/sessions/{sid}/.meta.json                     metadata + pending commit
//! viking://user/{uid}/sessions/{sid}/history/archive_NNN/           one per commit, NNN from 001
//!     messages.jsonl  .abstract.md  .overview.md  memory_diff.json  .done (written last)
//! viking://user/{uid}/memories/...                                  extracted memories
//! ```

use crate::uri::{UriError, VPath};
use crate::workspace::Workspace;

use super::SessionError;

pub const MESSAGES: &str = "messages.jsonl";
pub const META: &str = ".meta.json";
pub const HISTORY: &str = "history";
pub const ABSTRACT: &str = ".abstract.md";
pub const OVERVIEW: &str = ".overview.md";
pub const MEMORY_DIFF: &str = "memory_diff.json";
pub const DONE: &str = ".done";
/// Written in an archive whose phase 2 failed for good (OpenViking writes the same name).
pub const FAILED: &str = ".failed.json";

/// One session: its id and directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPath {
    pub sid: String,
    /// `user/{uid}/sessions/{sid}`
    pub dir: VPath,
}

impl SessionPath {
    /// A session named by its id (`chat-42`) in the workspace's user, or by a URI:
    /// `viking://session/{sid}` (the legacy alias) or `viking://user/{uid}/sessions/{sid}`.
    pub fn resolve(ws: &Workspace, arg: &str) -> Result<SessionPath, SessionError> {
        Self::resolve_as(ws.user(), arg)
    }

    /// [`SessionPath::resolve`] for `user` (a caller of the daemon's socket names its own).
    pub fn resolve_as(user: &str, arg: &str) -> Result<SessionPath, SessionError> {
        let dir = if arg.starts_with("viking://") {
            VPath::parse_uri(arg, user)?
        } else {
            sessions_root(user)?.join(arg)?
        };
        let parts: Vec<&str> = dir.components().collect();
        match parts.as_slice() {
            ["user", _, "sessions", sid] => Ok(SessionPath {
                sid: sid.to_string(),
                dir,
            }),
            _ => Err(SessionError::NotASession(arg.to_string())),
        }
    }

    /// Session `sid` of `user` — the form a server uses, acting for the caller it
    /// authenticated rather than the workspace's configured user. `sid` must be one path
    /// component (no `/`, `..` or NUL), so no id reaches outside `user/{user}/sessions/`.
    pub fn of_user(user: &str, sid: &str) -> Result<SessionPath, SessionError> {
        if sid.is_empty() || sid.contains('/') {
            return Err(SessionError::NotASession(sid.to_string()));
        }
        let dir = sessions_root(user)?.join(sid)?;
        SessionPath::from_dir(dir)
    }

    /// `viking://user/{uid}/sessions/{sid}` from its directory path.
    pub fn from_dir(dir: VPath) -> Result<SessionPath, SessionError> {
        let parts: Vec<&str> = dir.components().collect();
        match parts.as_slice() {
            ["user", _, "sessions", sid] => Ok(SessionPath {
                sid: sid.to_string(),
                dir,
            }),
            _ => Err(SessionError::NotASession(dir.uri())),
        }
    }

    /// The user the session belongs to (`user/{uid}/...`).
    pub fn user(&self) -> &str {
        self.dir.components().nth(1).unwrap_or_default()
    }

    pub fn messages(&self) -> VPath {
        self.child(MESSAGES)
    }

    pub fn meta(&self) -> VPath {
        self.child(META)
    }

    pub fn history(&self) -> VPath {
        self.child(HISTORY)
    }

    /// `history/archive_NNN`
    pub fn archive(&self, n: u32) -> VPath {
        self.history()
            .join(&archive_name(n))
            .expect("archive names are valid components")
    }

    /// A file of archive `n`.
    pub fn archive_file(&self, n: u32, name: &str) -> VPath {
        self.archive(n)
            .join(name)
            .expect("archive file names are valid components")
    }

    /// `viking://user/{uid}/memories`
    pub fn memories(&self) -> VPath {
        memories_root(self.user())
    }

    fn child(&self, name: &str) -> VPath {
        self.dir.join(name).expect("session file names are valid")
    }
}

/// `user/{uid}/sessions`
pub fn sessions_root(user: &str) -> Result<VPath, UriError> {
    VPath::root()
        .join("user")?
        .join(user)?
        .join(crate::uri::SESSIONS_DIR)
}

/// `user/{uid}/memories`
pub fn memories_root(user: &str) -> VPath {
    VPath::root()
        .join("user")
        .and_then(|p| p.join(user))
        .and_then(|p| p.join("memories"))
        .expect("a session's user is a valid component")
}

/// `archive_007` (three digits at least, as OpenViking names them; more once past 999).
pub fn archive_name(n: u32) -> String {
    format!("archive_{n:03}")
}

/// The number of an `archive_NNN` directory name.
pub fn parse_archive_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("archive_")?;
    if digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// Archive numbers present under `history/`, sorted (read without following a link: a link
/// at `history` is [`SessionError::Link`]).
pub fn archives_on_disk(ws: &Workspace, s: &SessionPath) -> Result<Vec<u32>, SessionError> {
    let mut out: Vec<u32> = super::fsx::entries(ws, &s.history())?
        .unwrap_or_default()
        .iter()
        .filter_map(|(name, _)| name.to_str().and_then(parse_archive_name))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Every session directory of `user`, sorted by id (a link among them is no session).
pub fn list_sessions(ws: &Workspace, user: &str) -> Result<Vec<SessionPath>, SessionError> {
    let root = sessions_root(user)?;
    let mut out = Vec::new();
    for (name, st) in super::fsx::entries(ws, &root)?.unwrap_or_default() {
        let Some(name) = name.to_str().map(str::to_string) else {
            continue;
        };
        if !st.is_dir() {
            continue;
        }
        if let Ok(p) = root.join(&name) {
            out.push(SessionPath { sid: name, dir: p });
        }
    }
    out.sort_by(|a, b| a.sid.cmp(&b.sid));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_ids_and_both_uri_forms() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path(), "default", "alice").unwrap();
        let a = SessionPath::resolve(&ws, "s1").unwrap();
        let b = SessionPath::resolve(&ws, "viking://session/s1").unwrap();
        let c = SessionPath::resolve(&ws, "viking://user/alice/sessions/s1").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.dir.as_str(), "user/alice/sessions/s1");
        assert_eq!(a.user(), "alice");
        assert_eq!(
            a.archive_file(7, DONE).as_str(),
            "user/alice/sessions/s1/history/archive_007/.done"
        );
        assert!(SessionPath::resolve(&ws, "../x").is_err());
        assert!(SessionPath::resolve(&ws, "viking://resources/a").is_err());
        assert!(SessionPath::resolve(&ws, "viking://session/s1/history").is_err());
        let bob = SessionPath::of_user("bob", "s1").unwrap();
        assert_eq!(bob.dir.as_str(), "user/bob/sessions/s1");
        for bad in ["", "..", ".", "a/b", "x\0y"] {
            assert!(SessionPath::of_user("bob", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn archive_names_round_trip() {
        assert_eq!(archive_name(1), "archive_001");
        assert_eq!(archive_name(1234), "archive_1234");
        for n in [1, 42, 999, 1000] {
            assert_eq!(parse_archive_name(&archive_name(n)), Some(n));
        }
        assert_eq!(parse_archive_name("archive_01"), None);
        assert_eq!(parse_archive_name("archive_000"), None);
        assert_eq!(parse_archive_name("archive_0x1"), None);
    }
}
