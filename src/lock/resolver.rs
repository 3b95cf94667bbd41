//! Which lock file(s) a path's lock lives in, named exactly as OpenViking names them.
//!
//! | lock                                        | file                                  |
//! |---------------------------------------------|---------------------------------------|
//! | TREE on a directory or a missing path       | `{path}/.path.ovlock`                 |
//! | EXACT on an existing directory              | `{path}/.path.ovlock`                 |
//! | EXACT on a file or a missing path           | `{parent}/.exact.ovlock.{safe}.{hash}`|
//! | TREE on an existing file                    | the same `.exact.ovlock.` sidecar     |
//!
//! `hash` is the first 16 hex digits of SHA-1 of the AGFS path (`/local/{account}/...`).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use sha1::{Digest, Sha1};

use crate::sys::{self, DataRoot};
use crate::uri::VPath;
use crate::workspace::Workspace;

/// Directory lock file name.
pub const PATH_LOCK: &str = ".path.ovlock";
/// Prefix of a per-name lock file in the parent directory.
pub const EXACT_PREFIX: &str = ".exact.ovlock.";

/// Whether a directory entry is a lock file.
pub fn is_lock_name(name: &[u8]) -> bool {
    name == PATH_LOCK.as_bytes() || name.starts_with(EXACT_PREFIX.as_bytes())
}

/// OpenViking's `safe_name`: runs outside `[A-Za-z0-9._-]` become one `_`, leading and trailing
/// `.`/`_` trimmed, `path` when nothing is left, at most 80 characters.
pub fn safe_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    let trimmed = out.trim_matches(|c| c == '.' || c == '_');
    if trimmed.is_empty() {
        return "path".to_string();
    }
    // All characters left are ASCII, so a byte cut is a character cut.
    trimmed[..trimmed.len().min(80)].to_string()
}

/// First 16 hex digits of SHA-1 of an AGFS path.
pub fn path_hash(agfs_path: &str) -> String {
    let d = Sha1::digest(agfs_path.as_bytes());
    hex::encode(&d[..8])
}

/// `.exact.ovlock.{safe_name}.{hash}` for the entry `name` whose AGFS path is `agfs_path`.
pub fn exact_file_name(agfs_path: &str, name: &str) -> String {
    format!("{EXACT_PREFIX}{}.{}", safe_name(name), path_hash(agfs_path))
}

/// A lock file as the engine names it to the kernel: its path relative to the data root's
/// descriptor, never absolute (walked in chunks if it is PATH_MAX or longer). `path` is the
/// whole path, for messages only: it may be longer than PATH_MAX.
#[derive(Debug)]
pub(crate) struct LockFile {
    pub rel: CString,
    pub path: PathBuf,
}

/// A lock file borrowed: a name or relative path below a directory descriptor (the data
/// root's, or a directory's met on a walk). What the engine's checks take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'a> {
    pub dir: BorrowedFd<'a>,
    pub rel: &'a CStr,
    pub path: &'a Path,
}

impl At<'_> {
    /// Run a `*at` call on the file.
    pub fn call<T>(&self, f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>) -> io::Result<T> {
        sys::with_at_c(self.dir, self.rel, f)
    }

    /// [`call`](Self::call) for a change of the lock file's directory that programs do not see
    /// (placing or removing the lock file): its shown times stay (see [`crate::dirtimes`]).
    pub fn call_quietly<T>(
        &self,
        f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
    ) -> io::Result<T> {
        self.call(|d, n| crate::dirtimes::quietly(d, n, || f(d, n)))
    }

    /// [`call`](Self::call), with a missing file answered by `absent`. A long path is walked
    /// in chunks before `f` runs, so a directory missing on the way fails before `f` could
    /// answer it as the one system call would have; this answers both alike.
    pub fn call_or<T>(
        &self,
        absent: T,
        f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
    ) -> io::Result<T> {
        match self.call(f) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(absent),
            r => r,
        }
    }
}

/// Maps namespace paths to lock files in one workspace.
#[derive(Debug, Clone)]
pub struct Resolver {
    ws: Workspace,
    data_root: PathBuf,
    /// The data root opened `O_PATH`: every lock file is reached relative to it, so no path
    /// handed to the kernel is longer than the part below the data root.
    root: Option<DataRoot>,
}

impl Resolver {
    pub fn new(ws: &Workspace) -> Self {
        let data_root = ws.data_root();
        let root = DataRoot::open(&data_root).ok();
        Resolver {
            ws: ws.clone(),
            data_root,
            root,
        }
    }

    /// The data root's descriptor (`ENOENT` when it could not be opened).
    pub(crate) fn root(&self) -> io::Result<&DataRoot> {
        self.root
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }

