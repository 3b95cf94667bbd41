//! The filesystem routes of OpenViking 0.5.2 (`openviking/server/routers/filesystem.py`):
//! `GET /api/v1/fs/ls`, `GET /api/v1/fs/tree`, `GET /api/v1/fs/stat`, `POST /api/v1/fs/mkdir`,
//! `POST /api/v1/fs/mv`, `POST /api/v1/fs/cp`, `GET /api/v1/fs/attrs` (with
//! `POST /api/v1/fs/attrs/set_tags`, the content routes' `set_tags`) and `DELETE /api/v1/fs`;
//! and the namespace as the API shows it (`View`), which the content routes read through too.
//!
//! - `cp` is the locked copy (`ops::Locked::copy`): the source read under its own lock
//!   (EXACT for a file, TREE for a directory, OpenViking's modes for cp), added at the
//!   destination under the destination's, indexed like any add.
//! - A path's `attrs` are its tags (`ops::Locked::tags`: the extended attribute
//!   `user.openviking.tags`, which the mount shows too) and its OpenViking context type.
//!
//! - Changes are the locked operations the mount and the CLI run (`ops.mkdir`, `ops.mv`,
//!   `ops.rm`); reads go straight to the files, without a lock, as the mount's do.
//! - What a listing shows is what the mount shows: never an internal name (lock files,
//!   `.redirect.json`, vikingfs's temporaries), only the scopes at the root, and the summaries
//!   `.abstract.md` / `.overview.md` only with `show_all_hidden` (OpenViking hides every file
//!   whose name starts with a dot unless asked). A user key never sees another user's tree.
//! - Nothing here follows a symlink (a local user may make one through the mount): the API's
//!   callers are remote, and a symlink must not hand them the host's files.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, State};
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};

use super::{delete, get, post, Routes};
use crate::ops::OpsError;
use crate::server::auth::Identity;
use crate::server::extract::{Body, Params};
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::sys::{self, DataRoot, OFlags, Stat};
use crate::uri::{is_internal_name, VPath, ABSTRACT_FILE, OVERVIEW_FILE, SCOPES};

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/fs/ls", get(ls))
        .route("/api/v1/fs/tree", get(tree))
        .route("/api/v1/fs/stat", get(stat))
        .route("/api/v1/fs/mkdir", post(mkdir))
        .route("/api/v1/fs/mv", post(mv))
        .route("/api/v1/fs/cp", post(cp))
        .route("/api/v1/fs/attrs", get(attrs))
        .route("/api/v1/fs/attrs/set_tags", post(super::content::set_tags))
        .route("/api/v1/fs", delete(rm))
}

// ---- query values as FastAPI reads them -------------------------------------------------

/// A boolean query value as FastAPI accepts it (`true`/`false`, `1`/`0`, `yes`/`no`,
/// `on`/`off`).
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let s = String::deserialize(d)?;
    parse_flag(&s).ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not a boolean")))
}

fn opt_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    flag(d).map(Some)
}

fn parse_flag(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// The values of a repeated query key (`extra_fields=a&extra_fields=b`), which the struct
/// extractors do not read.
pub(super) fn repeated(raw: &Option<String>, key: &str) -> Vec<String> {
    let Some(q) = raw else { return Vec::new() };
    q.split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k) == key).then(|| decode(v))
        })
        .collect()
}

