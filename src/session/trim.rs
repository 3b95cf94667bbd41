//! Rewriting the live `messages.jsonl` in place, so that a crash at any byte leaves a state a
//! later run can finish without losing or duplicating a line.
//!
//! The file is never replaced by rename: an appender may hold it open with `O_APPEND`, and its
//! next write must land in the live file, not in an unlinked inode. So the new content `K` (what
//! follows the archived prefix) is written over the start of the file with `pwrite`, then the
//! file is cut to `|K|` with `ftruncate`. Before touching the file, a [`TrimRecord`] goes to
//! `.meta.json`: `K` itself, plus the length and SHA-256 of the whole file (`from`) and of the
//! region `from[|K|..]` that the copy leaves in place (`junk`). From those, [`classify`] tells
//! the states apart:
//!
//! | file now                                   | meaning                    | next step            |
//! |--------------------------------------------|----------------------------|----------------------|
//! | starts with `from`                         | untouched                  | copy `K`, truncate   |
//! | starts with `K`, then `junk`               | copied, not truncated      | truncate             |
//! | starts with `K`, anything else after       | done                       | nothing              |
//! | mixed head, then `junk`                    | copy interrupted           | copy `K`, truncate   |
//! | anything else                              | changed outside the protocol: refuse, touch nothing |
//!
//! Bytes found after `from_len` were appended after a crash (a stale lock was taken over): they
//! are kept by restarting with `K + appended` as the new target.
//!
//! Residual ambiguity, by construction of any in-place scheme: a writer that ignores the pending
//! commit and, after a crash, appends an exact copy of the region a later state is recognised
//! by. vikingfs's own appender finishes a pending commit before it appends, so only foreign
//! writers can produce that, and only by duplicating archived bytes verbatim.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::fsx::sha256_hex;
use super::SessionError;

/// How the live file is being rewritten; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimRecord {
    /// The target content `K`, hex-encoded (usually empty: nothing is appended under the lock).
    pub keep_hex: String,
    pub from_len: u64,
    pub from_sha256: String,
    /// SHA-256 of `from[|K|..]`.
    pub junk_sha256: String,
}

impl TrimRecord {
    /// Rewrite the file holding `from` into `keep` (`keep.len() <= from.len()`).
    pub fn new(keep: &[u8], from: &[u8]) -> TrimRecord {
        assert!(keep.len() <= from.len(), "a trim never grows the file");
        TrimRecord {
            keep_hex: hex::encode(keep),
            from_len: from.len() as u64,
            from_sha256: sha256_hex(from),
            junk_sha256: sha256_hex(&from[keep.len()..]),
        }
    }

    pub fn keep(&self) -> Result<Vec<u8>, String> {
        hex::decode(&self.keep_hex).map_err(|e| format!("trim record: keep_hex: {e}"))
    }
}

/// What to do next with the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The file holds the target (plus lines appended since): finished.
    Done,
    /// Write `K` at offset 0, then truncate to `|K|`.
    Copy,
    /// `K` is in place: truncate to `|K|`.
    Truncate,
    /// Bytes were appended after `from`: persist this record instead, then go on.
    Restart(TrimRecord),
}

/// Decide the next step from the file's current content (see the module docs' table).
pub fn classify(rec: &TrimRecord, f: &[u8]) -> Result<Step, String> {
    let keep = rec.keep()?;
    let from_len = usize::try_from(rec.from_len).map_err(|e| e.to_string())?;
    if keep.len() > from_len {
        return Err("trim record keeps more than the file held".into());
    }
    let junk_intact =
        f.len() >= from_len && sha256_hex(&f[keep.len()..from_len]) == rec.junk_sha256;
    let appended = |f: &[u8]| -> Step {
        let mut target = keep.clone();
        target.extend_from_slice(&f[from_len..]);
        Step::Restart(TrimRecord::new(&target, f))
    };
    if f.len() >= from_len && sha256_hex(&f[..from_len]) == rec.from_sha256 {
        return Ok(if f.len() == from_len {
            Step::Copy
        } else {
            appended(f)
        });
    }
    if f.starts_with(&keep) {
        if !junk_intact {
            return Ok(Step::Done);
        }
        return Ok(if f.len() == from_len {
            Step::Truncate
        } else {
            appended(f)
        });
    }
    if junk_intact {
        // The copy of K stopped part-way: its head is a mix, but everything from |K| on is as
        // recorded, and the head is about to be overwritten with K again.
        return Ok(if f.len() == from_len {
            Step::Copy
        } else {
            appended(f)
        });
    }
    Err("the live file matches no state of the recorded rewrite".into())
}

