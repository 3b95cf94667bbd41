//! The on-disk protocol for one path: check, write, double-check, roll back.
//!
//! Taking `(path, kind)`: when the path is missing, first look for conflicting tokens on its
//! other candidate file and on every ancestor's `.path.ovlock` (TREE tokens only), and only then
//! create the directory the lock file needs; create the token with `O_EXCL`; then check — the
//! ancestors, the other candidate and, for TREE, every lock file of the subtree. Two contenders each write before they look, so at
//! least one sees the other and removes its own token; that post-write check is what makes the
//! protocol safe, so a TREE walks its subtree only once, after writing.
//!
//! Stale tokens met on the way are removed, and a stale token in the file we want is taken
//! over, both by compare-and-swap ([`super::provider`]).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::codec::{self, Content, Liveness};
use super::pool::Pool;
use super::provider::{self, Cas};
use super::resolver::{Resolver, PATH_LOCK};
use super::{walk, LockError, LockKind};
use crate::uri::VPath;

/// A lock file this process wrote and must refresh and remove.
#[derive(Debug)]
pub(crate) struct Held {
    pub file: PathBuf,
    /// Kept open from its creation (or takeover) so release needs no open.
    pub fd: Option<std::fs::File>,
    pub token: String,
    pub kind: LockKind,
    pub lost: bool,
}

/// What a lock file means to a requester.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// No conflict (absent, ours, or an EXACT token where only TREE matters).
    Free,
    Stale(String),
    Held {
        owner: String,
        kind: LockKind,
    },
}

/// Which tokens conflict: on the path itself any; on an ancestor only TREE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Filter {
    Any,
    TreeOnly,
}

pub(crate) struct Engine<'a> {
    pub res: &'a Resolver,
    /// Spare lock files, recycled instead of created and deleted ([`super::pool`]).
    pub pool: &'a Pool,
    pub expire: Duration,
}

/// How young our own token must be for release to skip the compare-and-swap.
const FAST_RELEASE_WINDOW: Duration = Duration::from_secs(1);

fn age_ns(time_ns: u64) -> u64 {
    codec::now_ns().saturating_sub(time_ns)
}

