//! Temporary uploads for add-resource (`POST /api/v1/resources/temp_upload`), and the safe
//! unpacking of a zipped directory, which is how OpenViking's SDK and `ov` send one.
//!
//! - Only a client's zip of a directory is unpacked, known by the name the client gives it
//!   ([`is_directory_zip_name`]); every other upload is stored byte for byte as the file it
//!   is, zip containers (.docx, .epub, .jar, a user's .zip) included.
//! - An upload is kept under a private directory of this process in the system's temporary
//!   directory (`vikingfs-uploads-PID-*`, mode 0700; directories of dead processes are swept
//!   when the first upload arrives), named `upload_HEX.EXT` as OpenViking names them, bound
//!   to the account and user that sent it, used once, and forgotten after [`KEEP`]. Not in
//!   the workspace: add-resource refuses a source inside it.
//! - A zip is unpacked component by component, each name checked as a namespace name (no
//!   `..`, no absolute path, no NUL, no internal name, at most `NAME_MAX` bytes), symlinks and
//!   encrypted entries refused, no file written twice.
//! - An unpack is held to a [`Budget`] fixed before it starts: at most
//!   `server.max_unpacked_entries` entries and `server.max_unpacked_bytes` bytes, and never
//!   more than each filesystem it lands on (the uploads' and the workspace's, which the add
//!   copies it to) has free above the history's pressure line ([`crate::ops::pressure_line`]),
//!   shared between them when they are one. Bytes are counted as they are decompressed, never
//!   taken from the sizes the archive declares, and a chunk that would pass the budget is
//!   not written: a bomb leaves at most the budget on disk; and the free space is looked at
//!   again before each chunk (other unpacks and writers run meanwhile). A refused or
//!   failed unpack removes what it wrote before it answers (413, as OpenViking answers an
//!   upload over its size limit).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;

use crate::ops::OpsError;
use crate::server::auth::Identity;
use crate::server::reply::{ApiError, Code};

/// How long an upload waits to be added.
pub const KEEP: Duration = Duration::from_secs(3600);

/// One upload, until it is added.
pub struct Upload {
    pub path: PathBuf,
    /// The file name the client sent.
    pub original: String,
    account: String,
    user: String,
    /// When it was complete (`None` while it is being received).
    ready: Option<Instant>,
}

pub struct Uploads {
    dir: tempfile::TempDir,
    held: Mutex<HashMap<String, Upload>>,
}

static UPLOADS: OnceLock<Result<Uploads, String>> = OnceLock::new();

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("temporary uploads: {e}"))
}

/// Mode 0700: uploads are bound to the user who sent them, and nobody else on the host reads
/// them either.
fn private() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(0o700)
}

/// This process's uploads.
pub fn uploads() -> Result<&'static Uploads, ApiError> {
    UPLOADS
        .get_or_init(|| {
            sweep_dead();
            // 0700 spelled out: tempfile leaves a directory's mode to the umask.
            tempfile::Builder::new()
                .prefix(&format!("vikingfs-uploads-{}-", std::process::id()))
                .permissions(private())
                .tempdir()
                .map(|dir| Uploads {
                    dir,
                    held: Mutex::new(HashMap::new()),
                })
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(internal)
}

/// Remove the upload directories of processes that are gone (ours: by uid).
fn sweep_dead() {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix("vikingfs-uploads-"))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let mine = e
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == crate::sys::euid());
        if mine && !crate::sys::pid_alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `upload_HEX.EXT`: OpenViking's shape (the extension kept, when it is a plain one).
