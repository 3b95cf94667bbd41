//! Whether the filesystem a workspace is on is safe for several hosts: what a daemon checks at
//! its start (`vikingfs mount`, `vikingfs serve`) when its stores are on PostgreSQL, which is
//! how hosts share a workspace (docs/several-hosts.md).
//!
//! The lock protocol (`lock/provider.rs`: exclusive create, compare-and-swap of a lock file's
//! token) and every journalled operation need, from the files that the hosts share:
//! - `O_EXCL` create answering `EEXIST` for a name that exists, `link(2)` refusing an existing
//!   name, `rename(2)` replacing a name in one step;
//! - a change made on one host seen at once on every other: no cached lookup (a freed lock file
//!   that still looks taken, a new one that looks absent), no cached attributes or pages (a
//!   token read stale, so that two hosts both "win" a compare-and-swap).
//!
//! The first three are tried here on the workspace itself ([`primitives`]). The second cannot
//! be seen from one host; a client's caches are its mount's settings, so a filesystem whose
//! settings are known is judged by them: GlusterFS by its client's own account of itself (the
//! `.meta` directory at the root of every GlusterFS FUSE mount: the client's options and the
//! translators of its active graph, which are the volume's `performance.*` options), NFS by its
//! mount options, JuiceFS by its known bug. A refusal is one line that names each setting to
//! change. A filesystem of one kernel (ext4, xfs, tmpfs, a bind mount) is coherent by itself.
//!
//! Invariant: no daemon over PostgreSQL starts on a filesystem found wanting; what this cannot
//! see (an unknown network filesystem's caches) is the operator's, as docs/several-hosts.md says.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::sys::{self, MountEntry};

/// Why a workspace's filesystem is not safe for several hosts: one line, each setting named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsafe(pub String);

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refusing a workspace shared through PostgreSQL on {}; see docs/several-hosts.md",
            self.0
        )
    }
}

impl std::error::Error for Unsafe {}

/// Check the filesystem of the workspace at `root` (its internal directory `internal`, where
/// the probe's files are made and removed).
pub fn check(root: &Path, internal: &Path) -> Result<(), Unsafe> {
    std::fs::create_dir_all(internal)
        .map_err(|e| Unsafe(format!("{}: {e}", internal.display())))?;
    let m = sys::mount_of(root)
        .map_err(|e| Unsafe(format!("{}: cannot tell its mount: {e}", root.display())))?;
    let at = || format!("{} ({} at {})", m.fstype, m.source, m.mount_point.display());
    let findings = match m.fstype.as_str() {
        "fuse.glusterfs" => gluster(&m)?,
        "nfs" | "nfs4" => nfs_findings(&m.super_options),
        "fuse.juicefs" => vec![
            "JuiceFS: two clients renaming onto one name get EIO (juicedata/juicefs#5728), \
             which the lock protocol cannot survive"
                .to_string(),
        ],
        _ => Vec::new(),
    };
    if !findings.is_empty() {
        return Err(Unsafe(format!("{}: {}", at(), findings.join(", "))));
    }
    primitives(internal).map_err(|e| Unsafe(format!("{}: {e}", at())))
}

/// What each GlusterFS performance translator is called among the volume's options.
const GLUSTER_CACHES: &[(&str, &str)] = &[
    ("performance/quick-read", "performance.quick-read"),
    ("performance/io-cache", "performance.io-cache"),
    ("performance/open-behind", "performance.open-behind"),
    ("performance/write-behind", "performance.write-behind"),
    ("performance/md-cache", "performance.stat-prefetch"),
    ("performance/read-ahead", "performance.read-ahead"),
    ("performance/readdir-ahead", "performance.readdir-ahead"),
    ("performance/nl-cache", "performance.nl-cache"),
    (
        "performance/parallel-readdir",
        "performance.parallel-readdir",
    ),
];

