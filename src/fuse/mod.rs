//! The FUSE face: a thin `fuser::Filesystem` over the core in `crate::fs`.
//!
//! Each request is converted, handed to a worker of [`pool::RequestPool`] and answered from there,
//! so the /dev/fuse loop never blocks on a lock wait or slow disk. Opened files use FUSE
//! passthrough when the kernel offers it (reads and writes go straight to the backing file);
//! otherwise data flows through `read`/`write` here.

mod convert;
pub mod mount;
pub mod pool;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, Errno, FileHandle, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::error::Chain;
use crate::fs::{AfterReply, AttrChange, FsError, RenameMode, ToErrno, VikingFs};
use convert::{dtype_kind, file_attr, owner, timespec};
use pool::RequestPool;

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

/// Backing files registered with the kernel for passthrough: one per inode while it is open
/// (the kernel refuses a second, different one), shared by that inode's handles.
#[derive(Default)]
struct Backings {
    by_ino: HashMap<u64, (Arc<BackingId>, usize)>,
    ino_of_fh: HashMap<u64, u64>,
}

struct Shared {
    core: Arc<VikingFs>,
    /// How long the kernel may cache names and attributes.
    ttl: Duration,
    passthrough: AtomicBool,
    backings: Mutex<Backings>,
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
                backings: Mutex::new(Backings::default()),
            }),
            pool: RequestPool::new(opts.threads),
            want_passthrough: opts.passthrough,
        }
    }

    /// Run `f` on a worker with the shared state: for anything that may wait on a lock or
    /// move data.
    fn run(&self, op: &'static str, f: impl FnOnce(&Shared) + Send + 'static) {
        let s = self.shared.clone();
        let took = crate::metrics::get().fuse_requests.with_label_values(&[op]);
        self.pool.spawn(move || {
            // One span per request: every log line of the operation names it.
            let _span = tracing::debug_span!("fuse", op).entered();
            // `f` replies; what its operation left for after the reply runs when this drops.
            let _after = AfterReply::begin();
            crate::metrics::timed(&took, || f(&s))
        });
    }

    /// Run `f` right here on the session thread: only for calls that never take a lock and
    /// only stat or open one name (lookup, getattr, readlink, access); the hop to a worker
    /// would cost more than the call.
    fn inline(&self, op: &'static str, f: impl FnOnce(&Shared)) {
        let took = crate::metrics::get().fuse_requests.with_label_values(&[op]);
        let _span = tracing::debug_span!("fuse", op).entered();
        crate::metrics::timed(&took, || f(&self.shared))
    }
}

/// The errno to answer, logged at the level the error carries: a missing name is debug, a
/// busy lock info, a failing disk a warning, a damaged store an error.
fn errno(op: &'static str, e: FsError) -> Errno {
    crate::error::log_at!(e.level(), op, error = %Chain(&e), "request failed");
    let n = e.errno();
    crate::metrics::get()
        .fuse_errors
        .with_label_values(&[op, &crate::metrics::errno_name(n)])
        .inc();
    Errno::from_i32(n)
}

impl Shared {
    /// Register the handle's backing file with the kernel (once per inode).
    fn backing_for(
        &self,
        fh: u64,
        ino: u64,
        open: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let mut b = self.backings.lock();
        if let Some((id, n)) = b.by_ino.get_mut(&ino) {
            *n += 1;
            let id = id.clone();
            b.ino_of_fh.insert(fh, ino);
            return Some(id);
        }
        let fd = self.core.backing_fd(fh).ok()?;
        match open(&fd) {
            Ok(id) => {
                let id = Arc::new(id);
                b.by_ino.insert(ino, (id.clone(), 1));
                b.ino_of_fh.insert(fh, ino);
                Some(id)
            }
            Err(e) => {
                tracing::warn!(error = %e, "FUSE passthrough refused; serving I/O in userspace");
                self.passthrough.store(false, Ordering::Relaxed);
                None
            }
        }
    }