impl Engine<'_> {
    /// Judge lock file content. `file` is only used for an empty file's age and error text;
    /// `default_kind` is the kind an empty file is reported with.
    pub fn judge(
        &self,
        file: &Path,
        raw: &[u8],
        me: &str,
        filter: Filter,
        default_kind: LockKind,
    ) -> Result<Verdict, LockError> {
        let parsed = match codec::parse(raw) {
            Some(c) => c,
            None => {
                return Err(LockError::CorruptToken {
                    file: file.to_path_buf(),
                    content: String::from_utf8_lossy(raw).into_owned(),
                })
            }
        };
        match parsed {
            Content::Empty => {
                let age = match provider::mtime_ns(file) {
                    Ok(m) => age_ns(m),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Verdict::Free),
                    Err(e) => return Err(LockError::io(file, e)),
                };
                if age > self.expire.as_nanos() as u64 {
                    Ok(Verdict::Stale(format!(
                        "empty for {:.0}s (its writer died before writing a token)",
                        age as f64 / 1e9
                    )))
                } else {
                    Ok(Verdict::Held {
                        owner: "(token being written)".into(),
                        kind: default_kind,
                    })
                }
            }
            Content::Token(t) => {
                if t.owner == me || (filter == Filter::TreeOnly && t.kind == LockKind::Exact) {
                    return Ok(Verdict::Free);
                }
                match codec::liveness(t.owner) {
                    Liveness::Alive => {}
                    Liveness::Dead(why) => return Ok(Verdict::Stale(why)),
                    Liveness::Unknown => {
                        let age = age_ns(t.time_ns);
                        if age > self.expire.as_nanos() as u64 {
                            return Ok(Verdict::Stale(format!(
                                "not refreshed for {:.0}s (lock_expire {}s)",
                                age as f64 / 1e9,
                                self.expire.as_secs_f64()
                            )));
                        }
                    }
                }
                Ok(Verdict::Held {
                    owner: t.owner.to_string(),
                    kind: t.kind,
                })
            }
        }
    }

    /// Read and judge, re-reading under a shared flock before calling content corrupt (a CAS
    /// writer may have been midway).
    fn read_judge(
        &self,
        file: &Path,
        buf: &mut Vec<u8>,
        me: &str,
        filter: Filter,
        default_kind: LockKind,
    ) -> Result<Option<Verdict>, LockError> {
        if !provider::read(file, buf).map_err(|e| LockError::io(file, e))? {
            return Ok(None);
        }
        if codec::parse(buf).is_none()
            && !provider::read_locked(file, buf).map_err(|e| LockError::io(file, e))?
        {
            return Ok(None);
        }
        self.judge(file, buf, me, filter, default_kind).map(Some)
    }

    /// Fail with Busy if `file` holds a conflicting live token; remove it if stale. A missing
    /// directory on the way means no lock file (`ENOTDIR`: a regular file where the directory
    /// would be).
    fn check_file(
        &self,
        file: &Path,
        uri: &dyn Fn() -> String,
        me: &str,
        filter: Filter,
        buf: &mut Vec<u8>,
    ) -> Result<(), LockError> {
        match self.check_file_strict(file, uri, me, filter, buf) {
            Err(LockError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOTDIR) => {
                Ok(())
            }
            r => r,
        }
    }

    /// `check_file`, passing `ENOTDIR` up.
    fn check_file_strict(
        &self,
        file: &Path,
        uri: &dyn Fn() -> String,
        me: &str,
        filter: Filter,
        buf: &mut Vec<u8>,
    ) -> Result<(), LockError> {
        loop {
            let Some(v) = self.read_judge(file, buf, me, filter, LockKind::Tree)? else {
                return Ok(());
            };
            match v {
                Verdict::Free => return Ok(()),
                Verdict::Held { owner, kind } => {
                    return Err(LockError::Busy {
                        path: uri(),
                        kind,
                        owner,
                    })
                }
                Verdict::Stale(why) => {
                    tracing::info!(file = %file.display(), %why, "removing stale lock");
                    provider::cas_remove(file, buf).map_err(|e| LockError::io(file, e))?;
                }
            }
        }
    }

    /// TREE tokens on the ancestors' `.path.ovlock`; a file among the ancestors is an error.
    /// Runs on every acquire: one path buffer is cut back per ancestor, no per-ancestor
    /// allocation; a VPath is only built for an error.
    fn check_ancestors(&self, p: &VPath, me: &str, buf: &mut Vec<u8>) -> Result<(), LockError> {
        let rel = p.as_str();
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let mut f = self.res.fs_path(&VPath::root()).into_os_string().into_vec();
        let base = f.len();
        // Ancestors from the root down: "", then every prefix of `rel` ending before a '/'.
        let ends = std::iter::once(0).chain(rel.match_indices('/').map(|(i, _)| i));
        let ends = ends.take(if p.is_root() { 0 } else { p.depth() });
        for end in ends {
            f.truncate(base);
            if end > 0 {
                f.push(b'/');
                f.extend_from_slice(&rel.as_bytes()[..end]);
            }
            f.push(b'/');
            f.extend_from_slice(PATH_LOCK.as_bytes());
            let ancestor = || VPath::from_rel(&rel[..end]).unwrap_or_else(|_| VPath::root());
            // Nearly always no lock file is there: probe relative to the data root (a short
            // path walk) and read it the careful way only when something exists.
            let mut rel_lock = f[base..].strip_prefix(b"/").unwrap_or(&f[base..]).to_vec();
            rel_lock.push(0);
            if let Ok(c) = std::ffi::CStr::from_bytes_with_nul(&rel_lock) {
                match self.res.probe(c) {
                    Some(Ok(false)) => continue,
                    Some(Err(e)) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                        return Err(LockError::NotADirectory {
                            path: ancestor().uri(),
                        })
                    }
                    _ => {}
                }
            }
            let file = Path::new(std::ffi::OsStr::from_bytes(&f));
            match self.check_file_strict(file, &|| ancestor().uri(), me, Filter::TreeOnly, buf) {
                Err(LockError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::ENOTDIR) =>
                {
                    return Err(LockError::NotADirectory {
                        path: ancestor().uri(),
                    })
                }
                r => r?,
            }
        }
        Ok(())
    }

    /// Every lock file in the subtree of `p` except `p`'s own `.path.ovlock`.
    fn check_descendants(&self, p: &VPath, me: &str) -> Result<(), LockError> {
        let root = self.res.fs_path(p);
        let mut buf = Vec::with_capacity(128);
        walk::lock_files(&root, &|dir, e| LockError::io(dir, e), &mut |found| {
            let name = found.name.to_bytes();
            if found.rel_dir.as_os_str().is_empty() && name == PATH_LOCK.as_bytes() {
                return Ok(());
            }
            let at = || {
                root.join(found.rel_dir)
                    .join(std::ffi::OsStr::new(&*String::from_utf8_lossy(name)))
            };
            if !walk::read_at(found.dir_fd, found.name, &mut buf)
                .map_err(|e| LockError::io(at(), e))?
            {
                return Ok(());
            }
            let file = at();
            let dir = p
                .join_rel(&found.rel_dir.to_string_lossy())
                .unwrap_or_else(|_| p.clone());
            let lock_name = String::from_utf8_lossy(name);
            let uri = || self.res.locked_path(&dir, &lock_name, std::iter::empty());
            let quick = codec::parse(&buf).map(|_| ());
            if quick.is_none() {
                // Maybe torn by a CAS writer: settle it the careful way.
                return self.check_file(&file, &uri, me, Filter::Any, &mut buf);
            }
            match self.judge(&file, &buf, me, Filter::Any, LockKind::Exact)? {
                Verdict::Free => Ok(()),
                Verdict::Held { owner, kind } => Err(LockError::Busy {
                    path: uri(),
                    kind,
                    owner,
                }),
                Verdict::Stale(_) => self.check_file(&file, &uri, me, Filter::Any, &mut buf),
            }
        })
    }

    /// Take one lock. `Ok(None)`: the file already holds this owner's token (a nested lock on
    /// the very file its parent guard holds), so there is nothing more to hold.
    /// `create_dirs`: may the directory the lock file goes in be created when it is missing
    /// (a lock on a path about to be made)? If not, a missing one fails with [`LockError::Gone`].
    pub fn take(
        &self,
        p: &VPath,
        kind: LockKind,
        me: &str,
        create_dirs: bool,
    ) -> Result<Option<Held>, LockError> {
        let mut buf = Vec::with_capacity(128);
        let fs = self.res.fs_path(p);
        let meta = std::fs::symlink_metadata(&fs);
        let is_dir = matches!(&meta, Ok(m) if m.is_dir());
        let exists = meta.is_ok();
        // Checking before writing only spares a busy path a write and its roll-back; the
        // check after writing is what excludes. So it is done only where a busy path would
        // otherwise leave directories behind: before creating missing ones.
        if !exists {
            self.check_ancestors(p, me, &mut buf)?;
        }
        let dir_lock = self.res.dir_lock(p);
        let sidecar = self.res.sidecar(p);
        // The file we write, and the other candidate of the same path we must check.
        let (target, other) = if is_dir || (kind == LockKind::Tree && !exists) || p.is_root() {
            (dir_lock, sidecar)
        } else if exists {
            (sidecar.expect("non-root path has a parent"), None)
        } else {
            (sidecar.expect("non-root path has a parent"), Some(dir_lock))
        };
        let dir = target.parent().expect("lock file has a directory");
        if !exists {
            if let Some(o) = &other {
                self.check_file(o, &|| p.uri(), me, Filter::Any, &mut buf)?;
            }
            make_dirs(dir, p, create_dirs)?;
        }
        let token = codec::format(me, codec::now_ns(), kind);
        let fd = loop {
            let created = match self.pool.place(&target, token.as_bytes()) {
                Ok(Some(f)) => Ok(f),
                Ok(None) => provider::create_excl(&target, token.as_bytes()),
                Err(e) => Err(e),
            };
            match created {
                Ok(f) => break Some(f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let Some(v) = self.read_judge(&target, &mut buf, "", Filter::Any, kind)? else {
                        continue;
                    };
                    if codec::parse(&buf)
                        .is_some_and(|c| matches!(c, Content::Token(t) if t.owner == me))
                    {
                        return Ok(None);
                    }
                    match v {
                        Verdict::Free => continue,
                        Verdict::Held { owner, kind } => {
                            return Err(LockError::Busy {
                                path: p.uri(),
                                kind,
                                owner,
                            })
                        }
                        Verdict::Stale(why) => {
                            tracing::info!(file = %target.display(), %why, "taking over stale lock");
                            match provider::cas_replace(&target, &buf, token.as_bytes())
                                .map_err(|e| LockError::io(&target, e))?
                            {
                                Cas::Done => break None,
                                Cas::Changed => continue,
                            }
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    if !create_dirs {
                        return Err(LockError::Gone { path: p.uri() });
                    }
                    make_dirs(dir, p, true)?
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return Err(LockError::NotADirectory { path: p.uri() })
                }
                Err(e) => return Err(LockError::io(&target, e)),
            }
        };
        let held = Held {
            fd,
            file: target,
            token,
            kind,
            lost: false,
        };
        let recheck = (|| {
            self.check_ancestors(p, me, &mut buf)?;
            if let Some(o) = &other {
                self.check_file(o, &|| p.uri(), me, Filter::Any, &mut buf)?;
            }
            if kind == LockKind::Tree {
                self.check_descendants(p, me)?;
            }
            Ok(())
        })();
        match recheck {
            Ok(()) => Ok(Some(held)),
            Err(e) => {
                self.remove(held);
                Err(e)
            }
        }
    }

    /// Remove our token (CAS); `false` when it was no longer ours.
    ///
    /// A token written moments ago cannot have been taken over: takeover needs it stale
    /// (older than lock_expire, which no sane configuration sets below a second) and we are
    /// alive. Then the file is still ours and a plain unlink is the compare-and-swap, which
    /// spares the common short hold a flock, a read and an fstat. Such a file goes back to
    /// the pool of spares rather than being deleted (no inode freed and allocated again).
    pub fn remove(&self, mut h: Held) -> bool {
        if let (Some(_), Some(Content::Token(t))) = (&h.fd, codec::parse(h.token.as_bytes())) {
            let fresh = (self.expire / 2).min(FAST_RELEASE_WINDOW).as_nanos() as u64;
            if age_ns(t.time_ns) < fresh {
                match self.pool.retire(&h.file, &mut h.fd, h.token.len() as u64) {
                    Ok(true) => return true,
                    Ok(false) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
                    Err(_) => {} // fall through to the careful path, which reports the error
                }
            }
        }
        if let (Some(_), Some(Content::Token(t))) = (&h.fd, codec::parse(h.token.as_bytes())) {
            let fresh = (self.expire / 2).min(FAST_RELEASE_WINDOW).as_nanos() as u64;
            if age_ns(t.time_ns) < fresh {
                match std::fs::remove_file(&h.file) {
                    Ok(()) => return true,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
                    Err(_) => {} // fall through to the careful path, which reports the error
                }
            }
        }
        let r = match &h.fd {
            Some(f) => provider::cas_remove_open(f, &h.file, h.token.as_bytes()),
            None => provider::cas_remove(&h.file, h.token.as_bytes()),
        };
        match r {
            Ok(Cas::Done) => true,
            Ok(Cas::Changed) => false,
            Err(e) => {
                tracing::error!(file = %h.file.display(), error = %e, "cannot remove lock file");
                false
            }
        }
    }
}

/// The directory a lock file goes in: created when missing, or `Gone` if that is not allowed.
fn make_dirs(dir: &Path, p: &VPath, create: bool) -> Result<(), LockError> {
    if !create {
        return match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(LockError::NotADirectory { path: p.uri() }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LockError::Gone { path: p.uri() }),
            Err(e) => Err(LockError::io(dir, e)),
        };
    }
    std::fs::create_dir_all(dir).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTDIR) | Some(libc::EEXIST) => LockError::NotADirectory { path: p.uri() },
        _ => LockError::io(dir, e),
    })
}
