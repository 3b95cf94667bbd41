//! Viking URIs and the normalised namespace paths they name.
//!
//! A [`VPath`] is a path inside one account's namespace, relative to
//! `WORKSPACE/viking/{account}`: `resources/a/b.md`, `user/default/memories`, or the empty root.
//! It is validated once, at parse time, so every layer below can join it onto a directory
//! without re-checking for `..`, NUL bytes, empty components or internal names.

use std::fmt;

use thiserror::Error;

/// The longest path component vikingfs accepts (Linux `NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Top-level scopes of the Viking namespace.
pub const SCOPES: [&str; 3] = ["resources", "user", "agent"];

/// The directory of a user's sessions, as OpenViking lays them out: `user/{uid}/sessions/{sid}`
/// (the session layout lives in `session::layout`; this is the one name lower layers need).
pub const SESSIONS_DIR: &str = "sessions";

/// Why a URI or path was refused. Each message names the problem in one line.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UriError {
    #[error("not a viking:// URI: {0:?}")]
    NotViking(String),
    #[error("unknown scope {scope:?} in {uri:?} (expected resources, user, agent or session)")]
    UnknownScope { scope: String, uri: String },
    #[error("'..' or '.' component in {0:?}")]
    DotComponent(String),
    #[error("NUL byte in {0:?}")]
    Nul(String),
    #[error("empty path component in {0:?}")]
    EmptyComponent(String),
    #[error("{name:?} is an internal name and cannot be used in {uri:?}")]
    InternalName { name: String, uri: String },
    #[error("path component longer than {NAME_MAX} bytes in {0:?}")]
    NameTooLong(String),
    #[error("{0:?} names no session (expected viking://session/SID)")]
    NoSession(String),
    #[error(
        "{0} is no place for a resource: add-resource puts content under viking://resources \
         (or a user's resources/)"
    )]
    NotForResources(String),
    #[error(
        "{0} is no skill's directory: a skill is installed at viking://agent/skills/NAME or \
         viking://user/ID/skills/NAME"
    )]
    NotASkill(String),
}

/// Names that belong to the lock engine, OpenViking or vikingfs itself. They never appear in
/// listings and can't be created, opened, renamed or removed through the namespace.
pub fn is_internal_name(name: &str) -> bool {
    name == ".path.ovlock"
        || name.starts_with(".exact.ovlock.")
        || name == ".redirect.json"
        || name == ".sync_log.json"
        || name.starts_with(".vikingfs.")
}

/// A directory's short summary, written by the workers (OpenViking's L0).
pub const ABSTRACT_FILE: &str = ".abstract.md";
/// A directory's overview, written by the workers (OpenViking's L1).
pub const OVERVIEW_FILE: &str = ".overview.md";

/// Derived sidecar files: readable by name, listed only with the mount option `show_summaries`,
/// never written by users.
pub fn is_sidecar_name(name: &str) -> bool {
    name == ABSTRACT_FILE || name == OVERVIEW_FILE
}

/// Check one path component. `whole` is only used to make the error message useful.
pub fn check_component(name: &str, whole: &str) -> Result<(), UriError> {
    if name.is_empty() {
        return Err(UriError::EmptyComponent(whole.to_string()));
    }
    if name == "." || name == ".." {
        return Err(UriError::DotComponent(whole.to_string()));
    }
    if name.contains('\0') {
        return Err(UriError::Nul(whole.to_string()));
    }
    if name.len() > NAME_MAX {
        return Err(UriError::NameTooLong(whole.to_string()));
    }
    if is_internal_name(name) {
        return Err(UriError::InternalName {
            name: name.to_string(),
            uri: whole.to_string(),
        });
    }
    Ok(())
}

/// A validated path inside an account's namespace, without leading or trailing `/`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct VPath(String);

impl VPath {
    /// The namespace root (`viking://`).
    pub fn root() -> Self {
        VPath(String::new())
    }

    /// Parse a viking URI. `user` resolves `viking://~` and the legacy `viking://session/SID`.
    pub fn parse_uri(uri: &str, user: &str) -> Result<Self, UriError> {
        let rest = uri
            .strip_prefix("viking://")
            .ok_or_else(|| UriError::NotViking(uri.to_string()))?;
        if rest.contains('\0') {
            return Err(UriError::Nul(uri.to_string()));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Ok(Self::root());
        }
        let (scope, tail) = match rest.split_once('/') {
            Some((s, t)) => (s, Some(t)),
            None => (rest, None),
        };
        let mut out = match scope {
            "resources" | "user" | "agent" => scope.to_string(),
            "~" => format!("user/{user}"),
            "session" => {
                let tail = tail.ok_or_else(|| UriError::NoSession(uri.to_string()))?;
                let path = format!("user/{user}/sessions/{tail}");
                return Self::check_rel(&path, uri);
            }
            other => {
                return Err(UriError::UnknownScope {
                    scope: other.to_string(),
                    uri: uri.to_string(),
                })
            }
        };
        if let Some(tail) = tail {
            out.push('/');
            out.push_str(tail);
        }
        Self::check_rel(&out, uri)
    }