/// A query component percent-decoded (`+` is a space; a `%` not followed by two hex
/// digits is kept as it is).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
            (b'+', _, _) => out.push(b' '),
            (c, _, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---- the namespace as the API shows it ----------------------------------------------------

/// One entry of a listing.
pub(super) struct Node {
    pub path: VPath,
    pub name: String,
    pub st: Stat,
}

impl Node {
    pub fn is_dir(&self) -> bool {
        self.st.is_dir()
    }
}

/// The workspace's files as a remote caller may read them: relative to a descriptor of the
/// data root, never following a symlink.
pub(super) struct View {
    root: DataRoot,
    ws: crate::workspace::Workspace,
    /// Who reads: what it may see and whose summaries it may read are
    /// [`Identity::may_see`] and [`Identity::may_read_summary`].
    who: Identity,
}

/// An I/O failure on `p` in OpenViking's codes (through the one mapping of `OpsError`).
pub(super) fn io_error(uri: &str, path: std::path::PathBuf, e: std::io::Error) -> ApiError {
    ApiError::from_ops(uri, OpsError::io(path, e))
}

pub(super) fn not_found(p: &VPath) -> ApiError {
    ApiError::from_ops(&p.uri(), OpsError::NotFound(p.uri()))
}

/// A symlink in the namespace (made through the mount) is not followed for a remote caller.
pub(super) fn symlink(p: &VPath) -> ApiError {
    ApiError::invalid(format!(
        "{} is a symbolic link, which the API does not follow",
        p.uri()
    ))
    .with_details(json!({ "resource": p.uri() }))
}

impl View {
    pub fn open(api: &Api, who: &Identity) -> Result<View, ApiError> {
        let ws = api.ops.workspace().clone();
        let root = DataRoot::open(&ws.data_root())
            .map_err(|e| io_error("viking://", ws.data_root(), e))?;
        Ok(View {
            root,
            ws,
            who: who.clone(),
        })
    }

    fn err(&self, p: &VPath, e: std::io::Error) -> ApiError {
        io_error(&p.uri(), self.ws.fs_path(p), e)
    }

    /// `lstat` of `p`; `None` when it is not there (or a symlink or a file stands on its way).
    pub fn stat(&self, p: &VPath) -> Result<Option<Stat>, ApiError> {
        let Some(parent) = p.parent() else {
            return sys::fstat(self.root.as_fd())
                .map(Some)
                .map_err(|e| self.err(p, e));
        };
        let dir = match self
            .root
            .open_nofollow(parent.as_bytes(), OFlags::PATH | OFlags::DIRECTORY)
        {
            Ok(d) => d,
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(self.err(p, e)),
        };
        match sys::lstatat(&dir, p.name()) {
            Ok(st) => Ok(Some(st)),
            Err(e) if gone(&e) => Ok(None),
            Err(e) => Err(self.err(p, e)),
        }
    }

    /// `p` opened with `flags` (a symlink anywhere on its way refused).
    pub fn open_at(&self, p: &VPath, flags: OFlags) -> Result<OwnedFd, ApiError> {
        self.root
            .open_nofollow(p.as_bytes(), flags | OFlags::NOCTTY)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => symlink(p),
                Some(libc::ENOENT | libc::ENOTDIR) => not_found(p),
                _ => self.err(p, e),
            })
    }

    /// The regular file `p`, open for reading, with its `stat`.
    /// Nothing else is opened at all: a FIFO, socket or device node made through the mount
    /// is refused on its type (`sys::DataRoot::open_regular_beneath`), never opened.
    pub fn open_file(&self, p: &VPath) -> Result<(std::fs::File, Stat), ApiError> {
        self.root
            .open_regular_beneath(p.as_bytes())
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => symlink(p),
                Some(libc::ENOENT | libc::ENOTDIR) => not_found(p),
                Some(libc::EISDIR) => ApiError::invalid(format!(
                    "Directory URI is not readable as a file: {}. List it first, then read a file URI.",
                    p.uri()
                ))
                .with_details(
                    json!({"resource": p.uri(), "expected": "file", "actual": "directory"}),
                ),
                Some(libc::ENXIO) => {
                    ApiError::invalid(format!("{} is not a regular file", p.uri()))
                        .with_details(json!({ "resource": p.uri() }))
                }
                _ => self.err(p, e),
            })
    }

    /// What a listing of directory `dir` shows `who`, by name.
    pub fn children(
        &self,
        dir: &VPath,
        who: &Identity,
        show_all_hidden: bool,
    ) -> Result<Vec<Node>, ApiError> {
        let fd = self.open_at(dir, OFlags::PATH | OFlags::DIRECTORY)?;
        let names = sys::dir_names(&fd).map_err(|e| self.err(dir, e))?;
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            // A name the namespace cannot spell as a URI has no entry here.
            let Some(name) = n.to_str() else { continue };
            let visible = if dir.is_root() {
                SCOPES.contains(&name)
            } else {
                !is_internal_name(name)
            };
            if !visible {
                continue;
            }
            let Ok(path) = dir.join(name) else { continue };
            if !who.may_see(&path) {
                continue;
            }
            let st = match sys::lstatat(&fd, OsStr::from_bytes(n.as_bytes())) {
                Ok(st) => st,
                // Gone since the listing was read.
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(self.err(&path, e)),
            };
            // OpenViking lists a hidden file only when asked; directories always.
            if name.starts_with('.') && !st.is_dir() && !show_all_hidden {
                continue;
            }
            out.push(Node {
                path,
                name: name.to_string(),
                st,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The body of directory `dir`'s summary `file` (`.abstract.md` or `.overview.md`), as
    /// OpenViking shows it (a frontmatter block dropped); `None` when there is none yet.
    pub fn summary(&self, dir: &VPath, file: &str) -> Option<String> {
        if !self.who.may_read_summary(dir) {
            return None;
        }
        let p = dir.join(file).ok()?;
        let (mut f, _) = self.open_file(&p).ok()?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut bytes).ok()?;
        Some(summary_body(&String::from_utf8_lossy(&bytes)))
    }

    /// Whether `p` is held by a path lock now: a lock file on it or on a directory above it
    /// (what OpenViking's `isLocked` says).
    pub fn is_locked(&self, p: &VPath, is_dir: bool) -> bool {
        use crate::lock::resolver::{exact_file_name, PATH_LOCK};
        let lock_in = |d: &VPath, name: &str| {
            let rel = if d.is_root() {
                name.to_string()
            } else {
                format!("{}/{name}", d.as_str())
            };
            self.root.lstat(rel.as_bytes()).is_ok()
        };
        let mut up = if is_dir { Some(p.clone()) } else { p.parent() };
        while let Some(d) = up {
            if lock_in(&d, PATH_LOCK) {
                return true;
            }
            up = d.parent();
        }
        match p.parent() {
            Some(parent) if !is_dir => {
                lock_in(&parent, &exact_file_name(&self.ws.agfs_path(p), p.name()))
            }
            _ => false,
        }
    }
}

fn gone(e: &std::io::Error) -> bool {
    sys::is_gone(e) || e.raw_os_error() == Some(libc::ELOOP)
}

/// A summary's text without OpenViking's frontmatter (`---` … `---`), as its
/// `body_for_preview` gives it; a summary without one is returned as it is.
pub(super) fn summary_body(text: &str) -> String {
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(|l| l.trim_end_matches(['\r', '\n'])) != Some("---") {
        return text.to_string();
    }
    let mut at = text.find('\n').map_or(text.len(), |i| i + 1);
    for l in lines {
        at += l.len();
        if l.trim_end_matches(['\r', '\n']) == "---" {
            return text[at..].trim_end_matches(['\r', '\n']).to_string();
        }
    }
    text.to_string()
}

/// OpenViking's placeholders for a directory whose summary is not written yet.
pub(super) fn abstract_or_placeholder(view: &View, dir: &VPath) -> String {
    view.summary(dir, ABSTRACT_FILE)
        .unwrap_or_else(|| format!("# {} [Directory abstract is not ready]", dir.uri()))
}

pub(super) fn overview_or_placeholder(view: &View, dir: &VPath) -> String {
    view.summary(dir, OVERVIEW_FILE)
        .unwrap_or_else(|| format!("# {}\n\n[Directory overview is not ready]", dir.uri()))
}

/// `s` cut to `limit` characters as OpenViking cuts abstracts (`...` at the end).
fn cut(s: String, limit: i64) -> String {
    let n = s.chars().count() as i64;
    if n <= limit {
        return s;
    }
    if limit <= 3 {
        return ".".repeat(limit.max(0) as usize);
    }
    let mut out: String = s.chars().take((limit - 3) as usize).collect();
    out.push_str("...");
    out
}

/// RFC 3339 in whole seconds (`2026-12-02T15:00:32Z`), as OpenViking's original listings.
pub(super) fn time_secs(st: &Stat) -> String {
    jiff::Timestamp::from_second(st.mtime().0)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// ISO 8601 with milliseconds (`2026-12-02T15:00:32.000Z`), as its agent listings.
fn time_millis(st: &Stat) -> String {
    let (s, ns) = st.mtime();
    jiff::Timestamp::new(s, (ns / 1_000_000 * 1_000_000) as i32)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

/// The `stat` fields every form of an entry starts from.
pub(super) fn stat_fields(name: &str, st: &Stat, uri: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), name.into());
    m.insert("size".into(), st.st_size.into());
    m.insert("mode".into(), (st.st_mode & 0o7777).into());
    m.insert("modTime".into(), time_secs(st).into());
    m.insert("isDir".into(), st.is_dir().into());
    m.insert("uri".into(), uri.into());
    m
}

// ---- listings -----------------------------------------------------------------------------

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum SortBy {
    Name,
    Mtime,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Default)]
