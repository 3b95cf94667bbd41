//! The FUSE face: a thin `fuser::Filesystem` over the core in `crate::fs`.
//!
//! Each request is converted, handed to a worker of [`pool::RequestPool`] and answered from there,
//! so the /dev/fuse loop never blocks on a lock wait or slow disk. Calls that take no lock and
//! stat one name are answered on the session thread; so is an unlink whose locks are free at
//! once (`lock::without_waiting`), which otherwise goes to a worker like the rest. Opened files use FUSE
//! passthrough when the kernel offers it (reads and writes go straight to the backing file);
//! otherwise data flows through `read`/`write` here.
//!
//! Each operation names itself once, in its `request::Call`: the request's span, its
//! duration and its errors (logged and counted) come from there; `reply::Answer` turns what
//! the core returned into the reply.

mod backing;
mod convert;
pub mod mount;
pub mod pool;
mod reply;
mod request;

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, Errno, FileHandle, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};

use crate::fs::{without_waiting, AfterReply, Attr, AttrChange, FsResult, RenameMode, VikingFs};
use backing::Backings;
use convert::{dtype_kind, file_attr, owner, timespec};
use pool::RequestPool;
use reply::{Answer, AttrTtl, Io, Opened, Xattr};
use request::Call;

/// How long the kernel may cache names and attributes by default. Short: the workers and
/// other vikingfs commands change the workspace behind the mount, and the kernel hears of
/// those changes only when its cached entry expires (`-o cache_timeout=SECS` changes it).
pub const DEFAULT_TTL: Duration = Duration::from_secs(1);

/// Largest write the kernel sends in one request.
const MAX_WRITE: u32 = 1 << 20;

/// Adapter tuning.
#[derive(Debug, Clone, Copy)]
pub struct FuseOptions {
    /// Ask for FUSE passthrough (kernel ≥ 6.9, root).
    pub passthrough: bool,
    /// Worker threads answering requests.
    pub threads: usize,
    /// How long the kernel may cache names and attributes.
    pub ttl: Duration,
}

impl Default for FuseOptions {
    fn default() -> Self {
        FuseOptions {
            passthrough: true,
            threads: 4,
            ttl: DEFAULT_TTL,
        }
    }
}

struct Shared {
    core: Arc<VikingFs>,
    /// How long the kernel may cache names and attributes.
    ttl: Duration,
    passthrough: AtomicBool,
    backings: Backings,
    /// The session's channel to the kernel for invalidations, set once the session exists.
    notifier: Arc<OnceLock<Notifier>>,
}

impl AttrTtl for Shared {
    fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A file open for writing is never cached: writes through a shared mapping (and, under
    /// passthrough, every write) reach the backing file without a request to us, and a stat
    /// right after the writer unmaps or exits must see their mtime and ctime (xfstests
    /// generic/080, 215), as on a local filesystem.
    fn ttl_of(&self, a: &Attr) -> Duration {
        if a.st.is_file() && self.core.writable_open(a.ino) {
            Duration::ZERO
        } else {
            self.ttl
        }
    }
}

/// The `fuser::Filesystem` of a vikingfs mount.
pub struct FuseFs {
    shared: Arc<Shared>,
    pool: RequestPool,
    want_passthrough: bool,
}

impl FuseFs {
    pub fn new(core: Arc<VikingFs>, opts: FuseOptions) -> Self {
        FuseFs {
            shared: Arc::new(Shared {
                core,
                ttl: opts.ttl,
                passthrough: AtomicBool::new(false),
                backings: Backings::default(),
                notifier: Arc::default(),
            }),
            pool: RequestPool::new(opts.threads),
            want_passthrough: opts.passthrough,
        }
    }

    /// Where the session's notifier goes once the session exists (the filesystem is made
    /// before its session).
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.shared.notifier.clone()
    }

