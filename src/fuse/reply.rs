//! How each of fuser's replies answers what the core returned.

use std::sync::Arc;
use std::time::Duration;

use fuser::{
    BackingId, Errno, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr,
};

use super::convert::file_attr;
use crate::fs::{Attr, StatFs};

/// How long the kernel may cache names, and an inode's attributes.
pub(super) trait AttrTtl {
    /// A name's entry.
    fn ttl(&self) -> Duration;
    /// The attributes `a`.
    fn ttl_of(&self, a: &Attr) -> Duration;
}

/// A reply that answers a `T` (`ttl`: how long the kernel may cache what it is told).
pub(super) trait Answer<T> {
    fn ok(self, ttl: &dyn AttrTtl, v: T);
    fn fail(self, e: Errno);
}

/// An opened file handle and how its I/O goes.
pub(super) struct Opened {
    pub fh: u64,
    pub io: Io,
}

pub(super) enum Io {
    /// Every read and write through the daemon, no page cache (FOPEN_DIRECT_IO).
    Daemon,
    /// Through the page cache, reads and writes from it through the daemon.
    Cached,
    /// Straight to the backing file, in the kernel.
    Passthrough(Arc<BackingId>),
}

impl Io {
    fn flags(&self) -> FopenFlags {
        match self {
            Io::Daemon => FopenFlags::FOPEN_DIRECT_IO,
            Io::Cached | Io::Passthrough(_) => FopenFlags::empty(),
        }
    }
}

/// What a getxattr or listxattr asked for (its size: 0 for the length only) and got.
pub(super) struct Xattr {
    pub size: u32,
    pub value: Vec<u8>,
}

macro_rules! answers {
    ($($reply:ty: $t:ty => |$r:ident, $ttl:pat_param, $v:pat_param| $body:expr;)*) => {$(
        impl Answer<$t> for $reply {
            fn ok(self, $ttl: &dyn AttrTtl, $v: $t) {
                let $r = self;
                $body
            }
            fn fail(self, e: Errno) {
                self.error(e)
            }
        }
    )*};
}

answers! {
    ReplyEntry: Attr => |r, ttl, a| {
        r.entry_with_ttls(&ttl.ttl_of(&a), &ttl.ttl(), &file_attr(&a), Generation(0))
    };
    ReplyAttr: Attr => |r, ttl, a| r.attr(&ttl.ttl_of(&a), &file_attr(&a));
    ReplyData: Vec<u8> => |r, _, d| r.data(&d);
    ReplyEmpty: () => |r, _, ()| r.ok();
    ReplyWrite: u32 => |r, _, n| r.written(n);
    ReplyLseek: i64 => |r, _, o| r.offset(o);
    ReplyDirectory: () => |r, _, ()| r.ok();
    ReplyDirectoryPlus: () => |r, _, ()| r.ok();
    ReplyXattr: Xattr => |r, _, x| match x.size {
        0 => r.size(x.value.len() as u32),
        _ => r.data(&x.value),
    };
    ReplyStatfs: StatFs => |r, _, v| r.statfs(
        v.f_blocks,
        v.f_bfree,
        v.f_bavail,
        v.f_files,
        v.f_ffree,
        v.f_bsize as u32,
        v.f_namemax as u32,
        v.f_frsize as u32,
    );
    ReplyOpen: Opened => |r, _, o| match &o.io {
        Io::Passthrough(id) => r.opened_passthrough(FileHandle(o.fh), o.io.flags(), id),
        io => r.opened(FileHandle(o.fh), io.flags()),
    };
    ReplyCreate: (Attr, Opened) => |r, ttl, (a, o)| {
        let (attr, fh, flags) = (file_attr(&a), FileHandle(o.fh), o.io.flags());
        // One TTL for the name and the attributes: the name's. What this handle writes
        // through a mapping is not seen by a stat before the TTL has passed.
        let ttl = ttl.ttl();
        match &o.io {
            Io::Passthrough(id) => r.created_passthrough(&ttl, &attr, Generation(0), fh, flags, id),
            _ => r.created(&ttl, &attr, Generation(0), fh, flags),
        }
    };
}