    /// Parse a path relative to the namespace root (`resources/a.md`), as the mount sees it.
    pub fn from_rel(rel: &str) -> Result<Self, UriError> {
        let rel = rel.trim_start_matches('/');
        let rel = rel.strip_suffix('/').unwrap_or(rel);
        if rel.is_empty() {
            return Ok(Self::root());
        }
        let first = rel.split('/').next().unwrap_or_default();
        if !SCOPES.contains(&first) {
            return Err(UriError::UnknownScope {
                scope: first.to_string(),
                uri: rel.to_string(),
            });
        }
        Self::check_rel(rel, rel)
    }

    fn check_rel(rel: &str, whole: &str) -> Result<Self, UriError> {
        for c in rel.split('/') {
            check_component(c, whole)?;
        }
        Ok(VPath(rel.to_string()))
    }

    /// A child of this path. The name is validated like any URI component.
    pub fn join(&self, name: &str) -> Result<Self, UriError> {
        let whole = format!("{}/{}", self.uri(), name);
        check_component(name, &whole)?;
        if self.0.is_empty() {
            if !SCOPES.contains(&name) {
                return Err(UriError::UnknownScope {
                    scope: name.to_string(),
                    uri: whole,
                });
            }
            return Ok(VPath(name.to_string()));
        }
        Ok(VPath(format!("{}/{}", self.0, name)))
    }

    /// Join a relative sub-path (`a/b.md`) onto this path.
    pub fn join_rel(&self, rel: &str) -> Result<Self, UriError> {
        let mut p = self.clone();
        for c in rel.split('/').filter(|c| !c.is_empty()) {
            p = p.join(c)?;
        }
        Ok(p)
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path relative to the account root, without leading `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// [`Self::as_str`] as bytes: how the calls relative to the data root's descriptor take
    /// it (the root is empty, which they read as the directory itself).
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// `viking://...`
    pub fn uri(&self) -> String {
        format!("viking://{}", self.0)
    }

    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    pub fn parent(&self) -> Option<VPath> {
        if self.0.is_empty() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => VPath(self.0[..i].to_string()),
            None => VPath::root(),
        })
    }

    /// Number of components (0 for the root).
    pub fn depth(&self) -> usize {
        if self.0.is_empty() {
            0
        } else {
            self.0.split('/').count()
        }
    }

    /// Is this a user's sessions directory or below it (`user/{uid}/sessions/...`)?
    pub fn is_under_sessions(&self) -> bool {
        let mut c = self.components();
        c.next() == Some("user") && c.next().is_some() && c.next() == Some(SESSIONS_DIR)
    }

    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// Whether add-resource may put content here: OpenViking's
    /// `matches_content_kind(uri, "resource")` — `resources` and below, a user's
    /// `user/{id}/resources` and below, or a peer's `user/{id}/peers/{peer}/resources` and
    /// below. Never an agent's tree, memories, skills or sessions.
    pub fn is_resource_target(&self) -> bool {
        let c: Vec<&str> = self.components().collect();
        matches!(
            c.as_slice(),
            ["resources", ..]
                | ["user", _, "resources", ..]
                | ["user", _, "peers", _, "resources", ..]
        )
    }

    /// Whether this is a skill's directory, where OpenViking installs one:
    /// `agent/skills/NAME` (shared with the account) or `user/{id}/skills/NAME` (the user's
    /// own, OpenViking 0.5.2's default).
    pub fn is_skill_dir(&self) -> bool {
        let c: Vec<&str> = self.components().collect();
        matches!(
            c.as_slice(),
            ["agent", "skills", _] | ["user", _, "skills", _]
        )
    }

    /// True when `self` is `other` or lies below it, component-wise (`a/bc` is not below `a/b`).
    pub fn starts_with(&self, other: &VPath) -> bool {
        other.0.is_empty()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }

    /// Replace the prefix `from` with `to`; `None` when `self` is not under `from`.
    pub fn rebase(&self, from: &VPath, to: &VPath) -> Option<VPath> {
        if !self.starts_with(from) {
            return None;
        }
        let tail = &self.0[from.0.len()..];
        let tail = tail.trim_start_matches('/');
        if tail.is_empty() {
            return Some(to.clone());
        }
        if to.0.is_empty() {
            return Some(VPath(tail.to_string()));
        }
        Some(VPath(format!("{}/{}", to.0, tail)))
    }

    /// The scope (`resources`, `user`, `agent`), or `None` at the root.
    pub fn scope(&self) -> Option<&str> {
        self.components().next()
    }

    /// Does this directory hold several users' trees (the root, and `user`, which holds every
    /// `user/{id}`)? Nothing derived from its children may be shown to one user, so it gets no
    /// summary (`ops::keys::has_summary`), and a summary an older vikingfs wrote there is
    /// shown only to a caller who sees every user (`server::auth::Identity::may_read_summary`).
    pub fn holds_user_trees(&self) -> bool {
        self.0.is_empty() || self.0 == "user"
    }
}