/// Drive `file` (open for reading and writing; `path` names it in errors) to the record's
/// target. `persist` stores a replacement record (in `.meta.json`) before the file is touched
/// under it; `between` runs between the copy and the truncation (a crash point).
pub fn run(
    file: File,
    path: &Path,
    mut rec: TrimRecord,
    mut persist: impl FnMut(&TrimRecord) -> Result<(), SessionError>,
    mut between: impl FnMut(),
) -> Result<(), SessionError> {
    // Three rounds at most: restart, copy, truncate; more means the file keeps changing under us.
    for _ in 0..6 {
        let cur = read_all(&file, path)?;
        let step = classify(&rec, &cur).map_err(|reason| SessionError::Diverged {
            path: path.to_path_buf(),
            reason,
        })?;
        let keep_len = || rec.keep().map(|k| k.len() as u64);
        match step {
            Step::Done => return Ok(()),
            Step::Restart(r) => {
                persist(&r)?;
                rec = r;
            }
            Step::Copy => {
                let keep = rec.keep().map_err(|reason| SessionError::Diverged {
                    path: path.to_path_buf(),
                    reason,
                })?;
                file.write_all_at(&keep, 0)
                    .and_then(|_| file.sync_data())
                    .map_err(|e| SessionError::io(path, e))?;
                between();
                truncate(&file, path, keep.len() as u64)?;
            }
            Step::Truncate => {
                let n = keep_len().map_err(|reason| SessionError::Diverged {
                    path: path.to_path_buf(),
                    reason,
                })?;
                between();
                truncate(&file, path, n)?;
            }
        }
    }
    Err(SessionError::Diverged {
        path: path.to_path_buf(),
        reason: "the live file kept changing while it was being trimmed".into(),
    })
}

fn truncate(file: &File, path: &Path, len: u64) -> Result<(), SessionError> {
    file.set_len(len)
        .and_then(|_| file.sync_data())
        .map_err(|e| SessionError::io(path, e))
}

fn read_all(file: &File, path: &Path) -> Result<Vec<u8>, SessionError> {
    let len = file
        .metadata()
        .map_err(|e| SessionError::io(path, e))?
        .len();
    let mut buf = vec![0u8; len as usize];
    let mut off = 0;
    while off < buf.len() {
        match file.read_at(&mut buf[off..], off as u64) {
            Ok(0) => {
                buf.truncate(off);
                break;
            }
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SessionError::io(path, e)),
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Apply one step to an in-memory file, as [`run`] does to a real one.
    fn apply(rec: &TrimRecord, f: &mut Vec<u8>, step: &Step) {
        let keep = rec.keep().unwrap();
        match step {
            Step::Copy => {
                f[..keep.len()].copy_from_slice(&keep);
                f.truncate(keep.len());
            }
            Step::Truncate => f.truncate(keep.len()),
            Step::Done | Step::Restart(_) => {}
        }
    }

    fn finish(mut rec: TrimRecord, f: &mut Vec<u8>) {
        for _ in 0..6 {
            let step = classify(&rec, f).unwrap();
            match &step {
                Step::Done => return,
                Step::Restart(r) => rec = r.clone(),
                s => apply(&rec, f, s),
            }
        }
        panic!("did not finish");
    }

    // Lines that carry a unique number, as vikingfs's appender writes them (id + time): an
    // append after a crash never replicates archived bytes.
    fn lines(range: std::ops::Range<usize>) -> Vec<u8> {
        range
            .map(|i| format!("{{\"role\":\"user\",\"content\":\"m{i}\"}}\n"))
            .collect::<String>()
            .into_bytes()
    }

    proptest! {
        /// A crash after any number of copied bytes, with or without truncation, with lines
        /// appended after the crash: recovery ends with exactly the kept and appended lines.
        #[test]
        fn any_crash_point_recovers(prefix in 1usize..6, tail in 0usize..4, after in 0usize..3,
                                    cut_at in 0usize..400, truncated in any::<bool>()) {
            let p = lines(0..prefix);
            let t = lines(prefix..prefix + tail);
            let a = lines(100..100 + after);
            let mut f = [p.clone(), t.clone()].concat();
            let rec = TrimRecord::new(&t, &f);
            // The crash: part of the copy done, maybe the truncation too.
            let k = cut_at.min(t.len());
            f[..k].copy_from_slice(&t[..k]);
            if truncated && k == t.len() {
                f.truncate(t.len());
            }
            f.extend_from_slice(&a);
            finish(rec, &mut f);
            prop_assert_eq!(f, [t, a].concat());
        }
    }

    #[test]
    fn foreign_rewrite_is_refused() {
        let from = lines(0..3);
        let rec = TrimRecord::new(b"", &from);
        // Keeping nothing: any other content is what was appended after the truncation.
        assert_eq!(classify(&rec, &lines(10..13)).unwrap(), Step::Done);
        // Keeping a line that the file no longer starts with, junk gone too: refuse.
        let keep = lines(5..6);
        let rec = TrimRecord::new(&keep, &[from.clone(), keep.clone()].concat());
        assert!(classify(&rec, &lines(20..23)).is_err());
    }
}