fn new_id(original: &str) -> String {
    let ext = Path::new(original)
        .extension()
        .and_then(|e| e.to_str())
        .filter(|e| !e.is_empty() && e.len() <= 16 && e.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(|e| format!(".{}", e.to_ascii_lowercase()))
        .unwrap_or_default();
    format!("upload_{}{ext}", uuid::Uuid::new_v4().simple())
}

impl Uploads {
    /// A fresh private directory to stage an add in (removed when dropped).
    pub fn staging(&self) -> Result<tempfile::TempDir, ApiError> {
        tempfile::Builder::new()
            .prefix("add-")
            .permissions(private())
            .tempdir_in(self.dir.path())
            .map_err(internal)
    }

    /// A new file for an upload from `who` named `original`: its id and the file to fill.
    pub fn create(
        &self,
        who: &Identity,
        original: &str,
    ) -> Result<(String, std::fs::File), ApiError> {
        self.expire();
        let id = new_id(original);
        let path = self.dir.path().join(&id);
        // 0644 whatever the daemon's umask: add-resource keeps a file's mode.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(internal)?;
        self.held.lock().insert(
            id.clone(),
            Upload {
                path,
                original: original.to_string(),
                account: who.account.clone(),
                user: who.user.clone(),
                ready: None,
            },
        );
        Ok((id, file))
    }

    /// The upload `id` is complete: it may be added from now on, for [`KEEP`].
    pub fn done(&self, id: &str) {
        if let Some(u) = self.held.lock().get_mut(id) {
            u.ready = Some(Instant::now());
        }
    }

    /// Forget upload `id` (a failed one).
    pub fn drop_upload(&self, id: &str) {
        // Its file goes with it (`Drop for Upload`).
        self.held.lock().remove(id);
    }

    /// Take upload `id` for `who` to add (once): an id this server did not issue to `who`
    /// (another user's, one used or expired, one never issued) is `PERMISSION_DENIED`, as
    /// OpenViking's temp upload store refuses an id it cannot resolve.
    pub fn take(&self, id: &str, who: &Identity) -> Result<Upload, ApiError> {
        self.expire();
        let mut held = self.held.lock();
        let mine = held
            .get(id)
            .is_some_and(|u| u.account == who.account && u.user == who.user && u.ready.is_some());
        if !mine {
            return Err(ApiError::new(
                Code::PermissionDenied,
                format!(
                    "Temporary upload {id} is invalid or expired: HTTP server only accepts \
                         temp_file_id values issued from the upload temp directory."
                ),
            )
            .with_details(json!({ "resource": id, "type": "temp_upload" })));
        }
        Ok(held.remove(id).expect("checked"))
    }

    fn expire(&self) {
        self.held
            .lock()
            .retain(|_, u| u.ready.is_none_or(|t| t.elapsed() < KEEP));
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether an upload named `original` is a client's zip of a directory, the only upload that
/// is unpacked: OpenViking's SDK names the zip it makes of a directory
/// `temp_upload_<uuid4 hex>.zip` (`openviking_sdk/uploads.py`, `zip_directory`), and `ov`
/// uploads the `tempfile` crate's `.tmpXXXXXX.zip` (six alphanumerics, its `zip_directory`
/// with `Builder::new().suffix(".zip")`). Any other name is a file the user chose, kept as it
/// is even when its bytes are a zip (a .docx, .epub, .jar or .zip is a document, not a
/// directory): OpenViking's server unpacks by the `.zip` extension alone, which would turn a
/// user's own archive into a directory that cannot be downloaded back.
pub fn is_directory_zip_name(original: &str) -> bool {
    let Some(stem) = original.strip_suffix(".zip") else {
        return false;
    };
    let sdk = stem.strip_prefix("temp_upload_").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    });
    let ov = stem
        .strip_prefix(".tmp")
        .is_some_and(|r| r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric()));
    sdk || ov
}

/// Whether the file at `path` is a zip archive (its first four bytes).
pub fn is_zip(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"PK\x03\x04"
}

fn bad_zip(msg: impl Into<String>) -> ApiError {
    ApiError::invalid(format!("uploaded archive: {}", msg.into()))
}

/// What an unpack may write (module doc).
#[derive(Debug, Clone)]
pub struct Budget {
    /// Bytes, decompressed.
    pub bytes: u64,
    /// Entries, files and directories.
    pub entries: usize,
    /// Why `bytes` is what it is, for the refusal's message.
    why: String,
}

/// Free bytes above the pressure line on the filesystem holding `path` (`None`: unknown).
fn room(path: &Path) -> Option<u64> {
    let st = crate::sys::statvfs(path).ok()?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let total = st.f_blocks.saturating_mul(st.f_frsize);
    Some(free.saturating_sub(crate::ops::pressure_line(total)))
}