    /// Answer `call` on a worker with what `f` returns: for anything that may wait on a lock
    /// or move data.
    fn run<T, R: Answer<T> + Send + 'static>(
        &self,
        call: Call,
        reply: R,
        f: impl FnOnce(&Shared, &mut R) -> FsResult<T> + Send + 'static,
    ) {
        let s = self.shared.clone();
        self.pool.spawn(move || {
            let _span = call.enter();
            // On behalf of the requester, its tail too (what the history records of it).
            crate::process::on_behalf_of(call.pid(), || {
                // What the operation left for after the reply runs when this drops.
                let _after = AfterReply::begin();
                call.answer(&*s, reply, |r| f(&s, r))
            })
        });
    }

    /// Answer `call` right here on the session thread when `f` takes its locks without
    /// waiting, else on a worker as [`FuseFs::run`] does (`f` runs again there: a lock is the
    /// first thing it waits for, so it changed nothing the first time). For a removal:
    /// `rm -rf` is one unlink after another, each with little to do before its reply, and
    /// the hop to a worker (a wake-up and a context switch on the request's path) was a
    /// large part of it. What the call leaves for after the reply runs here too, while the
    /// other session threads read the next requests.
    fn unless_waiting<T, R: Answer<T> + Send + 'static>(
        &self,
        call: Call,
        reply: R,
        f: impl Fn(&Shared) -> FsResult<T> + Send + 'static,
    ) {
        let s = &self.shared;
        let left = {
            let _span = call.enter();
            crate::process::on_behalf_of(call.pid(), || {
                let _after = AfterReply::begin();
                match without_waiting(|| f(s)) {
                    Some(r) => {
                        call.answer(&**s, reply, |_| r);
                        None
                    }
                    None => Some(reply),
                }
            })
        };
        if let Some(reply) = left {
            self.run(call, reply, move |s, _| f(s));
        }
    }

    /// Answer `call` right here on the session thread: only for calls that never take a lock
    /// and only stat or open one name (lookup, getattr, readlink, access); the hop to a worker
    /// would cost more than the call.
    fn inline<T, R: Answer<T>>(
        &self,
        call: Call,
        reply: R,
        f: impl FnOnce(&Shared) -> FsResult<T>,
    ) {
        let _span = call.enter();
        call.answer(&*self.shared, reply, |_| f(&self.shared))
    }
}

impl Shared {
    /// How the new handle `fh` of `ino` does its I/O; `register` registers a backing file
    /// with the kernel for passthrough (once per inode, shared by its handles).
    fn opened(
        &self,
        fh: u64,
        ino: u64,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<BackingId>,
    ) -> Opened {
        // Every write of such a file takes its lock in the daemon: no passthrough, and no
        // page cache, so an O_APPEND write lands at the file's real end.
        let io = if self.core.daemon_io(ino) {
            Io::Daemon
        } else if !self.passthrough.load(Ordering::Relaxed) {
            Io::Cached
        } else {
            let got = self.backings.get_or(fh, ino, || {
                let fd = self.core.backing_fd(fh).map_err(|_| None)?;
                register(&fd).map_err(Some)
            });
            match got {
                Ok(id) => Io::Passthrough(id),
                Err(None) => Io::Cached,
                Err(Some(e)) => {
                    tracing::warn!(error = %e, "FUSE passthrough refused; serving I/O in userspace");
                    self.passthrough.store(false, Ordering::Relaxed);
                    Io::Cached
                }
            }
        };
        Opened { fh, io }
    }
}

