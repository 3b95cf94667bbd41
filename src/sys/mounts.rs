//! Which mount a path is on, as this process's mount namespace sees it: the line of
//! `/proc/self/mountinfo` whose device is the path's (`stat`'s `st_dev`), the deepest such mount
//! point that is a prefix of the path's real path (a bind mount shows the same device at
//! several places).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo` (proc(5)): what [`mount_of`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted (escapes `\040` etc. decoded).
    pub mount_point: PathBuf,
    /// The filesystem's type, with its subtype (`fuse.glusterfs`, `nfs4`, `ext4`).
    pub fstype: String,
    /// What is mounted (`HOST:/VOLUME` for GlusterFS, `SERVER:/EXPORT` for NFS).
    pub source: String,
    /// The per-superblock options (`rw,vers=4.2,lookupcache=none,...`).
    pub super_options: String,
}

/// The mount holding `path` (which must exist).
pub fn mount_of(path: &Path) -> io::Result<MountEntry> {
    let real = std::fs::canonicalize(path)?;
    let dev = std::fs::metadata(&real)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    best_mount(&table, major, minor, &real).ok_or_else(|| {
        io::Error::other(format!(
            "no line of /proc/self/mountinfo is device {major}:{minor} holding {}",
            real.display()
        ))
    })
}

/// The deepest mount in `table` (mountinfo's text) of device `major:minor` whose mount point
/// holds `real`.
pub fn best_mount(table: &str, major: u32, minor: u32, real: &Path) -> Option<MountEntry> {
    let want = format!("{major}:{minor}");
    table
        .lines()
        .filter_map(parse_line)
        .filter(|(d, e)| *d == want && real.starts_with(&e.mount_point))
        .max_by_key(|(_, e)| e.mount_point.components().count())
        .map(|(_, e)| e)
}

/// `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
fn parse_line(line: &str) -> Option<(String, MountEntry)> {
    let (head, tail) = line.split_once(" - ")?;
    let head: Vec<&str> = head.split(' ').collect();
    let mut tail = tail.split(' ');
    let (fstype, source, super_options) = (tail.next()?, tail.next()?, tail.next().unwrap_or(""));
    Some((
        head.get(2)?.to_string(),
        MountEntry {
            mount_point: PathBuf::from(unescape(head.get(4)?)),
            fstype: unescape(fstype),
            source: unescape(source),
            super_options: unescape(super_options),
        },
    ))
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` (octal).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
73 22 0:40 / /srv/gv rw,relatime - fuse.glusterfs 10.0.0.5:/gv rw,user_id=0,group_id=0,default_permissions,allow_other,max_read=131072
74 22 8:1 /home /srv/gv\\040copy rw shared:3 - ext4 /dev/sda1 rw
";

    #[test]
    fn the_deepest_mount_of_the_paths_device_holds_it() {
        let m = best_mount(TABLE, 0, 40, Path::new("/srv/gv/ws/.vikingfs")).unwrap();
        assert_eq!(m.fstype, "fuse.glusterfs");
        assert_eq!(m.source, "10.0.0.5:/gv");
        assert_eq!(m.mount_point, Path::new("/srv/gv"));
        // Same device as `/`, but the bind mount (with an escaped space) is deeper.
        let m = best_mount(TABLE, 8, 1, Path::new("/srv/gv copy/x")).unwrap();
        assert_eq!(m.mount_point, Path::new("/srv/gv copy"));
        assert_eq!(
            best_mount(TABLE, 8, 1, Path::new("/etc")).unwrap().fstype,
            "ext4"
        );
        assert!(best_mount(TABLE, 0, 41, Path::new("/srv/gv")).is_none());
    }
}
