//! What a `stat` says, in the few terms callers ask ([`StatExt`]), and the timestamps
//! `utimensat` sets ([`TimeSpec`]).

use rustix::fs::{FileType, Stat, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};

/// A time as a `stat` holds it: seconds and nanoseconds since the epoch.
pub type Time = (i64, i64);

/// The questions asked of a [`Stat`].
pub trait StatExt {
    fn file_type(&self) -> FileType;

    fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    /// (device, inode): what names one file on this system.
    fn key(&self) -> (u64, u64);

    fn atime(&self) -> Time;
    fn mtime(&self) -> Time;
    fn ctime(&self) -> Time;
    fn set_mtime(&mut self, t: Time);
    fn set_ctime(&mut self, t: Time);

    /// Modification time in nanoseconds since the epoch.
    fn mtime_ns(&self) -> u64 {
        let (s, ns) = self.mtime();
        (s as u64).saturating_mul(1_000_000_000) + ns as u64
    }
}

impl StatExt for Stat {
    fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.st_mode)
    }

    fn key(&self) -> (u64, u64) {
        (self.st_dev, self.st_ino)
    }

    fn atime(&self) -> Time {
        (self.st_atime, self.st_atime_nsec as i64)
    }

    fn mtime(&self) -> Time {
        (self.st_mtime, self.st_mtime_nsec as i64)
    }

    fn ctime(&self) -> Time {
        (self.st_ctime, self.st_ctime_nsec as i64)
    }

    fn set_mtime(&mut self, (s, ns): Time) {
        (self.st_mtime, self.st_mtime_nsec) = (s, ns as _);
    }

    fn set_ctime(&mut self, (s, ns): Time) {
        (self.st_ctime, self.st_ctime_nsec) = (s, ns as _);
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
