//! The one opener for reads the daemon makes on its own (jobs: hashing the history, summaries,
//! indexing; copies of kept content): [`open_regular`].
//!
//! Invariant: such a read never opens anything but a regular file, and never follows a
//! symlink. Opening a FIFO blocks until a writer comes (forever, for one removed through the
//! mount), a socket fails, and a device node is opened for real (a tape rewinds, a terminal
//! may become the daemon's, `/dev/zero` never ends). So the name is first opened `O_PATH |
//! O_NOFOLLOW`, which opens nothing (no driver's `open`, no FIFO wait), its type read from that
//! descriptor, and only a regular file is opened for reading, through the descriptor itself
//! (`/proc/self/fd`): the file read is the file whose type was checked, whatever replaces the
//! name meanwhile.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::OFlags;
use rustix::io::Errno;
use rustix::path::Arg;

use super::{at, Stat};

/// What [`open_regular`] found at a name.
#[derive(Debug)]
pub enum Opened {
    /// A regular file, open for reading (`O_NONBLOCK | O_NOCTTY`, `O_NOATIME` where the
    /// kernel allows it), with its `fstat`.
    File(File, Stat),
    /// Anything else (a directory, a symlink, a FIFO, a socket, a device node): its `lstat`
    /// only. Nothing was opened but an `O_PATH` descriptor.
    Other(Stat),
}

/// Open `name` in `dir` for a background read, refusing all but a regular file without
/// opening it (see the module's doc). A final symlink is [`Opened::Other`], not followed; a
/// symlink on the way is followed as the kernel does (callers name paths below a root they
/// own).
pub fn open_regular<P: Arg + Copy>(dir: impl AsFd, name: P) -> io::Result<Opened> {
    let path = at::openat(&dir, name, OFlags::PATH | OFlags::NOFOLLOW, 0)?;
    // No /proc (a chroot without it): the name opened again, never blocking and never
    // following a link.
    open_checked(path, |flags| {
        at::openat(&dir, name, flags | OFlags::NOFOLLOW, 0)
    })
}

/// The read of [`open_regular`] once its name is open `O_PATH` (`path`, by whatever walk the
/// caller trusts): its type read on that descriptor, and only a regular file opened, through
/// the descriptor itself; `again` opens the name once more where `/proc` is missing (the file
/// is kept only if it is the one checked).
pub(super) fn open_checked(
    path: OwnedFd,
    again: impl FnOnce(OFlags) -> io::Result<OwnedFd>,
) -> io::Result<Opened> {
    let st = at::fstat(&path)?;
    if !st.is_file() {
        return Ok(Opened::Other(st));
    }
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    // O_NOATIME: the owner's or CAP_FOWNER's only (EPERM otherwise: read as usual).
    let fd = match at::reopen(&path, flags | OFlags::NOATIME) {
        Err(e) if e.raw_os_error() == Some(Errno::PERM.raw_os_error()) => at::reopen(&path, flags),
        Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => again(flags),
        r => r,
    }?;
    let now = at::fstat(&fd)?;
    if now.key() != st.key() || !now.is_file() {
        return Ok(Opened::Other(now));
    }
    Ok(Opened::File(File::from(fd), now))
}

/// The error [`open_file`] gives for what is not a regular file: a symlink `ELOOP` (as
/// `O_NOFOLLOW` says), a directory `EISDIR`, a FIFO, socket or device node `ENXIO`.
pub fn not_regular(st: &Stat) -> io::Error {
    let e = if st.is_symlink() {
        Errno::LOOP
    } else if st.is_dir() {
        Errno::ISDIR
    } else {
        Errno::NXIO
    };
    e.into()
}

/// [`open_regular`] of `name` in `dir`, anything but a regular file an error
/// ([`not_regular`]).
pub fn open_regular_file<P: Arg + Copy>(dir: impl AsFd, name: P) -> io::Result<File> {
    match open_regular(dir, name)? {
        Opened::File(f, _) => Ok(f),
        Opened::Other(st) => Err(not_regular(&st)),
    }
}

/// [`open_regular_file`] of a path: `std::fs::File::open` for the daemon's own reads.
pub fn open_file(path: &Path) -> io::Result<File> {
    open_regular_file(rustix::fs::CWD, path)
}

/// The whole of the regular file at `path`: `std::fs::read` for the daemon's own reads.
pub fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    let mut f = open_file(path)?;
    let mut out = Vec::new();
    io::Read::read_to_end(&mut f, &mut out)?;
    Ok(out)
}

/// Copy the regular file `from` to `to` (created or cut, with `from`'s permission bits), as
/// `std::fs::copy` does (`copy_file_range`: a reflink where the filesystem has them), but
/// opening `from` with [`open_file`]: a FIFO or device there is `ENXIO`, never read.
pub fn copy_file(from: &Path, to: &Path) -> io::Result<u64> {
    use std::os::unix::fs::PermissionsExt;
    let (mut src, st) = match open_regular(rustix::fs::CWD, from)? {
        Opened::File(f, st) => (f, st),
        Opened::Other(st) => return Err(not_regular(&st)),
    };
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(to)?;
    dst.set_permissions(std::fs::Permissions::from_mode(st.st_mode & 0o7777))?;
    io::copy(&mut src, &mut dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::{Duration, Instant};

    /// A FIFO without a writer is refused at once: a plain open would wait for a writer
    /// forever. A socket and a device node are refused too, never opened.
    #[test]
    fn a_fifo_a_socket_and_a_device_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        at::mknodat(rustix::fs::CWD, &fifo, libc::S_IFIFO | 0o644, 0).unwrap();
        let sock = d.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        // The opener runs on a thread, so a block fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let (f, s) = (fifo.clone(), sock.clone());
        std::thread::spawn(move || {
            let kinds = [&f, &s].map(|p| match open_regular(rustix::fs::CWD, p.as_path()) {
                Ok(Opened::Other(st)) => Ok(st.file_type()),
                Ok(Opened::File(..)) => Err(format!("{} opened as a file", p.display())),
                Err(e) => Err(format!("{}: {e}", p.display())),
            });
            let _ = tx.send(kinds);
        });
        let start = Instant::now();
        let kinds = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the opener blocked on a FIFO");
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(kinds[0], Ok(rustix::fs::FileType::Fifo));
        assert_eq!(kinds[1], Ok(rustix::fs::FileType::Socket));
        // /dev/zero itself (a character device): refused, though reading it would never end.
        match open_regular(rustix::fs::CWD, std::path::Path::new("/dev/zero")).unwrap() {
            Opened::Other(st) => assert_eq!(st.file_type(), rustix::fs::FileType::CharacterDevice),
            Opened::File(..) => panic!("/dev/zero opened"),
        }
    }

    #[test]
    fn a_regular_file_is_read_and_a_symlink_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"hello").unwrap();
        std::os::unix::fs::symlink(&f, d.path().join("l")).unwrap();
        let Opened::File(mut file, st) = open_regular(rustix::fs::CWD, f.as_path()).unwrap() else {
            panic!("a regular file refused");
        };
        assert_eq!(st.st_size, 5);
        let mut s = String::new();
        file.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
        let l = d.path().join("l");
        match open_regular(rustix::fs::CWD, l.as_path()).unwrap() {
            Opened::Other(st) => assert!(st.is_symlink()),
            Opened::File(..) => panic!("a symlink followed"),
        }
    }
}