#[serde(rename_all = "lowercase")]
enum SortOrder {
    #[default]
    Asc,
    Desc,
}

/// The parameters `ls` and `tree` share (filesystem.py).
#[derive(Deserialize)]
struct ListQuery {
    uri: String,
    #[serde(default, deserialize_with = "flag")]
    simple: bool,
    #[serde(default, deserialize_with = "flag")]
    recursive: bool,
    #[serde(default = "agent")]
    output: String,
    #[serde(default = "abs_limit")]
    abs_limit: i64,
    #[serde(default, deserialize_with = "opt_flag")]
    include_abstract: Option<bool>,
    #[serde(default, deserialize_with = "opt_flag")]
    include_overview: Option<bool>,
    #[serde(default = "overview_limit")]
    overview_limit: i64,
    #[serde(default, deserialize_with = "flag")]
    show_all_hidden: bool,
    #[serde(default, deserialize_with = "flag")]
    directories_only: bool,
    #[serde(default = "node_limit")]
    node_limit: i64,
    #[serde(default)]
    offset: u64,
    limit: Option<i64>,
    level_limit: Option<i64>,
    sort_by: Option<SortBy>,
    #[serde(default)]
    sort_order: SortOrder,
    #[serde(default, deserialize_with = "flag")]
    include_tags: bool,
}

