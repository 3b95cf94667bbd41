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
use std::os::fd::AsFd;
use std::time::Duration;

use super::codec::{self, Content, Liveness};
use super::pool::Spares;
use super::provider::{self, Cas};
use super::resolver::{At, LockFile, Resolver, PATH_LOCK};
use super::{walk, LockError, LockKind};
use crate::sys;
use crate::uri::VPath;

/// A lock file this process wrote and must refresh and remove.
#[derive(Debug)]
pub(crate) struct Held {
    pub file: LockFile,
    /// Kept open from its creation (or takeover) so release needs no open.
    pub fd: Option<std::fs::File>,
    /// The pool name of the spare this lock file was placed from (see `lock::pool`).
    pub spare: Option<std::ffi::CString>,
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
    pub pool: &'a Spares,
    pub expire: Duration,
}

/// How young our own token must be for release to skip the compare-and-swap.
const FAST_RELEASE_WINDOW: Duration = Duration::from_secs(1);

fn age_ns(time_ns: u64) -> u64 {
    codec::now_ns().saturating_sub(time_ns)
}

/// What [`Engine::recheck`] must check for a lock [`Engine::place`] wrote.
#[derive(Debug)]
pub struct Recheck {
    path: VPath,
    kind: LockKind,
    /// The path's other candidate lock file (its `.path.ovlock` when it does not exist yet).
    other: Option<LockFile>,
}