impl fuser::Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        // O_TRUNC reaches open (not a truncate after it): an overwrite is seen as one, and
        // keeps the version it cuts by moving that file aside rather than copying it.
        let _ = config.add_capabilities(
            InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS
                | InitFlags::FUSE_ATOMIC_O_TRUNC,
        );
        // Stack depth 2: the workspace itself may sit on a stacked filesystem (overlayfs in a
        // container); the price is that this mount can't be an overlayfs layer.
        if self.want_passthrough
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(2).is_ok()
        {
            self.shared.passthrough.store(true, Ordering::Relaxed);
        }
        tracing::info!(
            passthrough = self.shared.passthrough.load(Ordering::Relaxed),
            "FUSE session initialised"
        );
        Ok(())
    }

    fn destroy(&mut self) {
        self.pool.finish();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let call = Call::new("lookup", req, parent).name(name);
        self.inline(call, reply, |s| s.core.lookup(parent.0, name));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.core.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let call = Call::new("getattr", req, ino);
        self.inline(call, reply, |s| s.core.getattr(ino.0));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = AttrChange {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(timespec),
            mtime: mtime.map(timespec),
        };
        let call = Call::new("setattr", req, ino);
        self.run(call, reply, move |s, _| s.core.setattr(ino.0, &change));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let call = Call::new("readlink", req, ino);
        self.inline(call, reply, |s| s.core.readlink(ino.0));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let call = Call::new("mknod", req, parent).name(name);
        let (name, who) = (name.to_owned(), owner(req));
        self.run(call, reply, move |s, _| {
            s.core.mknod(parent.0, &name, mode, rdev as u64, who)
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let call = Call::new("mkdir", req, parent).name(name);
        let (name, who) = (name.to_owned(), owner(req));
        self.run(call, reply, move |s, _| {
            s.core.mkdir(parent.0, &name, mode, who)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let call = Call::new("unlink", req, parent).name(name);
        let name = name.to_owned();
        self.unless_waiting(call, reply, move |s| s.core.unlink(parent.0, &name));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let call = Call::new("rmdir", req, parent).name(name);
        let name = name.to_owned();
        self.run(call, reply, move |s, _| s.core.rmdir(parent.0, &name));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let call = Call::new("symlink", req, parent).name(link_name);
        let (name, target, who) = (link_name.to_owned(), target.to_owned(), owner(req));
        self.run(call, reply, move |s, _| {
            s.core.symlink(parent.0, &name, &target, who)
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mode = if flags.is_empty() {
            RenameMode::Replace
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            RenameMode::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            RenameMode::Exchange
        } else {
            reply.error(Errno::EINVAL);
            return;
        };
        let call = Call::new("rename", req, parent).name(name);
        let (name, newname) = (name.to_owned(), newname.to_owned());
        self.run(call, reply, move |s, _| {
            s.core.rename(parent.0, &name, newparent.0, &newname, mode)
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let call = Call::new("link", req, ino).name(newname);
        let newname = newname.to_owned();
        self.run(call, reply, move |s, _| {
            s.core.link(ino.0, newparent.0, &newname)
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let call = Call::new("open", req, ino);
        self.run(call, reply, move |s, reply| {
            let fh = s.core.open(ino.0, flags.0)?;
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                // What the kernel cached before this open may be cached past its writes
                // (see ttl_of); attributes only (offset -1), so no page lock is waited on.
                if let Some(n) = s.notifier.get() {
                    let _ = n.inval_inode(ino, -1, 0);
                }
            }
            Ok(s.opened(fh, ino.0, |fd| reply.open_backing(fd)))
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let call = Call::new("read", req, ino);
        self.run(call, reply, move |s, _| s.core.read(fh.0, offset, size));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let call = Call::new("write", req, ino);
        let data = data.to_vec();
        self.run(call, reply, move |s, _| s.core.write(fh.0, offset, &data));
    }

    /// Nothing to flush: every write reached the file before its reply, and its errors were
    /// reported there. ENOSYS tells the kernel so once (`no_flush`), and close(2) stops costing
    /// a round trip to the daemon (libfuse filesystems without a flush handler, bindfs
    /// among them, do the same).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// No ioctl is implemented: ENOTTY, as a local filesystem answers one it does not know
    /// (fuser's default logs a warning per call and answers ENOSYS: 2,814 lines in one
    /// fsstress run).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        tracing::trace!(cmd, "ioctl: not implemented (ENOTTY)");
        reply.error(Errno::ENOTTY);
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let call = Call::new("release", req, ino);
        self.run(call, reply, move |s, _| {
            s.backings.put(fh.0);
            s.core.release(fh.0)
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let call = Call::new("fsync", req, ino);
        self.run(call, reply, move |s, _| s.core.fsync(fh.0, datasync));
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let call = Call::new("copy_file_range", req, ino_in);
        self.run(call, reply, move |s, _| {
            s.core
                .copy_file_range(fh_in.0, offset_in, fh_out.0, offset_out, len)
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let call = Call::new("fallocate", req, ino);
        self.run(call, reply, move |s, _| {
            s.core.fallocate(fh.0, offset, length, mode)
        });
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        let call = Call::new("lseek", req, ino);
        self.run(call, reply, move |s, _| s.core.lseek(fh.0, offset, whence));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let call = Call::new("opendir", req, ino);
        self.run(call, reply, move |s, _| {
            let fh = s.core.opendir(ino.0)?;
            Ok(Opened { fh, io: Io::Cached })
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let call = Call::new("readdir", req, ino);
        self.run(call, reply, move |s, reply| {
            s.core.readdir(fh.0, offset, |off, e| {
                reply.add(INodeNo(e.ino), off, dtype_kind(e.kind), e.name)
            })
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let call = Call::new("readdirplus", req, ino);
        self.run(call, reply, move |s, reply| {
            let dir = s.core.dir_ino(fh.0).and_then(|d| s.core.getattr(d))?;
            s.core.readdir(fh.0, offset, |off, e| {
                if e.name == "." || e.name == ".." {
                    // The kernel takes no reference for these.
                    let mut a = file_attr(&dir);
                    a.ino = INodeNo(e.ino);
                    return reply.add(INodeNo(e.ino), off, e.name, &s.ttl, &a, Generation(0));
                }
                let Ok(attr) = s.core.lookup_fresh(dir.ino, e.name) else {
                    return false; // gone since opendir
                };
                let full = reply.add(
                    INodeNo(attr.ino),
                    off,
                    e.name,
                    &s.ttl_of(&attr),
                    &file_attr(&attr),
                    Generation(0),
                );
                if full {
                    // Not sent: the kernel holds no reference for it.
                    s.core.forget(attr.ino, 1);
                }
                full
            })
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.core.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let call = Call::new("statfs", req, ino);
        self.run(call, reply, move |s, _| s.core.statfs());
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let call = Call::new("setxattr", req, ino).name(name);
        let (name, value) = (name.to_owned(), value.to_vec());
        self.run(call, reply, move |s, _| {
            s.core.setxattr(ino.0, &name, &value, flags)
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let call = Call::new("getxattr", req, ino).name(name);
        let name = name.to_owned();
        self.run(call, reply, move |s, _| {
            let value = s.core.getxattr(ino.0, &name, size)?;
            Ok(Xattr { size, value })
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let call = Call::new("listxattr", req, ino);
        self.run(call, reply, move |s, _| {
            let value = s.core.listxattr(ino.0, size)?;
            Ok(Xattr { size, value })
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let call = Call::new("removexattr", req, ino).name(name);
        let name = name.to_owned();
        self.run(call, reply, move |s, _| s.core.removexattr(ino.0, &name));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let call = Call::new("access", req, ino);
        self.inline(call, reply, |s| s.core.access(ino.0, mask.bits()));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let call = Call::new("create", req, parent).name(name);
        let (name, who) = (name.to_owned(), owner(req));
        self.run(call, reply, move |s, reply| {
            let (a, fh) = s.core.create(parent.0, &name, mode, flags, who)?;
            let opened = s.opened(fh, a.ino, |fd| reply.open_backing(fd));
            Ok((a, opened))
        });
    }
}