impl fmt::Display for VPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "viking://{}", self.0)
    }
}

impl fmt::Debug for VPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VPath({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<VPath, UriError> {
        VPath::parse_uri(s, "default")
    }

    #[test]
    fn parses_scopes_and_aliases() {
        assert_eq!(
            p("viking://resources/a/b.md").unwrap().as_str(),
            "resources/a/b.md"
        );
        assert_eq!(p("viking://resources/").unwrap().as_str(), "resources");
        assert_eq!(p("viking://").unwrap(), VPath::root());
        assert_eq!(
            p("viking://~/memories").unwrap().as_str(),
            "user/default/memories"
        );
        assert_eq!(
            p("viking://session/s1").unwrap().as_str(),
            "user/default/sessions/s1"
        );
        assert_eq!(p("viking://agent/x").unwrap().uri(), "viking://agent/x");
    }

    #[test]
    fn rejects_bad_uris_with_a_reason() {
        assert!(matches!(p("http://x"), Err(UriError::NotViking(_))));
        assert!(matches!(
            p("viking://bogus/a"),
            Err(UriError::UnknownScope { .. })
        ));
        assert!(matches!(
            p("viking://resources/../etc"),
            Err(UriError::DotComponent(_))
        ));
        assert!(matches!(
            p("viking://resources/a//b"),
            Err(UriError::EmptyComponent(_))
        ));
        assert!(matches!(
            p("viking://resources/a\0b"),
            Err(UriError::Nul(_))
        ));
        assert!(matches!(
            p("viking://resources/.path.ovlock"),
            Err(UriError::InternalName { .. })
        ));
        assert!(matches!(
            p("viking://resources/d/.exact.ovlock.x.0123"),
            Err(UriError::InternalName { .. })
        ));
        let long = format!("viking://resources/{}", "x".repeat(256));
        assert!(matches!(p(&long), Err(UriError::NameTooLong(_))));
        let ok = format!("viking://resources/{}", "x".repeat(255));
        assert!(p(&ok).is_ok());
        assert!(p("viking://session").is_err());
        let msg = p("viking://resources/../x").unwrap_err().to_string();
        assert!(msg.contains(".."), "{msg}");
    }

    #[test]
    fn prefix_logic_is_component_wise() {
        let a = p("viking://resources/a/b").unwrap();
        let ab = p("viking://resources/a/bc").unwrap();
        let parent = p("viking://resources/a").unwrap();
        assert!(a.starts_with(&parent));
        assert!(!ab.starts_with(&a));
        assert!(a.starts_with(&VPath::root()));
        assert_eq!(a.parent().unwrap(), parent);
        assert_eq!(a.name(), "b");
        let to = p("viking://agent/z").unwrap();
        assert_eq!(a.rebase(&parent, &to).unwrap().as_str(), "agent/z/b");
        assert_eq!(parent.rebase(&parent, &to).unwrap(), to);
        assert!(ab.rebase(&a, &to).is_none());
        assert_eq!(a.depth(), 3);
        assert!(VPath::root().join("nope").is_err());
        assert_eq!(VPath::root().join("user").unwrap().as_str(), "user");
    }

    #[test]
    fn resource_targets_are_openvikings_resource_content() {
        let t = |u: &str| p(u).unwrap().is_resource_target();
        for yes in [
            "viking://resources",
            "viking://resources/docs/a.md",
            "viking://user/alice/resources",
            "viking://user/alice/resources/x",
            "viking://user/alice/peers/bob/resources/x",
        ] {
            assert!(t(yes), "{yes}");
        }
        for no in [
            "viking://",
            "viking://agent",
            "viking://agent/notes",
            "viking://agent/skills/s",
            "viking://user",
            "viking://user/alice",
            "viking://user/alice/memories",
            "viking://user/alice/memories/resources",
            "viking://user/alice/sessions/s1",
            "viking://user/alice/peers/bob/memories",
            "viking://user/alice/skills/s",
        ] {
            assert!(!t(no), "{no}");
        }
    }
}