/// A GlusterFS FUSE mount's settings, as its client reports them under `MOUNT/.meta`.
fn gluster(m: &MountEntry) -> Result<Vec<String>, Unsafe> {
    let meta = m.mount_point.join(".meta");
    let unreadable = |what: &Path, e: std::io::Error| {
        Unsafe(format!(
            "GlusterFS ({} at {}): cannot read the client's settings in {}: {e}",
            m.source,
            m.mount_point.display(),
            what.display()
        ))
    };
    let opts_dir = meta.join("root/options");
    let mut options = BTreeMap::new();
    for e in std::fs::read_dir(&opts_dir).map_err(|e| unreadable(&opts_dir, e))? {
        let e = e.map_err(|e| unreadable(&opts_dir, e))?;
        let v = std::fs::read_to_string(e.path()).map_err(|err| unreadable(&e.path(), err))?;
        options.insert(
            e.file_name().to_string_lossy().into_owned(),
            v.trim().to_string(),
        );
    }
    let graph = meta.join("graphs/active");
    let mut types = Vec::new();
    for e in std::fs::read_dir(&graph).map_err(|e| unreadable(&graph, e))? {
        let e = e.map_err(|e| unreadable(&graph, e))?;
        // Not every entry is a translator (`volfile` is a file).
        if let Ok(t) = std::fs::read_to_string(e.path().join("type")) {
            types.push(t.trim().to_string());
        }
    }
    let volume = m.source.rsplit_once(":/").map_or("VOLUME", |(_, v)| v);
    Ok(gluster_findings(&options, &types, volume))
}

/// What is unsafe in a GlusterFS client's `options` (`.meta/root/options`: the FUSE bridge's
/// options as set) and its graph's translator `types`, for volume `volume`.
pub fn gluster_findings(
    options: &BTreeMap<String, String>,
    types: &[String],
    volume: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for (ty, option) in GLUSTER_CACHES {
        if types.iter().any(|t| t == ty) {
            out.push(format!(
                "{option} is on (gluster volume set {volume} {option} off)"
            ));
        }
    }
    // Absent, a timeout is the FUSE bridge's default: 1 s for attributes and entries.
    for name in ["attribute-timeout", "entry-timeout", "negative-timeout"] {
        let v = options.get(name).map(String::as_str);
        let zero = v.is_some_and(|v| v.parse::<f64>() == Ok(0.0))
            || (name == "negative-timeout" && v.is_none());
        if !zero {
            out.push(format!(
                "the client's {name} is {} s, not 0 (mount option {name}=0)",
                v.unwrap_or("1")
            ));
        }
    }
    // Pages kept across opens (on by default where the kernel can invalidate them, which it
    // does only when it sees mtime or size change) are read stale after another host's
    // rewrite; direct I/O keeps no pages at all.
    let off = |v: Option<&String>| {
        v.is_some_and(|v| matches!(v.as_str(), "off" | "false" | "no" | "0" | "disable"))
    };
    let on = |v: Option<&String>| {
        v.is_some_and(|v| matches!(v.as_str(), "on" | "true" | "yes" | "1" | "enable"))
    };
    if !off(options.get("fopen-keep-cache")) && !on(options.get("direct-io-mode")) {
        out.push(
            "the client keeps pages across opens (glusterfs --fopen-keep-cache=off, \
             or mount option direct-io-mode=enable)"
                .to_string(),
        );
    }
    out
}

/// What is unsafe in an NFS mount's options (mountinfo's per-superblock options): cached
/// lookups (`lookupcache=none` turns them off) and cached attributes (`actimeo=0`, shown as
/// `acregmin=0,acregmax=0,acdirmin=0,acdirmax=0`, or `noac`).
pub fn nfs_findings(super_options: &str) -> Vec<String> {
    let opts: Vec<&str> = super_options.split(',').collect();
    let mut out = Vec::new();
    if !opts.contains(&"lookupcache=none") {
        out.push("lookups are cached (mount option lookupcache=none)".to_string());
    }
    let zero = ["acregmin", "acregmax", "acdirmin", "acdirmax"]
        .iter()
        .all(|k| opts.contains(&format!("{k}=0").as_str()));
    if !zero && !opts.contains(&"noac") {
        out.push("attributes are cached (mount option actimeo=0)".to_string());
    }
    out
}