    /// Does `rel` (relative to the data root) exist? `Err` carries the errno (ENOTDIR when a
    /// file stands where a directory would).
    pub fn probe(&self, rel: &CStr) -> io::Result<bool> {
        match self.root()?.at_c(rel, |d, n| sys::lstatat(d, n)) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Make directory `p` and what is missing above it (`ENOTDIR`: a file in the way).
    pub(crate) fn make_dir(&self, p: &VPath) -> io::Result<()> {
        self.root()?.make_dir_all(p.as_bytes()).map(drop)
    }

    /// The lock file `name` in directory `dir`.
    pub(crate) fn lock_file(&self, dir: &VPath, name: &str) -> LockFile {
        let mut rel = Vec::with_capacity(dir.as_str().len() + name.len() + 2);
        if !dir.is_root() {
            rel.extend_from_slice(dir.as_bytes());
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
        let mut path = self.fs_path(dir);
        path.push(name);
        LockFile {
            rel: CString::new(rel).expect("a namespace path has no NUL"),
            path,
        }
    }

    /// `f` relative to the data root.
    pub(crate) fn at<'a>(&'a self, f: &'a LockFile) -> io::Result<At<'a>> {
        Ok(At {
            dir: self.root()?.as_fd(),
            rel: &f.rel,
            path: &f.path,
        })
    }

    /// `p`'s `.path.ovlock`.
    pub(crate) fn dir_lock_file(&self, p: &VPath) -> LockFile {
        self.lock_file(p, PATH_LOCK)
    }

    /// `p`'s sidecar in its parent; `None` for the namespace root.
    pub(crate) fn sidecar_file(&self, p: &VPath) -> Option<LockFile> {
        let parent = p.parent()?;
        Some(self.lock_file(&parent, &exact_file_name(&self.ws.agfs_path(p), p.name())))
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// The directory or file a path names.
    pub fn fs_path(&self, p: &VPath) -> PathBuf {
        let mut out = self.data_root.clone();
        if !p.is_root() {
            out.push(p.as_str());
        }
        out
    }

    /// `{path}/.path.ovlock`.
    pub fn dir_lock(&self, p: &VPath) -> PathBuf {
        let mut f = self.fs_path(p);
        f.push(PATH_LOCK);
        f
    }

    /// `{parent}/.exact.ovlock.{safe}.{hash}`; `None` for the namespace root, which has no parent.
    pub fn sidecar(&self, p: &VPath) -> Option<PathBuf> {
        let parent = p.parent()?;
        let mut f = self.fs_path(&parent);
        f.push(exact_file_name(&self.ws.agfs_path(p), p.name()));
        Some(f)
    }

    /// Every strict ancestor of `p`, from the root down.
    pub fn ancestors(p: &VPath) -> Vec<VPath> {
        let mut out = Vec::with_capacity(p.depth());
        let mut cur = p.parent();
        while let Some(a) = cur {
            cur = a.parent();
            out.push(a);
        }
        out.reverse();
        out
    }

    /// The namespace path a lock file stands for. A sidecar is matched to the sibling whose
    /// hash it carries; `siblings` lists the names in its directory (a sidecar for a path that
    /// does not exist yet is shown with its safe name).
    pub fn locked_path<'a>(
        &self,
        dir: &VPath,
        lock_name: &str,
        siblings: impl IntoIterator<Item = &'a str>,
    ) -> String {
        if lock_name == PATH_LOCK {
            return dir.uri();
        }
        let tail = &lock_name[EXACT_PREFIX.len()..];
        for s in siblings {
            if let Ok(child) = dir.join(s) {
                if exact_file_name(&self.ws.agfs_path(&child), s) == lock_name {
                    return child.uri();
                }
            }
        }
        let safe = tail.rsplit_once('.').map(|(s, _)| s).unwrap_or(tail);
        format!("{}/{}", dir.uri().trim_end_matches('/'), safe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compat_test_vector() {
        assert_eq!(
            exact_file_name("/data/中文 name..txt", "中文 name..txt"),
            ".exact.ovlock.name..txt.591847f8876e86f7"
        );
    }

    #[test]
    fn safe_names() {
        assert_eq!(safe_name("a b  c.md"), "a_b_c.md");
        assert_eq!(safe_name("..__x__.."), "x");
        assert_eq!(safe_name("中文"), "path");
        assert_eq!(safe_name("."), "path");
        assert_eq!(safe_name(&"y".repeat(100)).len(), 80);
        assert_eq!(safe_name("ok-Name_1.txt"), "ok-Name_1.txt");
    }

    #[test]
    fn files_for_a_workspace_path() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path(), "default", "default").unwrap();
        let r = Resolver::new(&ws);
        let p = ws.parse_uri("viking://resources/a/b.md").unwrap();
        let want = format!(
            ".exact.ovlock.b.md.{}",
            &hex::encode(Sha1::digest(b"/local/default/resources/a/b.md"))[..16]
        );
        assert_eq!(
            r.sidecar(&p).unwrap(),
            ws.data_root().join("resources/a").join(&want)
        );
        assert_eq!(
            r.dir_lock(&p),
            ws.data_root().join("resources/a/b.md/.path.ovlock")
        );
        assert!(r.sidecar(&VPath::root()).is_none());
        let anc: Vec<String> = Resolver::ancestors(&p)
            .iter()
            .map(|a| a.as_str().to_string())
            .collect();
        assert_eq!(anc, ["", "resources", "resources/a"]);
        let dirp = p.parent().unwrap();
        assert_eq!(
            r.locked_path(&dirp, &want, ["x.md", "b.md"]),
            "viking://resources/a/b.md"
        );
        assert_eq!(
            r.locked_path(&dirp, &want, ["x.md"]),
            "viking://resources/a/b.md"
        );
    }
}