fn agent() -> String {
    "agent".into()
}
fn abs_limit() -> i64 {
    256
}
fn overview_limit() -> i64 {
    4000
}
fn node_limit() -> i64 {
    1000
}

/// One listing, however it is asked for.
struct Listing {
    /// `ls` (depth 1 unless recursive) or `tree` (entries carry `rel_path`).
    tree: bool,
    recursive: bool,
    simple: bool,
    agent: bool,
    abs_limit: i64,
    load_abstract: bool,
    include_overview: bool,
    overview_limit: i64,
    show_all_hidden: bool,
    directories_only: bool,
    /// Entries wanted: `None` is all of them.
    limit: Option<usize>,
    offset: usize,
    max_depth: Option<usize>,
    sort: Option<(SortBy, SortOrder)>,
    extra: Vec<String>,
    tags: Vec<String>,
    include_tags: bool,
}

impl Listing {
    fn of(q: &ListQuery, raw: &Option<String>, tree: bool) -> Result<Listing, ApiError> {
        let agent = match q.output.as_str() {
            "agent" => true,
            "original" => false,
            o => return Err(ApiError::invalid(format!("Invalid output format: {o}"))),
        };
        if q.limit.is_some_and(|l| l < 1) {
            return Err(ApiError::invalid(
                "limit: Input should be greater than or equal to 1",
            ));
        }
        if q.overview_limit < 1 {
            return Err(ApiError::invalid(
                "overview_limit: Input should be greater than or equal to 1",
            ));
        }
        let node_limit = q.limit.unwrap_or(q.node_limit);
        let recursive = tree || q.recursive;
        // ls -R goes as deep as OpenViking's service does (three levels); tree as asked.
        let level = if tree { q.level_limit.unwrap_or(3) } else { 3 };
        Ok(Listing {
            tree,
            recursive,
            simple: !tree && q.simple,
            agent,
            abs_limit: q.abs_limit,
            load_abstract: q.include_abstract.unwrap_or(agent),
            include_overview: q.include_overview == Some(true),
            overview_limit: q.overview_limit,
            show_all_hidden: q.show_all_hidden,
            directories_only: tree && q.directories_only,
            // 0 lists nothing; a negative limit lists everything.
            limit: usize::try_from(node_limit).ok(),
            offset: q.offset as usize,
            max_depth: if recursive {
                usize::try_from(level).ok().filter(|&l| l > 0)
            } else {
                Some(1)
            },
            sort: q.sort_by.map(|s| (s, q.sort_order)),
            extra: repeated(raw, "extra_fields"),
            tags: repeated(raw, "tags"),
            include_tags: q.include_tags,
        })
    }

