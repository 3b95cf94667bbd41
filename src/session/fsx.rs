//! The file primitives every session read and write goes through, and the durability the
//! commit relies on: whole-file replacement by rename (for files nobody appends to), and
//! fsync of a file and of its directory so a step recorded as done survives a crash of the
//! machine, not only of the process.
//!
//! Invariant: every path is a namespace path ([`VPath`]) opened below the data root's
//! descriptor without following a symlink anywhere on the way or at the end
//! ([`DataRoot::open_nofollow`]: openat2 `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, a checked
//! walk elsewhere). The daemon runs as root and a user can make any link through the mount
//! (`sessions/S/history -> /etc`, `messages.jsonl` -> another user's file): such a link is
//! [`SessionError::Link`], never followed, so a session neither hands back bytes from outside
//! its tree nor writes any there. Directories are made one component at a time, each opened
//! no-follow before the next is made in it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};

use crate::sys::{self, DataRoot, OFlags, Stat};
use crate::uri::VPath;
use crate::workspace::Workspace;

use super::SessionError;

/// The data root's descriptor (opened per call: one `open`, and no state to keep in step
/// with the workspace).
fn root(ws: &Workspace) -> Result<DataRoot, SessionError> {
    DataRoot::open(&ws.data_root()).map_err(|e| SessionError::io(ws.data_root(), e))
}

/// `e`, met on `p`, as a session error: a symlink on the way (`ENOTDIR` from the no-follow
/// walk) or at the end (`ELOOP`) is [`SessionError::Link`], naming the first link on the way.
pub(crate) fn error(ws: &Workspace, p: &VPath, e: io::Error) -> SessionError {
    if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
        if let Some(link) = first_link(ws, p) {
            return SessionError::Link(link.uri());
        }
    }
    SessionError::io(ws.fs_path(p), e)
}

/// The first component of `p` that is a symlink: each prefix is looked at with `lstat`, in
/// order, so no link was followed before the first one is found.
fn first_link(ws: &Workspace, p: &VPath) -> Option<VPath> {
    let root = DataRoot::open(&ws.data_root()).ok()?;
    let mut cur = VPath::root();
    for c in p.components() {
        cur = cur.join(c).ok()?;
        if root.lstat(cur.as_bytes()).ok()?.is_symlink() {
            return Some(cur);
        }
    }
    None
}

/// `p`'s directory, opened `O_PATH` without following a link, and `p`'s name in it.
fn parent(ws: &Workspace, p: &VPath) -> Result<(OwnedFd, OsString), SessionError> {
    let dir = p.parent().unwrap_or_else(VPath::root);
    let fd = root(ws)?
        .open_nofollow(dir.as_bytes(), OFlags::PATH | OFlags::DIRECTORY)
        .map_err(|e| error(ws, &dir, e))?;
    Ok((fd, OsString::from(p.name())))
}

