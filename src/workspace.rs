//! The workspace directory: where the files (the truth) and vikingfs's internals live.
//!
//! Layout, shared with OpenViking (see `shared/design/openviking-compat.md`):
//!
//! ```text
//! WORKSPACE/viking/{account}/{resources,user/{uid},agent}/...   the files
//! WORKSPACE/_system, vectordb/, temp/                           OpenViking's (never touched)
//! WORKSPACE/.vikingfs/                                          vikingfs's internals
//! ```

use std::io;
use std::path::{Path, PathBuf};

use crate::uri::{UriError, VPath};

/// Directory name (beside `viking/`) that holds vikingfs's own files; OpenViking never uses it.
pub const INTERNAL_DIR: &str = ".vikingfs";

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    account: String,
    user: String,
}

impl Workspace {
    /// Open the workspace at `root`, creating it (and the default scopes) when missing.
    pub fn open(root: impl AsRef<Path>, account: &str, user: &str) -> io::Result<Self> {
        for (what, v) in [("account", account), ("user", user)] {
            if v.is_empty() || v.contains('/') || v.contains('\0') || v == "." || v == ".." {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid {what} name {v:?}"),
                ));
            }
        }
        let root = root.as_ref();
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        let ws = Workspace {
            root,
            account: account.to_string(),
            user: user.to_string(),
        };
        let data = ws.data_root();
        for d in [
            data.join("resources"),
            data.join("user").join(user),
            data.join("agent"),
            ws.internal_dir(),
            ws.internal_dir().join("tmp"),
        ] {
            std::fs::create_dir_all(d)?;
        }
        Ok(ws)
    }

    /// This workspace's identity, made at first use (`.vikingfs/workspace-id`): what a shared
    /// store (a PostgreSQL database) is bound to, so two workspaces never mix their derived
    /// state in one database. Every host that mounts the workspace reads the same id.
    pub fn id(&self) -> io::Result<String> {
        let path = self.internal_dir().join("workspace-id");
        let valid = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit());
        match std::fs::read_to_string(&path) {
            Ok(s) if valid(s.trim()) => return Ok(s.trim().to_string()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        // Linked into place only if no other process made one meanwhile: all agree on one.
        let tmp = self.tmp_dir().join(format!("workspace-id.{id}"));
        std::fs::write(&tmp, format!("{id}\n"))?;
        std::fs::File::open(&tmp)?.sync_all()?;
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(id),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let s = std::fs::read_to_string(&path)?;
                if valid(s.trim()) {
                    Ok(s.trim().to_string())
                } else {
                    crate::fsx::replace(
                        &path,
                        format!("{id}\n").as_bytes(),
                        0o644,
                        crate::fsx::Durable::Content,
                    )?;
                    Ok(id)
                }
            }
            Err(e) => Err(e),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    /// `WORKSPACE/viking/{account}`: the directory a [`VPath`] is relative to.
    pub fn data_root(&self) -> PathBuf {
        self.root.join("viking").join(&self.account)
    }

    /// vikingfs's internal directory (queue and index databases, temp files, daemon records).
    pub fn internal_dir(&self) -> PathBuf {
        self.root.join(INTERNAL_DIR)
    }

    /// Scratch space on the same filesystem as the data, so renames out of it are atomic.
    pub fn tmp_dir(&self) -> PathBuf {
        self.internal_dir().join("tmp")
    }

    pub fn queue_db(&self) -> PathBuf {
        self.internal_dir().join("queue.db")
    }

    pub fn index_db(&self) -> PathBuf {
        self.internal_dir().join("index.db")
    }

    /// The file or directory on disk that a path names.
    pub fn fs_path(&self, p: &VPath) -> PathBuf {
        let mut out = self.data_root();
        if !p.is_root() {
            out.push(p.as_str());
        }
        out
    }

    /// OpenViking's AGFS path of a namespace path: `/local/{account}/{path}`. Lock file hashes
    /// are taken over this string.
    pub fn agfs_path(&self, p: &VPath) -> String {
        if p.is_root() {
            format!("/local/{}", self.account)
        } else {
            format!("/local/{}/{}", self.account, p.as_str())
        }
    }

    /// Parse a `viking://` URI in this workspace's user context.
    pub fn parse_uri(&self, uri: &str) -> Result<VPath, UriError> {
        VPath::parse_uri(uri, &self.user)
    }

    /// The namespace path of a file on disk, when it lies under the data root.
    pub fn vpath_of(&self, fs: &Path) -> Option<VPath> {
        let rel = fs.strip_prefix(self.data_root()).ok()?;
        VPath::from_rel(rel.to_str()?).ok()
    }
}

/// Whether `root` holds a workspace: vikingfs's (its `.vikingfs/`) or OpenViking's (its
/// `viking/`). The commands that only read open nothing else, so that a mistyped or missing
/// workspace is never made into one.
pub fn is_workspace(root: &Path) -> bool {
    root.join(INTERNAL_DIR).is_dir() || root.join("viking").is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_layout_and_maps_paths() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
        assert!(ws.data_root().join("resources").is_dir());
        assert!(ws.data_root().join("user/default").is_dir());
        assert!(ws.internal_dir().is_dir());
        let p = ws.parse_uri("viking://resources/a/b.md").unwrap();
        assert_eq!(
            ws.fs_path(&p),
            ws.root().join("viking/default/resources/a/b.md")
        );
        assert_eq!(ws.agfs_path(&p), "/local/default/resources/a/b.md");
        assert_eq!(ws.vpath_of(&ws.fs_path(&p)).unwrap(), p);
        assert!(Workspace::open(dir.path().join("w2"), "../x", "u").is_err());
        // Only a directory with vikingfs's or OpenViking's layout is a workspace.
        assert!(is_workspace(ws.root()));
        std::fs::create_dir_all(dir.path().join("w4/elsewhere")).unwrap();
        assert!(!is_workspace(&dir.path().join("w4")));
        assert!(!is_workspace(&dir.path().join("w5")));
        std::fs::create_dir_all(dir.path().join("w6/viking/default/resources")).unwrap();
        assert!(is_workspace(&dir.path().join("w6")));
    }
}