    /// The page: entries in OpenViking's form, and whether more follow.
    fn run(
        &self,
        api: &Api,
        view: &View,
        who: &Identity,
        p: &VPath,
    ) -> Result<(Vec<Value>, bool), ApiError> {
        let st = view.stat(p)?.ok_or_else(|| not_found(p))?;
        let mut found = Vec::new();
        // A listing of a file is the file, as ls(1) has it.
        if !st.is_dir() {
            found.push((
                Node {
                    path: p.clone(),
                    name: p.name().to_string(),
                    st,
                },
                p.name().to_string(),
            ));
        } else if self.limit != Some(0) {
            let want = self.limit.map(|l| self.offset + l + 1);
            self.walk(view, who, p, "", 1, want, &mut found)?;
        }
        // Tags are not kept by vikingfs: no entry carries the tags a filter asks for.
        if !self.tags.is_empty() {
            found.clear();
        }
        let found: Vec<_> = found.into_iter().skip(self.offset).collect();
        let more = self.limit.is_some_and(|l| found.len() > l);
        let page = found.into_iter().take(self.limit.unwrap_or(usize::MAX));
        if self.simple && self.extra.is_empty() {
            return Ok((page.map(|(n, _)| Value::from(n.path.uri())).collect(), more));
        }
        let out = page
            .map(|(n, rel)| self.entry(api, view, &n, &rel))
            .collect();
        Ok((out, more))
    }

    /// Depth-first, each directory's entries in order, until `want` entries are found.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        view: &View,
        who: &Identity,
        dir: &VPath,
        rel: &str,
        depth: usize,
        want: Option<usize>,
        out: &mut Vec<(Node, String)>,
    ) -> Result<bool, ApiError> {
        let mut kids = match view.children(dir, who, self.show_all_hidden) {
            Ok(k) => k,
            // A directory removed while the walk was in it has nothing left to list.
            Err(e) if depth > 1 && e.code == Code::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if let Some((by, order)) = self.sort {
            sort(&mut kids, by, order);
        }
        for n in kids {
            let rel = if rel.is_empty() {
                n.name.clone()
            } else {
                format!("{rel}/{}", n.name)
            };
            let descend = n.is_dir() && self.max_depth.is_none_or(|m| depth < m);
            let path = n.path.clone();
            if !self.directories_only || n.is_dir() {
                out.push((n, rel.clone()));
                if want.is_some_and(|w| out.len() >= w) {
                    return Ok(true);
                }
            }
            if descend && self.walk(view, who, &path, &rel, depth + 1, want, out)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn entry(&self, api: &Api, view: &View, n: &Node, rel: &str) -> Value {
        let uri = n.path.uri();
        let mut m = if self.agent {
            let mut m = Map::new();
            m.insert("uri".into(), uri.clone().into());
            m.insert(
                "size".into(),
                if n.is_dir() { 0 } else { n.st.st_size as u64 }.into(),
            );
            m.insert("isDir".into(), n.is_dir().into());
            m.insert("modTime".into(), time_millis(&n.st).into());
            m
        } else {
            let mut m = stat_fields(&n.name, &n.st, &uri);
            m.remove("uri");
            if self.tree || self.recursive {
                m.insert("rel_path".into(), rel.into());
            }
            m.insert("uri".into(), uri.clone().into());
            m
        };
        if self.agent && (self.tree || self.recursive) {
            m.insert("rel_path".into(), rel.into());
        }
        for f in &self.extra {
            match f.as_str() {
                "locked" => {
                    m.insert(
                        "isLocked".into(),
                        view.is_locked(&n.path, n.is_dir()).into(),
                    );
                }
                "count" if n.is_dir() => {
                    if let Some(c) = count_under(api, &n.path) {
                        m.insert("count".into(), c.into());
                    }
                }
                _ => {}
            }
        }
        if self.include_tags {
            m.insert("tags".into(), json!([]));
        }
        if self.load_abstract {
            let a = if n.is_dir() {
                cut(abstract_or_placeholder(view, &n.path), self.abs_limit)
            } else {
                String::new()
            };
            m.insert("abstract".into(), a.into());
        }
        if self.include_overview {
            let o = if n.is_dir() {
                cut(overview_or_placeholder(view, &n.path), self.overview_limit)
            } else {
                String::new()
            };
            m.insert("overview".into(), o.into());
        }
        Value::Object(m)
    }
}

/// OpenViking's sorted listing: directories first, then files, each by name (case folded)
/// or by mtime (ties by name).
fn sort(kids: &mut [Node], by: SortBy, order: SortOrder) {
    kids.sort_by(|a, b| {
        let group = b.is_dir().cmp(&a.is_dir());
        let name = || (a.name.to_lowercase(), &a.name).cmp(&(b.name.to_lowercase(), &b.name));
        let key = match by {
            SortBy::Name => name(),
            SortBy::Mtime => a.st.mtime().cmp(&b.st.mtime()),
        };
        let key = if order == SortOrder::Desc {
            key.reverse()
        } else {
            key
        };
        group.then(key).then_with(name)
    });
}

/// Index records under `p` (OpenViking's `count`: its vector records there).
pub(super) fn count_under(api: &Api, p: &VPath) -> Option<usize> {
    api.ops.index().uris_under(p).ok().map(|v| v.len())
}

/// The listing answer: `ListingResponse`, the envelope with `has_more`.
fn listing(entries: Vec<Value>, has_more: bool) -> axum::response::Response {
    use axum::response::IntoResponse;
    axum::Json(json!({ "status": "ok", "result": entries, "has_more": has_more })).into_response()
}

async fn list(
    api: Arc<Api>,
    who: Identity,
    q: ListQuery,
    raw: Option<String>,
    tree: bool,
) -> Result<axum::response::Response, ApiError> {
    let p = who.path(&q.uri)?;
    let l = Listing::of(&q, &raw, tree)?;
    let (entries, more) = blocking(move || {
        let view = View::open(&api, &who)?;
        l.run(&api, &view, &who, &p)
    })
    .await?;
    Ok(listing(entries, more))
}

async fn ls(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<ListQuery>,
    RawQuery(raw): RawQuery,
) -> Result<axum::response::Response, ApiError> {
    list(api, who, q, raw, false).await
}

async fn tree(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<ListQuery>,
    RawQuery(raw): RawQuery,
) -> Result<axum::response::Response, ApiError> {
    list(api, who, q, raw, true).await
}

#[derive(Deserialize)]
struct UriQuery {
    uri: String,
}

async fn stat(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<UriQuery>,
) -> ApiResult {
    let p = who.path(&q.uri)?;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let st = view.stat(&p)?.ok_or_else(|| not_found(&p))?;
        let name = if p.is_root() { "" } else { p.name() };
        let mut m = stat_fields(name, &st, &p.uri());
        m.insert("isLocked".into(), view.is_locked(&p, st.is_dir()).into());
        if st.is_dir() {
            if let Some(c) = count_under(&api, &p) {
                m.insert("count".into(), c.into());
            }
        }
        ok(Value::Object(m))
    })
    .await
}

