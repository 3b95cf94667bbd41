//! Is an SQLite store's file whole? The index and the queue are derived state: a damaged one
//! is moved aside (kept for a post-mortem, never deleted) and rebuilt, never fatal.
//!
//! Two looks, both cheap enough for every open: the file's header (SQLite's magic, and a
//! length at least what the header says the database holds — a file cut short is the common
//! damage of a full disk or a bad copy, see [`damage`]), and the error codes SQLite answers
//! with when it meets a damaged page ([`is_damage_code`]).

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why the database file at `path` is damaged, judged by its header; `None` when it looks
/// whole (or does not exist, or is empty: SQLite creates it).
pub fn damage(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    if len == 0 {
        return None;
    }
    let mut h = [0u8; 100];
    if len < 100 || f.read_exact(&mut h).is_err() {
        return Some(format!("{len} bytes: shorter than a database header"));
    }
    if &h[..16] != b"SQLite format 3\0" {
        return Some("not an SQLite database (bad header)".into());
    }
    let page = match u16::from_be_bytes([h[16], h[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    let pages = u64::from(u32::from_be_bytes([h[28], h[29], h[30], h[31]]));
    // The in-header size is valid only when its version stamp matches the change counter.
    let valid = h[92..96] == h[24..28];
    if valid && page >= 512 && pages * page > len {
        return Some(format!(
            "{len} bytes, but its header says {pages} pages of {page} bytes: cut short"
        ));
    }
    None
}

/// Whether SQLite's answer says the file is damaged (rather than busy, missing or full).
pub fn is_damage_code(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Move the database at `path` (with its `-wal` and `-shm`) aside, to
/// `{path}.damaged-{unix seconds}`. Returns the new name of the main file.
pub fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let with = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    let aside = with(&format!(".damaged-{stamp}"));
    std::fs::rename(path, &aside)?;
    for s in ["-wal", "-shm"] {
        let mut to = aside.as_os_str().to_owned();
        to.push(s);
        match std::fs::rename(with(s), PathBuf::from(to)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_index_passes_and_a_cut_or_garbage_one_does_not() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("i.db");
        assert_eq!(damage(&p), None, "missing: SQLite creates it");
        {
            let conn = rusqlite::Connection::open(&p).unwrap();
            conn.execute_batch(
                "CREATE TABLE pad(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 \
                 FROM n WHERE i < 2000) INSERT INTO pad SELECT randomblob(200) FROM n;
                 ",
            )
            .unwrap();
        }
        assert_eq!(damage(&p), None);
        let len = std::fs::metadata(&p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len / 2).unwrap();
        assert!(damage(&p).is_some_and(|w| w.contains("cut short")));
        std::fs::write(&p, vec![0x5a; 4096]).unwrap();
        assert!(damage(&p).is_some_and(|w| w.contains("header")));
        let aside = move_aside(&p).unwrap();
        assert!(!p.exists() && aside.exists());
    }
}