/// `lstat` of `p` (a final link is itself: neither a file nor a directory); `None` when it
/// does not exist. A link on the way is [`SessionError::Link`].
pub fn stat(ws: &Workspace, p: &VPath) -> Result<Option<Stat>, SessionError> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW;
    match root(ws)?.open_nofollow(p.as_bytes(), flags) {
        Ok(fd) => sys::fstat(fd).map(Some).map_err(|e| error(ws, p, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(error(ws, p, e)),
    }
}

/// Whether `p` is a directory (a link to one is an error, not a directory).
pub fn is_dir(ws: &Workspace, p: &VPath) -> Result<bool, SessionError> {
    match stat(ws, p)? {
        Some(st) if st.is_symlink() => Err(SessionError::Link(p.uri())),
        st => Ok(st.is_some_and(|st| st.is_dir())),
    }
}

/// Whether `p` exists (a link there is an error).
pub fn exists(ws: &Workspace, p: &VPath) -> Result<bool, SessionError> {
    match stat(ws, p)? {
        Some(st) if st.is_symlink() => Err(SessionError::Link(p.uri())),
        st => Ok(st.is_some()),
    }
}

/// The whole regular file `p`, or `None` when it does not exist
/// ([`DataRoot::open_regular_beneath`]: no link followed, nothing but a regular file opened).
pub fn read_opt(ws: &Workspace, p: &VPath) -> Result<Option<Vec<u8>>, SessionError> {
    match root(ws)?.open_regular_beneath(p.as_bytes()) {
        Ok((mut f, _)) => {
            let mut b = Vec::new();
            f.read_to_end(&mut b).map_err(|e| error(ws, p, e))?;
            Ok(Some(b))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(error(ws, p, e)),
    }
}

/// Replace `p` with `data` atomically and durably ([`crate::fsx::replace_at`] in its
/// directory's descriptor: a temporary, fsync, rename, fsync of the directory). Readers see
/// the old or the new content, never a part; an existing file keeps its mode and owner.
/// Creates missing parent directories.
pub fn atomic_write(ws: &Workspace, p: &VPath, data: &[u8]) -> Result<(), SessionError> {
    replace(ws, p, data, crate::fsx::Durable::Rename)
}

/// [`atomic_write`] without the directory fsync, for advisory content: after a power loss the
/// file may be the old one, but never empty or torn (its data was synced before the rename).
pub fn atomic_write_advisory(ws: &Workspace, p: &VPath, data: &[u8]) -> Result<(), SessionError> {
    replace(ws, p, data, crate::fsx::Durable::Content)
}

fn replace(
    ws: &Workspace,
    p: &VPath,
    data: &[u8],
    durable: crate::fsx::Durable,
) -> Result<(), SessionError> {
    let dir = p.parent().unwrap_or_else(VPath::root);
    let fd = create_dir_durable(ws, &dir)?;
    // The rename would replace a link, never write through it; still, a link where a
    // session file should be is reported, as every read reports it.
    match sys::lstatat(&fd, p.name()) {
        Ok(st) if st.is_symlink() => return Err(SessionError::Link(p.uri())),
        _ => {}
    }
    crate::fsx::replace_at(fd.as_fd(), OsStr::new(p.name()), data, 0o644, durable)
        .map_err(|e| error(ws, p, e))
}

/// fsync the directory `p`, so a rename or create inside it is durable.
pub fn sync_dir(ws: &Workspace, p: &VPath) -> Result<(), SessionError> {
    let fd = root(ws)?
        .open_nofollow(p.as_bytes(), OFlags::PATH | OFlags::DIRECTORY)
        .map_err(|e| error(ws, p, e))?;
    crate::fsx::sync_dir_at(fd.as_fd()).map_err(|e| error(ws, p, e))
}

/// Open directory `p` (`O_PATH`), creating it and its missing parents (each new entry made
/// durable); a link anywhere on the way is [`SessionError::Link`].
pub fn create_dir_durable(ws: &Workspace, p: &VPath) -> Result<OwnedFd, SessionError> {
    let root = root(ws)?;
    make_dir(ws, &root, p)
}

fn make_dir(ws: &Workspace, root: &DataRoot, p: &VPath) -> Result<OwnedFd, SessionError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    match root.open_nofollow(p.as_bytes(), flags) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && !p.is_root() => {}
        r => return r.map_err(|e| error(ws, p, e)),
    }
    let up = p.parent().unwrap_or_else(VPath::root);
    let pfd = make_dir(ws, root, &up)?;
    match sys::mkdirat(&pfd, p.name(), 0o755) {
        Ok(()) => crate::fsx::sync_dir_at(pfd.as_fd()).map_err(|e| error(ws, &up, e))?,
        // Made meanwhile by someone else: the open below tells what it is.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(error(ws, p, e)),
    }
    root.open_nofollow(p.as_bytes(), flags)
        .map_err(|e| error(ws, p, e))
}

/// Open regular file `p` for appending, creating it (and its directory) when missing; a link
/// there is [`SessionError::Link`], anything else but a regular file refused unopened for
/// writing (`O_NONBLOCK`: a FIFO never blocks the open).
pub fn open_append(ws: &Workspace, p: &VPath) -> Result<File, SessionError> {
    let dir = p.parent().unwrap_or_else(VPath::root);
    let dfd = create_dir_durable(ws, &dir)?;
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY;
    let mode = crate::fsx::new_file_mode();
    let fd = sys::openat(&dfd, p.name(), flags, mode).map_err(|e| error(ws, p, e))?;
    regular(ws, p, fd)
}

/// Open the existing regular file `p` for reading and writing in place (the live file a
/// commit trims), no link followed.
pub fn open_rw(ws: &Workspace, p: &VPath) -> Result<File, SessionError> {
    let flags = OFlags::RDWR | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = root(ws)?
        .open_nofollow(p.as_bytes(), flags)
        .map_err(|e| error(ws, p, e))?;
    regular(ws, p, fd)
}

fn regular(ws: &Workspace, p: &VPath, fd: OwnedFd) -> Result<File, SessionError> {
    let st = sys::fstat(&fd).map_err(|e| error(ws, p, e))?;
    if !st.is_file() {
        return Err(error(ws, p, sys::not_regular(&st)));
    }
    Ok(File::from(fd))
}