// ---- changes: the locked operations ---------------------------------------------------

#[derive(Deserialize)]
struct MkdirBody {
    uri: String,
    /// OpenViking writes it as the directory's first abstract; here summaries are derived
    /// only, so it is accepted and not kept.
    #[allow(dead_code)]
    description: Option<String>,
    #[allow(dead_code)]
    acl: Option<Value>,
}

/// `mkdir -p`, as OpenViking's (an existing directory is `ALREADY_EXISTS`).
async fn mkdir(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<MkdirBody>) -> ApiResult {
    let p = who.path(&b.uri)?;
    blocking(move || {
        api.ops
            .mkdir(&p, true)
            .map_err(|e| ApiError::from_ops(&p.uri(), e))?;
        ok(json!({ "uri": p.uri() }))
    })
    .await
}

#[derive(Deserialize)]
struct MvBody {
    from_uri: String,
    to_uri: String,
}

/// Move to exactly `to_uri` (which must not exist), as OpenViking's mv.
async fn mv(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<MvBody>) -> ApiResult {
    let src = who.path(&b.from_uri)?;
    let dst = who.path(&b.to_uri)?;
    blocking(move || {
        api.ops
            .mv(&src, &dst)
            .map_err(|e| ApiError::from_ops(&src.uri(), e))?;
        ok(json!({ "from": src.uri(), "to": dst.uri() }))
    })
    .await
}

/// `CpRequest` (unknown fields ignored, as its model does).
#[derive(Deserialize)]
struct CpBody {
    from_uri: String,
    to_uri: String,
    #[serde(default)]
    recursive: bool,
}

