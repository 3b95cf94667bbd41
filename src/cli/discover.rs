//! Finding the workspace from where a command runs: the vikingfs mounts of this host's mount
//! table (type `fuse.vikingfs`, whose source is the workspace's root), the mount a directory
//! or a path argument lies in, and the namespace path ([`VPath`]) a path under a mount names.
//! [`super::Ctx`] asks this module once per command, so every command finds its workspace and
//! takes mount paths the same way.
//!
//! Paths are resolved lexically against the current directory: looking up a path under a
//! mount goes through its daemon (and hangs or fails on a dead one), so the filesystem is
//! consulted only for a path that lies under no mount as written — its parent's real path
//! finds a symlink into a mount — and never for its last component (`rm LINK` removes the
//! link).

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::fuse::mount;
use crate::uri::{UriError, VPath};

/// A vikingfs mount of this host: where it is and which workspace it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub mountpoint: PathBuf,
    pub workspace: PathBuf,
}

impl Mount {
    /// The namespace path of `abs`, a normalised absolute path under this mount point.
    pub fn vpath(&self, abs: &Path) -> Result<VPath, UriError> {
        let rel = abs.strip_prefix(&self.mountpoint).unwrap_or(abs);
        VPath::from_rel(&rel.to_string_lossy())
    }

    /// The path under this mount of the namespace path `p`.
    pub fn path_of(&self, p: &VPath) -> PathBuf {
        if p.is_root() {
            self.mountpoint.clone()
        } else {
            self.mountpoint.join(p.as_str())
        }
    }

    /// Whether its daemon answers: a mount whose daemon died answers ENOTCONN (or
    /// ECONNABORTED while the kernel tears the connection down) until `umount -l`.
    pub fn dead(&self) -> Option<io::Error> {
        std::fs::metadata(&self.mountpoint)
            .err()
            .filter(|e| matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)))
    }
}

/// Every vikingfs mount in the mount table, in its order.
pub fn mounts() -> Vec<Mount> {
    mount::vikingfs_mounts()
        .into_iter()
        .map(|(mountpoint, workspace)| Mount {
            mountpoint,
            workspace,
        })
        .collect()
}

/// Whether a command argument is a `viking://` URI rather than a filesystem path.
pub fn is_uri(arg: &str) -> bool {
    arg.starts_with("viking://")
}

/// `p` made absolute against the current directory, `.` dropped and `..` taking off the
/// component before it, without looking at the filesystem.
pub fn absolute(p: &Path) -> io::Result<PathBuf> {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

/// The innermost mount `abs` (absolute, normalised) lies in; of mounts stacked on one point,
/// the last (the one on top).
pub fn containing<'a>(mounts: &'a [Mount], abs: &Path) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        let deeper = best
            .is_none_or(|b| m.mountpoint.components().count() >= b.mountpoint.components().count());
        if abs.starts_with(&m.mountpoint) && deeper {
            best = Some(m);
        }
    }
    best
}

/// Where the path argument `arg` lies: its absolute path and the mount it is under, if any.
/// Lexically first; a path under no mount as written is looked for again through its
/// parent's real path (a symlink into a mount), its last component kept as it is.
pub fn locate<'a>(mounts: &'a [Mount], arg: &str) -> io::Result<(PathBuf, Option<&'a Mount>)> {
    let abs = absolute(Path::new(arg))?;
    if let Some(m) = containing(mounts, &abs) {
        return Ok((abs, Some(m)));
    }
    let real = match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => parent.canonicalize().map(|p| p.join(name)),
        _ => abs.canonicalize(),
    };
    match real {
        Ok(real) => match containing(mounts, &real) {
            Some(m) => Ok((real, Some(m))),
            None => Ok((abs, None)),
        },
        Err(_) => Ok((abs, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(mp: &str, ws: &str) -> Mount {
        Mount {
            mountpoint: mp.into(),
            workspace: ws.into(),
        }
    }

    #[test]
    fn paths_normalise_lexically_and_find_their_mount() {
        assert_eq!(
            absolute(Path::new("/mnt/v/./resources/../user//x/")).unwrap(),
            Path::new("/mnt/v/user/x")
        );
        assert_eq!(absolute(Path::new("/../..")).unwrap(), Path::new("/"));
        let rel = absolute(Path::new("a/../b")).unwrap();
        assert_eq!(rel, std::env::current_dir().unwrap().join("b"));

        let all = [m("/mnt/v", "/ws1"), m("/mnt/v/resources/inner", "/ws2")];
        assert_eq!(
            containing(&all, Path::new("/mnt/v/resources/a")),
            Some(&all[0])
        );
        assert_eq!(containing(&all, Path::new("/mnt/v")), Some(&all[0]));
        assert_eq!(
            containing(&all, Path::new("/mnt/v/resources/inner/x")),
            Some(&all[1])
        );
        // A prefix of a name is not a parent.
        assert_eq!(containing(&all, Path::new("/mnt/vv/resources")), None);
        // Stacked on one point: the later one is on top.
        let stacked = [m("/mnt/v", "/old"), m("/mnt/v", "/new")];
        assert_eq!(
            containing(&stacked, Path::new("/mnt/v/x")),
            Some(&stacked[1])
        );

        let mnt = &all[0];
        assert_eq!(
            mnt.vpath(Path::new("/mnt/v/resources/a.md")).unwrap().uri(),
            "viking://resources/a.md"
        );
        assert!(mnt.vpath(Path::new("/mnt/v")).unwrap().is_root());
        assert!(mnt.vpath(Path::new("/mnt/v/elsewhere")).is_err());
        let p = VPath::from_rel("user/default/memories").unwrap();
        assert_eq!(mnt.path_of(&p), Path::new("/mnt/v/user/default/memories"));
        assert_eq!(mnt.path_of(&VPath::root()), Path::new("/mnt/v"));
    }

    #[test]
    fn a_symlink_into_a_mount_is_found_through_its_parent() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir_all(real.join("resources")).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let all = [Mount {
            mountpoint: real.clone(),
            workspace: "/ws".into(),
        }];
        let arg = d.path().join("link/resources/new.md");
        let (abs, found) = locate(&all, arg.to_str().unwrap()).unwrap();
        assert_eq!(found, Some(&all[0]));
        assert_eq!(abs, real.join("resources/new.md"));
        let (_, none) = locate(&all, d.path().join("elsewhere").to_str().unwrap()).unwrap();
        assert_eq!(none, None);
    }
}
