//! What a `stat` says ([`Stat`]), and the timestamps `utimensat` sets ([`TimeSpec`]).

use rustix::fs::{FileType, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};

/// A time as a `stat` holds it: seconds and nanoseconds since the epoch.
pub type Time = (i64, i64);

/// What `stat` says about a file: the kernel's record (its fields through `Deref`), and the
/// few questions callers ask of it.
#[derive(Debug, Clone, Copy)]
pub struct Stat(pub rustix::fs::Stat);

impl Stat {
    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.st_mode)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    /// (device, inode): what names one file on this system.
    pub fn key(&self) -> (u64, u64) {
        (self.st_dev, self.st_ino)
    }

    pub fn atime(&self) -> Time {
        (self.st_atime, self.st_atime_nsec as i64)
    }

    pub fn mtime(&self) -> Time {
        (self.st_mtime, self.st_mtime_nsec as i64)
    }

    pub fn ctime(&self) -> Time {
        (self.st_ctime, self.st_ctime_nsec as i64)
    }

    pub fn set_mtime(&mut self, (s, ns): Time) {
        (self.0.st_mtime, self.0.st_mtime_nsec) = (s, ns as _);
    }

    pub fn set_ctime(&mut self, (s, ns): Time) {
        (self.0.st_ctime, self.0.st_ctime_nsec) = (s, ns as _);
    }

    /// Modification time in nanoseconds since the epoch.
    pub fn mtime_ns(&self) -> u64 {
        let (s, ns) = self.mtime();
        (s as u64).saturating_mul(1_000_000_000) + ns as u64
    }
}

impl std::ops::Deref for Stat {
    type Target = rustix::fs::Stat;

    fn deref(&self) -> &rustix::fs::Stat {
        &self.0
    }
}

impl std::ops::DerefMut for Stat {
    fn deref_mut(&mut self) -> &mut rustix::fs::Stat {
        &mut self.0
    }
}

/// A timestamp to set: now, or seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSpec {
    Now,
    At(i64, u32),
}

/// What `utimensat` takes for an access and a modification time; `None` leaves it
/// (UTIME_OMIT).
pub(super) fn timestamps(atime: Option<TimeSpec>, mtime: Option<TimeSpec>) -> Timestamps {
    let conv = |t: Option<TimeSpec>| match t {
        None => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        Some(TimeSpec::Now) => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        Some(TimeSpec::At(s, ns)) => Timespec {
            tv_sec: s,
            tv_nsec: ns.into(),
        },
    };
    Timestamps {
        last_access: conv(atime),
        last_modification: conv(mtime),
    }
}

/// When the file at `p` was created (statx's birth time, milliseconds since the epoch);
/// `None` where the filesystem does not record it.
pub fn birth_ms(p: &std::path::Path) -> Option<i64> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        p,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BTIME,
    )
    .ok()?;
    if st.stx_mask & StatxFlags::BTIME.bits() == 0 {
        return None;
    }
    Some(st.stx_btime.tv_sec * 1000 + i64::from(st.stx_btime.tv_nsec / 1_000_000))
}