impl Budget {
    /// The budget of an unpack of at most `max_bytes` and `max_entries`, whose bytes land on
    /// the filesystem of each of `disks` (one room shared by the disks on one filesystem).
    pub fn new(max_bytes: u64, max_entries: usize, disks: &[&Path]) -> Budget {
        use std::os::unix::fs::MetadataExt;
        let mut b = Budget {
            bytes: max_bytes,
            entries: max_entries,
            why: format!("{max_bytes} bytes (server.max_unpacked_bytes)"),
        };
        let devs: Vec<Option<u64>> = disks
            .iter()
            .map(|d| std::fs::metadata(d).ok().map(|m| m.dev()))
            .collect();
        for (d, dev) in disks.iter().zip(&devs) {
            let Some(r) = room(d) else { continue };
            let sharing = devs.iter().filter(|o| dev.is_some() && *o == dev).count();
            let r = r / sharing.max(1) as u64;
            if r < b.bytes {
                b.bytes = r;
                b.why = format!(
                    "{r} bytes, what {} has free above the space kept for the history",
                    d.display()
                );
            }
        }
        b
    }
}

/// An archive over its budget: 413, as OpenViking's oversized upload.
fn too_large(what: String, budget: &Budget) -> ApiError {
    ApiError::framework(
        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        format!("Upload exceeds size limit: the uploaded archive {what}"),
    )
    .with_details(json!({
        "max_unpacked_bytes": budget.bytes,
        "max_unpacked_entries": budget.entries,
    }))
}

/// Unpack the zip at `zip` into the directory `into` (which exists, empty), safely and within
/// `budget` (module doc); on failure `into` is left empty. Returns the number of files written.
pub fn unpack(zip: &Path, into: &Path, budget: &Budget) -> Result<usize, ApiError> {
    let r = unpack_within(zip, into, budget);
    if r.is_err() {
        for e in std::fs::read_dir(into).into_iter().flatten().flatten() {
            let p = e.path();
            let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
    r
}

fn unpack_within(zip: &Path, into: &Path, budget: &Budget) -> Result<usize, ApiError> {
    let file = std::fs::File::open(zip).map_err(internal)?;
    let mut ar = zip::ZipArchive::new(file).map_err(|e| bad_zip(e.to_string()))?;
    let too_many = || {
        too_large(
            format!(
                "holds more than {} entries (server.max_unpacked_entries)",
                budget.entries
            ),
            budget,
        )
    };
    // The entries of the central directory, which are the ones iterated below: refused
    // before anything is written.
    if ar.len() > budget.entries {
        return Err(too_many());
    }
    let mut total = 0u64;
    let mut files = 0usize;
    let mut buf = vec![0u8; 64 << 10];
    for i in 0..ar.len() {
        let mut entry = ar.by_index(i).map_err(|e| bad_zip(e.to_string()))?;
        let name = entry
            .name()
            .map_err(|e| bad_zip(e.to_string()))?
            .into_owned();
        if entry.encrypted() {
            return Err(bad_zip(format!(
                "{name}: encrypted entries are not supported"
            )));
        }
        if entry.is_symlink() {
            return Err(bad_zip(format!("{name}: symbolic links are not accepted")));
        }
        let is_dir = entry.is_dir();
        let rel = safe_rel(&name)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dest = into.join(&rel);
        // Modes spelled out: the daemon runs with no umask, and add-resource keeps a file's.
        let dirs = |d: &Path| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(d)
                .map_err(|e| bad_zip(format!("{name}: {e}")))
        };
        if is_dir {
            dirs(&dest)?;
            continue;
        }
        if let Some(parent) = dest.parent() {
            dirs(parent)?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&dest)
            .map_err(|e| bad_zip(format!("{name}: {e}")))?;
        let write_err = |e| ApiError::from_ops("temp_upload", OpsError::io(&dest, e));
        // Counted as decompressed: what the archive says an entry holds is not believed.
        loop {
            let n = match entry.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(bad_zip(format!("{name}: {e}"))),
            };
            if total + n as u64 > budget.bytes {
                return Err(too_large(
                    format!("unpacks to more than {}", budget.why),
                    budget,
                ));
            }
            // A statvfs a chunk (a microsecond beside the chunk's write): what others wrote
            // since the budget was set counts too.
            if room(into).is_some_and(|r| r < n as u64) {
                return Err(too_large(
                    format!(
                        "would leave {} with less free space than is kept for the history \
                         ({total} bytes unpacked)",
                        into.display()
                    ),
                    budget,
                ));
            }
            out.write_all(&buf[..n]).map_err(write_err)?;
            total += n as u64;
        }
        out.flush().map_err(write_err)?;
        files += 1;
    }
    Ok(files)
}