/// Copy a file to exactly `to_uri` (replacing a file there), or a directory (`recursive`)
/// into `to_uri` (merged with what is there), as OpenViking's `fs/cp`.
async fn cp(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<CpBody>) -> ApiResult {
    let src = who.path(&b.from_uri)?;
    let dst = who.path(&b.to_uri)?;
    if src == dst {
        return Err(ApiError::invalid("cp source and target must be different"));
    }
    if src.starts_with(&dst) || dst.starts_with(&src) {
        return Err(ApiError::invalid(
            "cp source and target subtrees must not overlap",
        ));
    }
    blocking(move || {
        let view = View::open(&api, &who)?;
        let st = view.stat(&src)?.ok_or_else(|| not_found(&src))?;
        if st.is_dir() && !b.recursive {
            return Err(ApiError::invalid(format!(
                "Cannot copy directory without --recursive: {}",
                src.uri()
            ))
            .with_details(json!({"resource": src.uri(), "expected_flag": "recursive"})));
        }
        // Never a file replaced by a directory or the other way round.
        if let Some(t) = view.stat(&dst)? {
            if t.is_dir() != st.is_dir() {
                let (want, have) = if st.is_dir() {
                    ("directory", "file")
                } else {
                    ("file", "directory")
                };
                return Err(ApiError::invalid(format!(
                    "cp target must be a {want}, not a {have}: {}",
                    dst.uri()
                ))
                .with_details(json!({"resource": dst.uri(), "expected": want, "actual": have})));
            }
        }
        let report = api
            .ops
            .copy(&src, &dst, b.recursive)
            .map_err(|e| ApiError::from_ops(&src.uri(), e))?;
        ok(json!({
            "operation_id": report.lifecycle,
            "operation": "copy",
            "from": src.uri(),
            "to": dst.uri(),
            "recursive": st.is_dir(),
            "phase": "completed",
            "files_created": report.files,
        }))
    })
    .await
}

/// `fs/attrs`: the path's tags and context type (OpenViking's logical attributes).
async fn attrs(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<UriQuery>,
) -> ApiResult {
    let p = who.path(&q.uri)?;
    blocking(move || {
        let view = View::open(&api, &who)?;
        view.stat(&p)?.ok_or_else(|| not_found(&p))?;
        let tags = api
            .ops
            .tags(&p)
            .map_err(|e| ApiError::from_ops(&p.uri(), e))?;
        ok(json!({
            "uri": p.uri(),
            "context_type": super::content::context_type(&p),
            "attrs": { "tags": tags },
        }))
    })
    .await
}

#[derive(Deserialize)]
struct RmQuery {
    uri: String,
    #[serde(default, deserialize_with = "flag")]
    recursive: bool,
    #[serde(default, deserialize_with = "flag")]
    wait: bool,
}

async fn rm(State(api): State<Arc<Api>>, who: Identity, Params(q): Params<RmQuery>) -> ApiResult {
    let p = who.path(&q.uri)?;
    blocking(move || {
        let report = api
            .ops
            .rm(&p, q.recursive)
            .map_err(|e| ApiError::from_ops(&p.uri(), e))?;
        if q.wait {
            wait_drained(&api)?;
        }
        ok(json!({ "uri": p.uri(), "estimated_deleted_count": report.records }))
    })
    .await
}

/// A request's `wait`: until every job is done (summaries, vectors), within the request's
/// time; `DEADLINE_EXCEEDED` when it is not.
pub(super) fn wait_drained(api: &Api) -> Result<(), ApiError> {
    let budget = api
        .config
        .request_timeout
        .saturating_sub(Duration::from_secs(1));
    if super::system::drained(api, Some(Instant::now() + budget))? {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::DeadlineExceeded,
            format!(
                "queue processing did not finish within {}s",
                budget.as_secs()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_decode_as_fastapi_reads_them() {
        assert_eq!(decode("viking%3A%2F%2Fa+b%ZZ%4"), "viking://a b%ZZ%4");
        let raw = Some("uri=x&extra_fields=locked&extra_fields=count&tags=a%3Db".into());
        assert_eq!(repeated(&raw, "extra_fields"), ["locked", "count"]);
        assert_eq!(repeated(&raw, "tags"), ["a=b"]);
        assert_eq!(parse_flag("True"), Some(true));
        assert_eq!(parse_flag("0"), Some(false));
        assert_eq!(parse_flag("maybe"), None);
    }

    #[test]
    fn summaries_and_abstracts_read_as_openviking_shows_them() {
        assert_eq!(summary_body("plain\n"), "plain\n");
        assert_eq!(
            summary_body("---\ndirectory: x\n---\nbody text\n\n"),
            "body text"
        );
        assert_eq!(summary_body("---\nunclosed\n"), "---\nunclosed\n");
        assert_eq!(cut("abcdef".into(), 10), "abcdef");
        assert_eq!(cut("abcdef".into(), 5), "ab...");
        assert_eq!(cut("abcdef".into(), 2), "..");
    }
}