    fn drop_backing(&self, fh: u64) {
        let mut b = self.backings.lock();
        if let Some(ino) = b.ino_of_fh.remove(&fh) {
            if let Some((_, n)) = b.by_ino.get_mut(&ino) {
                *n -= 1;
                if *n == 0 {
                    b.by_ino.remove(&ino);
                }
            }
        }
    }
}

impl fuser::Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.add_capabilities(
            InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS,
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

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.inline("lookup", move |s| match s.core.lookup(parent.0, name) {
            Ok(a) => reply.entry(&s.ttl, &file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno("lookup", e)),
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.core.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.inline("getattr", move |s| match s.core.getattr(ino.0) {
            Ok(a) => reply.attr(&s.ttl, &file_attr(&a)),
            Err(e) => reply.error(errno("getattr", e)),
        });
    }

    fn setattr(
        &self,
        _req: &Request,
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
        self.run("setattr", move |s| match s.core.setattr(ino.0, &change) {
            Ok(a) => reply.attr(&s.ttl, &file_attr(&a)),
            Err(e) => reply.error(errno("setattr", e)),
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.inline("readlink", move |s| match s.core.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno("readlink", e)),
        });
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
        let (name, who) = (name.to_owned(), owner(req));
        self.run("mknod", move |s| {
            match s.core.mknod(parent.0, &name, mode, rdev as u64, who) {
                Ok(a) => reply.entry(&s.ttl, &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno("mknod", e)),
            }
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
        let (name, who) = (name.to_owned(), owner(req));
        self.run("mkdir", move |s| {
            match s.core.mkdir(parent.0, &name, mode, who) {
                Ok(a) => reply.entry(&s.ttl, &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno("mkdir", e)),
            }
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_owned();
        self.run("unlink", move |s| match s.core.unlink(parent.0, &name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("unlink", e)),
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_owned();
        self.run("rmdir", move |s| match s.core.rmdir(parent.0, &name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("rmdir", e)),
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (name, target, who) = (link_name.to_owned(), target.to_owned(), owner(req));
        self.run("symlink", move |s| {
            match s.core.symlink(parent.0, &name, &target, who) {
                Ok(a) => reply.entry(&s.ttl, &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno("symlink", e)),
            }
        });
    }

    fn rename(
        &self,
        _req: &Request,
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
        let (name, newname) = (name.to_owned(), newname.to_owned());
        self.run("rename", move |s| {
            match s.core.rename(parent.0, &name, newparent.0, &newname, mode) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno("rename", e)),
            }
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let newname = newname.to_owned();
        self.run("link", move |s| {
            match s.core.link(ino.0, newparent.0, &newname) {
                Ok(a) => reply.entry(&s.ttl, &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno("link", e)),
            }
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.run("open", move |s| match s.core.open(ino.0, flags.0) {
            // Every write of such a file takes its lock in the daemon: no passthrough, and no
            // page cache, so an O_APPEND write lands at the file's real end.
            Ok(fh) if s.core.daemon_io(ino.0) => {
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            Ok(fh) => match s.backing_for(fh, ino.0, |fd| reply.open_backing(fd)) {
                Some(id) => reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id),
                None => reply.opened(FileHandle(fh), FopenFlags::empty()),
            },
            Err(e) => reply.error(errno("open", e)),
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.run("read", move |s| match s.core.read(fh.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno("read", e)),
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        self.run("write", move |s| match s.core.write(fh.0, offset, &data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno("write", e)),
        });
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

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.run("release", move |s| {
            s.drop_backing(fh.0);
            match s.core.release(fh.0) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno("release", e)),
            }
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.run("fsync", move |s| match s.core.fsync(fh.0, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("fsync", e)),
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.run("copy_file_range", move |s| {
            match s
                .core
                .copy_file_range(fh_in.0, offset_in, fh_out.0, offset_out, len)
            {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno("copy_file_range", e)),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.run("fallocate", move |s| {
            match s.core.fallocate(fh.0, offset, length, mode) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno("fallocate", e)),
            }
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        self.run("lseek", move |s| match s.core.lseek(fh.0, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(errno("lseek", e)),
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.run("opendir", move |s| match s.core.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno("opendir", e)),
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.run("readdir", move |s| {
            let r = s.core.readdir(fh.0, offset, |off, e| {
                reply.add(INodeNo(e.ino), off, dtype_kind(e.kind), e.name)
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno("readdir", e)),
            }
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.run("readdirplus", move |s| {
            let dir = match s.core.dir_ino(fh.0).and_then(|d| s.core.getattr(d)) {
                Ok(d) => d,
                Err(e) => return reply.error(errno("readdirplus", e)),
            };
            let r = s.core.readdir(fh.0, offset, |off, e| {
                if e.name == "." || e.name == ".." {
                    // The kernel takes no reference for these.
                    let mut a = file_attr(&dir);
                    a.ino = INodeNo(e.ino);
                    return reply.add(INodeNo(e.ino), off, e.name, &s.ttl, &a, Generation(0));
                }
                let Ok(attr) = s.core.lookup(dir.ino, e.name) else {
                    return false; // gone since opendir
                };
                let full = reply.add(
                    INodeNo(attr.ino),
                    off,
                    e.name,
                    &s.ttl,
                    &file_attr(&attr),
                    Generation(0),
                );
                if full {
                    // Not sent: the kernel holds no reference for it.
                    s.core.forget(attr.ino, 1);
                }
                full
            });
            if let Err(e) = r {
                return reply.error(errno("readdirplus", e));
            }
            reply.ok()
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

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.run("statfs", move |s| match s.core.statfs() {
            Ok(v) => reply.statfs(
                v.f_blocks,
                v.f_bfree,
                v.f_bavail,
                v.f_files,
                v.f_ffree,
                v.f_bsize as u32,
                v.f_namemax as u32,
                v.f_frsize as u32,
            ),
            Err(e) => reply.error(errno("statfs", e)),
        });
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (name, value) = (name.to_owned(), value.to_vec());
        self.run("setxattr", move |s| {
            match s.core.setxattr(ino.0, &name, &value, flags) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno("setxattr", e)),
            }
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name.to_owned();
        self.run("getxattr", move |s| {
            match s.core.getxattr(ino.0, &name, size) {
                Ok(v) if size == 0 => reply.size(v.len() as u32),
                Ok(v) => reply.data(&v),
                Err(e) => reply.error(errno("getxattr", e)),
            }
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.run("listxattr", move |s| match s.core.listxattr(ino.0, size) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno("listxattr", e)),
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_owned();
        self.run("removexattr", move |s| {
            match s.core.removexattr(ino.0, &name) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno("removexattr", e)),
            }
        });
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.inline("access", move |s| match s.core.access(ino.0, mask.bits()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("access", e)),
        });
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
        let (name, who) = (name.to_owned(), owner(req));
        self.run("create", move |s| {
            match s.core.create(parent.0, &name, mode, flags, who) {
                Ok((a, fh)) if s.core.daemon_io(a.ino) => reply.created(
                    &s.ttl,
                    &file_attr(&a),
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::FOPEN_DIRECT_IO,
                ),
                Ok((a, fh)) => {
                    let attr = file_attr(&a);
                    match s.backing_for(fh, a.ino, |fd| reply.open_backing(fd)) {
                        Some(id) => reply.created_passthrough(
                            &s.ttl,
                            &attr,
                            Generation(0),
                            FileHandle(fh),
                            FopenFlags::empty(),
                            &id,
                        ),
                        None => reply.created(
                            &s.ttl,
                            &attr,
                            Generation(0),
                            FileHandle(fh),
                            FopenFlags::empty(),
                        ),
                    }
                }
                Err(e) => reply.error(errno("create", e)),
            }
        });
    }
}