/// Try, in `dir`, what the lock protocol does to lock files: an exclusive create that a second
/// one finds taken, a link that refuses an existing name, a rename that replaces one, and the
/// replacement read through a new handle. The probe's files are removed whatever happens.
pub fn primitives(dir: &Path) -> Result<(), String> {
    use std::io::{Read, Write};
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = |s: &str| dir.join(format!(".probe-{}-{stamp}.{s}", std::process::id()));
    let (a, b, c) = (name("a"), name("b"), name("c"));
    struct Gone(Vec<PathBuf>);
    impl Drop for Gone {
        fn drop(&mut self) {
            for p in &self.0 {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    let _gone = Gone(vec![a.clone(), b.clone(), c.clone()]);
    let create = |p: &Path, text: &str| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)?;
        f.write_all(text.as_bytes())
    };
    create(&a, "first").map_err(|e| format!("an exclusive create failed: {e}"))?;
    match create(&a, "second") {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(format!(
                "a second exclusive create failed with {e}, not EEXIST"
            ))
        }
        Ok(()) => return Err("a second exclusive create of one name succeeded".to_string()),
    }
    std::fs::hard_link(&a, &b).map_err(|e| format!("link(2) failed: {e}"))?;
    match std::fs::hard_link(&a, &b) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(format!(
                "link(2) onto an existing name failed with {e}, not EEXIST"
            ))
        }
        Ok(()) => return Err("link(2) onto an existing name succeeded".to_string()),
    }
    create(&c, "replaced").map_err(|e| format!("an exclusive create failed: {e}"))?;
    std::fs::rename(&c, &a).map_err(|e| format!("rename(2) over a name failed: {e}"))?;
    let mut text = String::new();
    std::fs::File::open(&a)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| format!("reading a renamed file: {e}"))?;
    if text != "replaced" || c.exists() {
        return Err(format!(
            "rename(2) over a name left {text:?} under it (and its source {})",
            if c.exists() { "still there" } else { "gone" }
        ));
    }
    // The link still names the first file: a lock file's token and its link agree.
    let mut text = String::new();
    std::fs::File::open(&b)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| format!("reading a link: {e}"))?;
    if text != "first" {
        return Err(format!("a link reads {text:?}, not what its file held"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn gluster_with_its_defaults_is_refused_setting_by_setting() {
        // A Debian 10.3 volume as created, mounted with `mount -t glusterfs` and no option.
        let types: Vec<String> = [
            "debug/io-stats",
            "performance/md-cache",
            "performance/open-behind",
            "performance/quick-read",
            "performance/write-behind",
            "protocol/client",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let found = gluster_findings(&opts(&[("negative-timeout", "0.000000")]), &types, "gv");
        let text = found.join(", ");
        for want in [
            "performance.stat-prefetch is on (gluster volume set gv performance.stat-prefetch off)",
            "performance.open-behind",
            "performance.quick-read",
            "performance.write-behind",
            "attribute-timeout is 1 s",
            "entry-timeout is 1 s",
            "--fopen-keep-cache=off",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(!text.contains("negative-timeout"), "{text}");
    }

    #[test]
    fn gluster_with_the_coherence_settings_is_accepted() {
        let types = vec![
            "debug/io-stats".to_string(),
            "performance/io-threads".to_string(),
        ];
        let zero = [
            ("attribute-timeout", "0.000000"),
            ("entry-timeout", "0.000000"),
            ("negative-timeout", "0.000000"),
        ];
        let mut keep_off = zero.to_vec();
        keep_off.push(("fopen-keep-cache", "off"));
        assert_eq!(
            gluster_findings(&opts(&keep_off), &types, "gv"),
            Vec::<String>::new()
        );
        let mut direct = zero.to_vec();
        direct.push(("direct-io-mode", "enable"));
        assert_eq!(
            gluster_findings(&opts(&direct), &types, "gv"),
            Vec::<String>::new()
        );
        // One timeout left at a second is named alone.
        let mut late = keep_off.clone();
        late[0] = ("attribute-timeout", "1.000000");
        let found = gluster_findings(&opts(&late), &types, "gv");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("attribute-timeout=0"), "{found:?}");
    }

    #[test]
    fn nfs_needs_lookupcache_none_and_no_attribute_cache() {
        let defaults = "rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp";
        assert_eq!(nfs_findings(defaults).len(), 2);
        let safe =
            format!("{defaults},acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,lookupcache=none");
        assert!(nfs_findings(&safe).is_empty());
        assert!(nfs_findings(&format!("{defaults},noac,lookupcache=none")).is_empty());
        let pos = format!("{defaults},noac,lookupcache=pos");
        assert!(nfs_findings(&pos)[0].contains("lookupcache=none"));
    }

    #[test]
    fn a_local_directory_passes_the_primitives_and_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        primitives(dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