impl Engine<'_> {
    /// Judge lock file content. `file` is only used for an empty file's age and error text;
    /// `default_kind` is the kind an empty file is reported with.
    pub fn judge(
        &self,
        file: At<'_>,
        raw: &[u8],
        me: &str,
        filter: Filter,
        default_kind: LockKind,
    ) -> Result<Verdict, LockError> {
        let parsed = match codec::parse(raw) {
            Some(c) => c,
            None => {
                return Err(LockError::CorruptToken {
                    file: file.path.to_path_buf(),
                    content: String::from_utf8_lossy(raw).into_owned(),
                })
            }
        };
        match parsed {
            Content::Empty => {
                let age = match file.call(provider::mtime_ns) {
                    Ok(m) => age_ns(m),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Verdict::Free),
                    Err(e) => return Err(LockError::io(file.path, e)),
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
        file: At<'_>,
        buf: &mut Vec<u8>,
        me: &str,
        filter: Filter,
        default_kind: LockKind,
    ) -> Result<Option<Verdict>, LockError> {
        let io_err = |e| LockError::io(file.path, e);
        if !file
            .call_or(false, |d, n| provider::read(d, n, buf))
            .map_err(io_err)?
        {
            return Ok(None);
        }
        if codec::parse(buf).is_none()
            && !file
                .call_or(false, |d, n| provider::read_locked(d, n, buf))
                .map_err(io_err)?
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
        file: At<'_>,
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
        file: At<'_>,
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
                    tracing::info!(file = %file.path.display(), %why, "removing stale lock");
                    file.call_or(Cas::Changed, |d, n| {
                        crate::dirtimes::quietly(d, n, || provider::cas_remove(d, n, buf))
                    })
                    .map_err(|e| LockError::io(file.path, e))?;
                }
            }
        }
    }

    /// The data root's descriptor, as a lock error.
    fn at<'a>(&'a self, f: &'a LockFile) -> Result<At<'a>, LockError> {
        self.res.at(f).map_err(|e| LockError::io(&f.path, e))
    }

    /// TREE tokens on the ancestors' `.path.ovlock`; a file among the ancestors is an error.
    /// Runs on every acquire: each ancestor's lock file is probed with one `fstatat` relative
    /// to the data root through one reused buffer, and read only when something is there.
    fn check_ancestors(&self, p: &VPath, me: &str, buf: &mut Vec<u8>) -> Result<(), LockError> {
        self.check_ancestors_cached(p, me, buf, &mut Vec::new())
    }

    /// [`Self::check_ancestors`], skipping the ancestors in `free` (prefix lengths found with
    /// no lock file by an earlier check of the same batch, after all its writes) and adding
    /// those it finds free.
    fn check_ancestors_cached(
        &self,
        p: &VPath,
        me: &str,
        buf: &mut Vec<u8>,
        free: &mut Vec<String>,
    ) -> Result<(), LockError> {
        let rel = p.as_str();
        let ancestor = |end: usize| VPath::from_rel(&rel[..end]).unwrap_or_else(|_| VPath::root());
        let not_a_dir = |end: usize| LockError::NotADirectory {
            path: ancestor(end).uri(),
        };
        // Ancestors from the root down: "", then every prefix of `rel` ending before a '/'.
        let ends = std::iter::once(0).chain(rel.match_indices('/').map(|(i, _)| i));
        let ends = ends.take(if p.is_root() { 0 } else { p.depth() });
        let mut probe = Vec::with_capacity(rel.len() + PATH_LOCK.len() + 2);
        for end in ends {
            probe.clear();
            if end > 0 {
                probe.extend_from_slice(&rel.as_bytes()[..end]);
                probe.push(b'/');
            }
            probe.extend_from_slice(PATH_LOCK.as_bytes());
            probe.push(0);
            let prefix = &rel[..end];
            if free.iter().any(|f| f == prefix) {
                continue;
            }
            let c = std::ffi::CStr::from_bytes_with_nul(&probe).expect("one NUL, at the end");
            // Nearly always no lock file is there: read it the careful way only when
            // something exists.
            match self.res.probe(c) {
                Ok(false) => {
                    free.push(prefix.to_string());
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Err(not_a_dir(end)),
                _ => {}
            }
            let a = ancestor(end);
            let file = self.res.dir_lock_file(&a);
            let uri = || a.uri();
            match self.check_file_strict(self.at(&file)?, &uri, me, Filter::TreeOnly, buf) {
                Err(LockError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::ENOTDIR) =>
                {
                    return Err(not_a_dir(end))
                }
                r => r?,
            }
        }
        Ok(())
    }

    /// Every lock file in the subtree of `p` except `p`'s own `.path.ovlock`.
    fn check_descendants(&self, p: &VPath, me: &str) -> Result<(), LockError> {
        let root = self.res.fs_path(p);
        let base = self.res.root().map_err(|e| LockError::io(&root, e))?;
        let mut buf = Vec::with_capacity(128);
        let rel = p.as_bytes();
        let io_err = |dir, e| LockError::io(dir, e);
        walk::lock_files(base.as_fd(), rel, &root, &io_err, &mut |found| {
            let name = found.name.to_bytes();
            if found.rel_dir.as_os_str().is_empty() && name == PATH_LOCK.as_bytes() {
                return Ok(());
            }
            let path = root
                .join(found.rel_dir)
                .join(std::ffi::OsStr::new(&*String::from_utf8_lossy(name)));
            let file = At {
                dir: found.dir_fd,
                rel: found.name,
                path: &path,
            };
            if !provider::read(found.dir_fd, found.name, &mut buf)
                .map_err(|e| LockError::io(&path, e))?
            {
                return Ok(());
            }
            let dir = p
                .join_rel(&found.rel_dir.to_string_lossy())
                .unwrap_or_else(|_| p.clone());
            let lock_name = String::from_utf8_lossy(name);
            let uri = || self.res.locked_path(&dir, &lock_name, std::iter::empty());
            if codec::parse(&buf).is_none() {
                // Maybe torn by a CAS writer: settle it the careful way.
                return self.check_file(file, &uri, me, Filter::Any, &mut buf);
            }
            match self.judge(file, &buf, me, Filter::Any, LockKind::Exact)? {
                Verdict::Free => Ok(()),
                Verdict::Held { owner, kind } => Err(LockError::Busy {
                    path: uri(),
                    kind,
                    owner,
                }),
                Verdict::Stale(_) => self.check_file(file, &uri, me, Filter::Any, &mut buf),
            }
        })
    }

    /// The directory a lock file goes in: created when missing, or `Gone` if that is not allowed.
    fn make_dirs(&self, dir: &VPath, p: &VPath, create: bool) -> Result<(), LockError> {
        if !create {
            let root = self
                .res
                .root()
                .map_err(|e| LockError::io(self.res.fs_path(dir), e))?;
            return match root.lstat(dir.as_bytes()) {
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => Err(LockError::NotADirectory { path: p.uri() }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err(LockError::Gone { path: p.uri() })
                }
                Err(e) => Err(LockError::io(self.res.fs_path(dir), e)),
            };
        }
        self.res.make_dir(dir).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) | Some(libc::EEXIST) => LockError::NotADirectory { path: p.uri() },
            _ => LockError::io(self.res.fs_path(dir), e),
        })
    }

    /// Write the lock file of one lock; [`Self::recheck`] must follow before it counts.
    /// `Ok(None)`: the file already holds this owner's token (a nested lock on the very file
    /// its parent guard holds), so there is nothing more to hold. `create_dirs`: may the
    /// directory the lock file goes in be created when it is missing (a lock on a path about
    /// to be made)? If not, a missing one fails with [`LockError::Gone`].
    pub fn place(
        &self,
        p: &VPath,
        kind: LockKind,
        me: &str,
        create_dirs: bool,
    ) -> Result<Option<(Held, Recheck)>, LockError> {
        let mut buf = Vec::with_capacity(128);
        let root = self
            .res
            .root()
            .map_err(|e| LockError::io(self.res.fs_path(p), e))?;
        let meta = root.lstat(p.as_bytes());
        let is_dir = matches!(&meta, Ok(m) if m.is_dir());
        let exists = meta.is_ok();
        // The file we write (in directory `dir`), and the other candidate we must check.
        let (target, dir, other) = if is_dir || (kind == LockKind::Tree && !exists) || p.is_root() {
            (
                self.res.dir_lock_file(p),
                p.clone(),
                self.res.sidecar_file(p),
            )
        } else {
            let sidecar = self
                .res
                .sidecar_file(p)
                .expect("non-root path has a parent");
            let parent = p.parent().expect("non-root path has a parent");
            let other = (!exists).then(|| self.res.dir_lock_file(p));
            (sidecar, parent, other)
        };
        let token = codec::format(me, codec::now_ns(), kind);
        let at = self.at(&target)?;
        let mut spare = None;
        let fd = loop {
            let created = at.call_quietly(|d, n| match self.pool.place(d, n, token.as_bytes()) {
                Ok(Some((f, name))) => Ok((f, Some(name))),
                Ok(None) => provider::create_excl(d, n, token.as_bytes()).map(|f| (f, None)),
                Err(e) => Err(e),
            });
            match created {
                Ok((f, name)) => {
                    spare = name;
                    break Some(f);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let Some(v) = self.read_judge(at, &mut buf, "", Filter::Any, kind)? else {
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
                            tracing::info!(file = %target.path.display(), %why, "taking over stale lock");
                            match at
                                .call_or(Cas::Changed, |d, n| {
                                    provider::cas_replace(d, n, &buf, token.as_bytes())
                                })
                                .map_err(|e| LockError::io(&target.path, e))?
                            {
                                Cas::Done => break None,
                                Cas::Changed => continue,
                            }
                        }
                    }
                }
                // The lock file's directory is missing. Checking before writing only spares a
                // busy path a write and its roll-back (the check after writing is what
                // excludes), so it is done only here, where a busy path would otherwise leave
                // the directories made for it behind.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    if !create_dirs {
                        return Err(LockError::Gone { path: p.uri() });
                    }
                    self.check_ancestors(p, me, &mut buf)?;
                    if let Some(o) = &other {
                        self.check_file(self.at(o)?, &|| p.uri(), me, Filter::Any, &mut buf)?;
                    }
                    self.make_dirs(&dir, p, true)?
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return Err(LockError::NotADirectory { path: p.uri() })
                }
                Err(e) => return Err(LockError::io(&target.path, e)),
            }
        };
        let held = Held {
            fd,
            spare,
            file: target,
            token,
            kind,
            lost: false,
        };
        Ok(Some((
            held,
            Recheck {
                path: p.clone(),
                kind,
                other,
            },
        )))
    }

    /// The check after writing, which is what excludes: no conflicting lock on an ancestor,
    /// on the path's other lock file, or (for TREE) below it. `free` carries the ancestors
    /// found free by earlier rechecks of the same batch, all made after all its writes.
    pub fn recheck(&self, r: &Recheck, me: &str, free: &mut Vec<String>) -> Result<(), LockError> {
        let mut buf = Vec::with_capacity(128);
        self.check_ancestors_cached(&r.path, me, &mut buf, free)?;
        if let Some(o) = &r.other {
            self.check_file(self.at(o)?, &|| r.path.uri(), me, Filter::Any, &mut buf)?;
        }
        if r.kind == LockKind::Tree {
            self.check_descendants(&r.path, me)?;
        }
        Ok(())
    }

    /// Remove our token (CAS); `false` when it was no longer ours.
    ///
    /// A token written moments ago cannot have been taken over: takeover needs it stale
    /// (older than lock_expire, which no sane configuration sets below a second) and we are
    /// alive. Then the file is still ours and a plain unlink is the compare-and-swap, which
    /// spares the common short hold a flock, a read and an fstat. Such a file goes back to
    /// the pool of spares rather than being deleted (no inode freed and allocated again).
    pub fn remove(&self, mut h: Held) -> bool {
        let done = self.remove_file(&mut h);
        // Still here: the file was not retired into the pool (which takes the name).
        if let Some(name) = &h.spare {
            self.pool.forget(name);
        }
        done
    }

    fn remove_file(&self, h: &mut Held) -> bool {
        let at = match self.res.at(&h.file) {
            Ok(at) => at,
            Err(e) => {
                tracing::error!(file = %h.file.path.display(), error = %e, "cannot remove lock file");
                return false;
            }
        };
        if let (Some(_), Some(Content::Token(t))) = (&h.fd, codec::parse(h.token.as_bytes())) {
            let fresh = (self.expire / 2).min(FAST_RELEASE_WINDOW).as_nanos() as u64;
            if age_ns(t.time_ns) < fresh {
                let len = h.token.len() as u64;
                match at.call_quietly(|d, n| self.pool.retire(d, n, &mut h.fd, &mut h.spare, len)) {
                    Ok(true) => return true,
                    Ok(false) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
                    Err(_) => {} // fall through to the careful path, which reports the error
                }
                if h.fd.is_some() {
                    match at.call_quietly(|d, n| sys::unlinkat(d, n)) {
                        Ok(()) => return true,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
                        Err(_) => {} // the careful path below reports the error
                    }
                }
            }
        }
        let r = match &h.fd {
            Some(f) => at.call_or(Cas::Changed, |d, n| {
                crate::dirtimes::quietly(d, n, || {
                    provider::cas_remove_open(f, d, n, h.token.as_bytes())
                })
            }),
            None => at.call_or(Cas::Changed, |d, n| {
                crate::dirtimes::quietly(d, n, || provider::cas_remove(d, n, h.token.as_bytes()))
            }),
        };
        match r {
            Ok(Cas::Done) => true,
            Ok(Cas::Changed) => false,
            Err(e) => {
                tracing::error!(file = %h.file.path.display(), error = %e, "cannot remove lock file");
                false
            }
        }
    }
}