/// Give the complete open file `f` the name `p` unless `p` exists (link(2): never replaces
/// what another process created meanwhile). False when it existed.
pub fn link_new(ws: &Workspace, f: &File, p: &VPath) -> Result<bool, SessionError> {
    let (dfd, name) = parent(ws, p)?;
    match sys::link_file(f, &dfd, name.as_os_str()) {
        Ok(()) => crate::fsx::sync_dir_at(dfd.as_fd())
            .map(|()| true)
            .map_err(|e| error(ws, p, e)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(error(ws, p, e)),
    }
}

/// Remove the file `p` (the entry itself: a link there is removed, not followed).
pub fn remove_file(ws: &Workspace, p: &VPath) -> Result<(), SessionError> {
    let (dfd, name) = parent(ws, p)?;
    sys::unlinkat(&dfd, name.as_os_str()).map_err(|e| error(ws, p, e))
}

/// The entries of directory `p` with their `lstat`, or `None` when it does not exist.
pub fn entries(ws: &Workspace, p: &VPath) -> Result<Option<Vec<(OsString, Stat)>>, SessionError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
    let fd = match root(ws)?.open_nofollow(p.as_bytes(), flags) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(ws, p, e)),
    };
    let mut out = Vec::new();
    for name in sys::dir_names(&fd).map_err(|e| error(ws, p, e))? {
        match sys::lstatat(&fd, name.as_os_str()) {
            Ok(st) => out.push((name, st)),
            Err(e) if sys::is_gone(&e) => {}
            Err(e) => return Err(error(ws, p, e)),
        }
    }
    Ok(Some(out))
}

/// SHA-256 of `b`, hex: what a commit records of the bytes it archives and trims, to know them
/// again after a crash.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(b))
}

/// The metadata of regular file `p` (for its source version and mtime), or `None` when it
/// does not exist; no link followed.
pub fn metadata(ws: &Workspace, p: &VPath) -> Result<Option<std::fs::Metadata>, SessionError> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW;
    let f = match root(ws)?.open_nofollow(p.as_bytes(), flags) {
        Ok(fd) => File::from(fd),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(ws, p, e)),
    };
    let m = f.metadata().map_err(|e| error(ws, p, e))?;
    if m.file_type().is_symlink() {
        return Err(SessionError::Link(p.uri()));
    }
    Ok(Some(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each primitive refuses a link on the way and at the end as [`SessionError::Link`]
    /// naming it, and neither reads nor writes where it points.
    #[test]
    fn no_primitive_follows_a_link() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::open(d.path().join("ws"), "default", "alice").unwrap();
        let outside = d.path().join("etc");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("passwd"), "root:x:0:0\n").unwrap();
        let s = VPath::from_rel("user/alice/sessions/s").unwrap();
        create_dir_durable(&ws, &s).unwrap();
        let at = |name: &str| s.join(name).unwrap();
        std::os::unix::fs::symlink(&outside, ws.fs_path(&at("history"))).unwrap();
        let passwd = outside.join("passwd");
        std::os::unix::fs::symlink(&passwd, ws.fs_path(&at("messages.jsonl"))).unwrap();
        let link = |r: Result<(), SessionError>, name: &str| match r {
            Err(SessionError::Link(uri)) => assert_eq!(uri, at(name).uri()),
            other => panic!("{name}: {other:?}"),
        };
        let under = VPath::from_rel("user/alice/sessions/s/history/archive_001/f").unwrap();
        link(atomic_write(&ws, &under, b"x"), "history");
        link(read_opt(&ws, &under).map(drop), "history");
        link(exists(&ws, &under).map(drop), "history");
        link(entries(&ws, &at("history")).map(drop), "history");
        link(is_dir(&ws, &at("history")).map(drop), "history");
        let live = at("messages.jsonl");
        link(read_opt(&ws, &live).map(drop), "messages.jsonl");
        link(open_append(&ws, &live).map(drop), "messages.jsonl");
        link(open_rw(&ws, &live).map(drop), "messages.jsonl");
        link(atomic_write(&ws, &live, b"x"), "messages.jsonl");
        link(metadata(&ws, &live).map(drop), "messages.jsonl");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        assert_eq!(std::fs::read_to_string(&passwd).unwrap(), "root:x:0:0\n");
        // What is no link works as before.
        let f = at("note");
        atomic_write(&ws, &f, b"one\n").unwrap();
        std::io::Write::write_all(&mut open_append(&ws, &f).unwrap(), b"two\n").unwrap();
        assert_eq!(read_opt(&ws, &f).unwrap().unwrap(), b"one\ntwo\n");
        assert!(exists(&ws, &f).unwrap() && !is_dir(&ws, &f).unwrap());
        assert_eq!(read_opt(&ws, &at("none")).unwrap(), None);
    }
}