/// An entry's name as a relative path of namespace names (`/`-separated; a trailing `/`
/// marks a directory), or why it is refused.
fn safe_rel(name: &str) -> Result<PathBuf, ApiError> {
    if name.starts_with('/') || name.contains('\\') {
        return Err(bad_zip(format!("{name:?}: not a relative path")));
    }
    let mut out = PathBuf::new();
    for c in name.trim_end_matches('/').split('/') {
        crate::uri::check_component(c, name).map_err(|e| bad_zip(e.to_string()))?;
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_clients_directory_zips_are_unpacked_by_name() {
        // The names OpenViking's SDK and `ov` give a zipped directory.
        assert!(is_directory_zip_name(
            "temp_upload_0123456789abcdef0123456789abcdef.zip"
        ));
        assert!(is_directory_zip_name(".tmpDrzVlL.zip"));
        // A user's files, zips among them, are kept as they are.
        for name in [
            "report.docx",
            "book.epub",
            "lib.jar",
            "archive.zip",
            "temp_upload_x.zip",
            "temp_upload_0123456789ABCDEF0123456789ABCDEF.zip",
            "temp_upload_0123456789abcdef0123456789abcdef.zip.docx",
            ".tmpDrzVl.zip",
            ".tmpDrz-lL.zip",
            "temp_upload.zip",
        ] {
            assert!(!is_directory_zip_name(name), "{name}");
        }
    }

    fn roomy() -> Budget {
        Budget::new(1 << 30, 1000, &[])
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        // A stored (uncompressed) zip written by hand: local headers, central directory.
        let mut body = Vec::new();
        let mut central = Vec::new();
        for (name, data) in entries {
            let off = body.len() as u32;
            let crc = crc32(data);
            body.extend_from_slice(b"PK\x03\x04");
            body.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            body.extend_from_slice(&crc.to_le_bytes());
            body.extend_from_slice(&(data.len() as u32).to_le_bytes());
            body.extend_from_slice(&(data.len() as u32).to_le_bytes());
            body.extend_from_slice(&(name.len() as u16).to_le_bytes());
            body.extend_from_slice(&0u16.to_le_bytes());
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(data);
            central.extend_from_slice(b"PK\x01\x02");
            central.extend_from_slice(&[20, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            central.extend_from_slice(&crc.to_le_bytes());
            central.extend_from_slice(&(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&(name.len() as u16).to_le_bytes());
            central.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
            let mode: u32 = if name.ends_with('/') {
                0o40755
            } else {
                0o100644
            };
            central.extend_from_slice(&(mode << 16).to_le_bytes());
            central.extend_from_slice(&off.to_le_bytes());
            central.extend_from_slice(name.as_bytes());
        }
        let cd_off = body.len() as u32;
        let n = entries.len() as u16;
        let mut out = body;
        out.extend_from_slice(&central);
        out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        out.extend_from_slice(&cd_off.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&out).unwrap();
        f
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    /// A zip of `files` entries of `each` zero bytes, deflated (a thousand to one).
    fn bomb(files: usize, each: u64) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        let mut w = zip::ZipWriter::new(f.reopen().unwrap());
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        let zeros = vec![0u8; 1 << 20];
        for i in 0..files {
            w.start_file(format!("z{i}.bin"), opts).unwrap();
            let mut left = each;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                w.write_all(&zeros[..n]).unwrap();
                left -= n as u64;
            }
        }
        w.finish().unwrap();
        f
    }

    /// Bytes allocated under `dir`.
    fn du(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let m = e.metadata().unwrap();
            n += m.blocks() * 512;
            if m.is_dir() {
                n += du(&e.path());
            }
        }
        n
    }

    #[test]
    fn a_bomb_is_refused_at_its_budget_and_leaves_nothing() {
        // 64 MiB in a zip of about 64 KiB; the budget 8 MiB.
        let z = bomb(1, 64 << 20);
        assert!(std::fs::metadata(z.path()).unwrap().len() < 1 << 20);
        let d = tempfile::tempdir().unwrap();
        let budget = Budget::new(8 << 20, 10, &[d.path()]);
        assert_eq!(budget.bytes, 8 << 20);
        let e = unpack(z.path(), d.path(), &budget).unwrap_err();
        assert_eq!(e.status(), axum::http::StatusCode::PAYLOAD_TOO_LARGE, "{e}");
        assert!(e.message.contains("8388608 bytes"), "{e}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        // Spread over files, the same; and within it, unpacked whole.
        let z = bomb(4, 3 << 20);
        assert!(unpack(z.path(), d.path(), &budget).is_err());
        assert_eq!(du(d.path()), 0);
        let z = bomb(2, 3 << 20);
        assert_eq!(unpack(z.path(), d.path(), &budget).unwrap(), 2);
        assert_eq!(du(d.path()) >> 20, 6);
        // Entries are counted too.
        let d = tempfile::tempdir().unwrap();
        let z = bomb(11, 1);
        let e = unpack(z.path(), d.path(), &budget).unwrap_err();
        assert!(e.message.contains("more than 10 entries"), "{e}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_budget_keeps_the_disks_free_space_above_the_pressure_line() {
        let d = tempfile::tempdir().unwrap();
        let st = crate::sys::statvfs(d.path()).unwrap();
        let free = st.f_bavail * st.f_frsize;
        let line = crate::ops::pressure_line(st.f_blocks * st.f_frsize);
        let room = free.saturating_sub(line);
        // Alone on its filesystem, and shared by two paths on it.
        let b = Budget::new(u64::MAX, 10, &[d.path()]);
        assert!(
            b.bytes <= room && b.bytes + (64 << 20) >= room,
            "{b:?} vs {room}"
        );
        let b2 = Budget::new(u64::MAX, 10, &[d.path(), d.path()]);
        assert!(b2.bytes <= room / 2 + (32 << 20), "{b2:?} vs {room}");
        assert!(b2.why.contains("free above"), "{b2:?}");
    }

    #[test]
    fn a_zip_unpacks_only_inside_and_only_namespace_names() {
        let z = zip_of(&[("a.md", b"alpha"), ("sub/", b""), ("sub/b.md", b"beta")]);
        assert!(is_zip(z.path()));
        let d = tempfile::tempdir().unwrap();
        assert_eq!(unpack(z.path(), d.path(), &roomy()).unwrap(), 2);
        assert_eq!(std::fs::read(d.path().join("sub/b.md")).unwrap(), b"beta");
        for evil in [
            "../x",
            "/etc/x",
            "a/../../x",
            "a\\..\\x",
            ".path.ovlock",
            "a//b",
        ] {
            let z = zip_of(&[(evil, b"x")]);
            let d = tempfile::tempdir().unwrap();
            let e = unpack(z.path(), d.path(), &roomy()).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument, "{evil}: {e}");
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "{evil}");
        }
        let long = format!("{}.md", "x".repeat(300));
        let z = zip_of(&[(long.as_str(), b"x")]);
        assert!(unpack(z.path(), tempfile::tempdir().unwrap().path(), &roomy()).is_err());
        // A name twice is written once at most (refused, or the archive reader keeps one).
        let z = zip_of(&[("a.md", b"1"), ("a.md", b"2")]);
        let n = unpack(z.path(), tempfile::tempdir().unwrap().path(), &roomy());
        assert!(n.as_ref().map_or(true, |&n| n == 1), "{n:?}");
    }
}
