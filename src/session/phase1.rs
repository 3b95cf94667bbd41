//! Phase 1 of a commit, and the recovery of a phase 1 a crash interrupted.
//!
//! Under the session's TREE lock, in this order (each step a crash point):
//! 1. `.meta.json` gets a pending commit: archive number, state `preparing`, and the length and
//!    SHA-256 of the live file's prefix being archived (the whole file as read under the lock);
//! 2. `history/archive_NNN/messages.jsonl` is written atomically with exactly those bytes;
//! 3. the `session_commit` job is enqueued (durable from here on);
//! 4. state `trimming` with a [`TrimRecord`], then the prefix is cut from the live file in place;
//! 5. the pending commit is cleared: phase 1 is ready.
//!
//! Recovery reads the pending commit: while `preparing`, the live file must still start with
//! the recorded prefix (nothing cuts it before step 4), so the archive is (re)written from it
//! and the job enqueued again (idempotent: keyed by the archive); while `trimming`, the archive
//! is complete and [`trim::run`] finishes the cut. Either way the commit is rolled forward,
//! never back: once the archive exists, the prefix belongs to it.

use serde_json::json;

use crate::queue::SESSION_COMMIT;
use crate::semantic::memory::parse_messages;

use super::fsx;
use super::fsx::sha256_hex;
use super::layout::{archives_on_disk, SessionPath, MESSAGES};
use super::meta::{now_rfc3339, Meta, PendingCommit, PendingState};
use super::trim::{self, TrimRecord};
use super::{SessionError, Sessions};

/// What `commit` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CommitReport {
    /// `viking://user/{uid}/sessions/{sid}`
    pub session: String,
    /// The archive written, `None` when the live file held no line.
    pub archive: Option<u32>,
    pub archive_uri: Option<String>,
    /// Valid messages archived.
    pub messages: usize,
    /// Lines archived verbatim that are not valid messages.
    pub invalid_lines: usize,
    /// Bytes moved from the live file into the archive.
    pub bytes: u64,
    /// Archives of earlier, interrupted commits that this call finished first.
    pub recovered: Vec<u32>,
}

/// What [`Sessions::recover_all`] did.
#[derive(Debug, Default)]
pub struct RecoverAll {
    /// Sessions whose interrupted commit was finished, with the archive.
    pub recovered: Vec<(SessionPath, u32)>,
    pub failed: Vec<(SessionPath, SessionError)>,
}

impl Sessions {
    /// Phase 1 of `session.commit`: archive every line of the live file and queue phase 2.
    pub fn commit(&self, s: &SessionPath) -> Result<CommitReport, SessionError> {
        self.commit_keeping(s, 0)
    }

    /// [`commit`](Self::commit), leaving the `keep` most recent lines in the live file
    /// (OpenViking's `keep_recent_count`): only the lines before them are archived.
    pub fn commit_keeping(
        &self,
        s: &SessionPath,
        keep: usize,
    ) -> Result<CommitReport, SessionError> {
        if !fsx::is_dir(&self.ws, &s.dir)? {
            return Err(SessionError::NoSuchSession(s.dir.uri()));
        }
        let _lock = self.lock_tree(s)?;
        crate::crash_point!("session.commit.locked");
        let mut report = CommitReport {
            session: s.dir.uri(),
            ..Default::default()
        };
        report.recovered.extend(self.recover_locked(s)?);

        let live = fsx::read_opt(&self.ws, &s.messages())?.unwrap_or_default();
        let mut meta = Meta::load(&self.ws, s)?;
        let cut = archive_cut(&live, keep);
        let prefix = &live[..cut];
        if prefix.iter().all(u8::is_ascii_whitespace) {
            return Ok(report);
        }
        let n = self.next_archive(s, &meta)?;
        let parsed = parse_messages(&String::from_utf8_lossy(prefix));
        report.archive = Some(n);
        report.archive_uri = Some(s.archive(n).uri());
        report.messages = parsed.messages.len();
        report.invalid_lines = parsed.invalid.len();
        report.bytes = prefix.len() as u64;

        meta.keep_recent_count = Some(keep as u64);
        meta.pending_commit = Some(PendingCommit {
            archive: n,
            state: PendingState::Preparing,
            prefix_len: prefix.len() as u64,
            prefix_sha256: sha256_hex(prefix),
            trim: None,
            started_at: now_rfc3339(),
        });
        meta.store(&self.ws, s)?;
        crate::crash_point!("session.commit.marked_preparing");

        self.write_archive(s, n, prefix)?;
        crate::crash_point!("session.commit.archive_written");
        self.enqueue_phase2(s, n)?;
        crate::crash_point!("session.commit.enqueued");

        // The live file becomes the kept lines (what a foreign, lock-ignoring writer added
        // meanwhile is kept too, by the trim).
        let rec = TrimRecord::new(&live[cut..], &live);
        self.trim_and_finish(s, meta, rec)?;
        Ok(report)
    }

    /// Finish the pending phase 1 of `s`, if any, under its TREE lock. Returns the archive it
    /// finished.
    pub fn recover(&self, s: &SessionPath) -> Result<Option<u32>, SessionError> {
        if Meta::load(&self.ws, s)?.pending_commit.is_none() {
            return Ok(None);
        }
        let _lock = self.lock_tree(s)?;
        self.recover_locked(s)
    }

    /// Recover every session of `user` (for `vikingfs wait` and a daemon's start). One session
    /// that cannot be recovered does not stop the others: its error is returned beside them.
    pub fn recover_all(&self, user: &str) -> Result<RecoverAll, SessionError> {
        let mut out = RecoverAll::default();
        for s in super::layout::list_sessions(&self.ws, user)? {
            match self.recover(&s) {
                Ok(Some(n)) => out.recovered.push((s, n)),
                Ok(None) => {}
                Err(e) => out.failed.push((s, e)),
            }
        }
        Ok(out)
    }

    /// Queue phase 2 again for every archive of `s` without `.done` (after the cause of a
    /// failure was fixed, or when the queue lost its job). Returns the archives queued.
    pub fn requeue_undone(&self, s: &SessionPath) -> Result<Vec<u32>, SessionError> {
        let mut out = Vec::new();
        for n in super::layout::archives_on_disk(&self.ws, s)? {
            if !fsx::exists(&self.ws, &s.archive_file(n, super::layout::DONE))? {
                self.enqueue_phase2(s, n)?;
                out.push(n);
            }
        }
        Ok(out)
    }

    /// [`recover`](Self::recover) with the TREE lock already held.
    pub(crate) fn recover_locked(&self, s: &SessionPath) -> Result<Option<u32>, SessionError> {
        let mut meta = Meta::load(&self.ws, s)?;
        let Some(p) = meta.pending_commit.clone() else {
            return Ok(None);
        };
        let live_path = self.ws.fs_path(&s.messages());
        let archive = s.archive_file(p.archive, MESSAGES);
        let archive_path = self.ws.fs_path(&archive);
        let prefix_len = usize::try_from(p.prefix_len).unwrap_or(usize::MAX);
        let rec = match p.state {
            PendingState::Preparing => {
                let live = fsx::read_opt(&self.ws, &s.messages())?.unwrap_or_default();
                if live.len() < prefix_len || sha256_hex(&live[..prefix_len]) != p.prefix_sha256 {
                    return Err(SessionError::Diverged {
                        path: live_path,
                        reason: format!(
                            "archive_{:03} is pending but the live file no longer starts with \
                             the {} bytes recorded for it",
                            p.archive, p.prefix_len
                        ),
                    });
                }
                let archived = fsx::read_opt(&self.ws, &archive)?;
                if archived.as_deref().map(sha256_hex) != Some(p.prefix_sha256.clone()) {
                    self.write_archive(s, p.archive, &live[..prefix_len])?;
                }
                self.enqueue_phase2(s, p.archive)?;
                TrimRecord::new(&live[prefix_len..], &live)
            }
            PendingState::Trimming => {
                let archived = fsx::read_opt(&self.ws, &archive)?;
                if archived.as_deref().map(sha256_hex) != Some(p.prefix_sha256.clone()) {
                    return Err(SessionError::Diverged {
                        path: archive_path,
                        reason: "the archive of a commit being trimmed is missing or changed"
                            .into(),
                    });
                }
                p.trim.clone().ok_or_else(|| SessionError::MetaIncomplete {
                    path: self.ws.fs_path(&s.meta()),
                    reason: "pending commit in state trimming without a trim record",
                })?
            }
        };
        meta.pending_commit = Some(p.clone());
        self.trim_and_finish(s, meta, rec)?;
        tracing::info!(session = %s.dir.uri(), archive = p.archive, "recovered an interrupted commit");
        Ok(Some(p.archive))
    }

    /// Steps 4 and 5: record the trim, cut the live file, mark phase 1 ready.
    fn trim_and_finish(
        &self,
        s: &SessionPath,
        mut meta: Meta,
        rec: TrimRecord,
    ) -> Result<(), SessionError> {
        let n = meta.pending_commit.as_ref().map(|p| p.archive).unwrap_or(0);
        let set = |meta: &mut Meta, rec: &TrimRecord| {
            if let Some(p) = meta.pending_commit.as_mut() {
                p.state = PendingState::Trimming;
                p.trim = Some(rec.clone());
            }
        };
        set(&mut meta, &rec);
        // Both files exist and change from here on: queue their records and the session's
        // summary now, so that no crash below leaves them without a job. A job that runs
        // meanwhile cannot take its EXACT lock under our TREE; it retries and reads the end
        // state.
        self.notify_written(&[s.messages(), s.meta()])?;
        self.forget_records(&s.messages())?;
        meta.store(&self.ws, s)?;
        crate::crash_point!("session.commit.marked_trimming");
        let live_path = self.ws.fs_path(&s.messages());
        if fsx::exists(&self.ws, &s.messages())? {
            trim::run(
                fsx::open_rw(&self.ws, &s.messages())?,
                &live_path,
                rec,
                |r| {
                    set(&mut meta, r);
                    meta.store(&self.ws, s)
                },
                || crate::crash_point!("session.commit.trim_copied"),
            )?;
        }
        crate::crash_point!("session.commit.trimmed");
        meta.pending_commit = None;
        meta.commit_count += 1;
        meta.last_commit_at = Some(now_rfc3339());
        meta.message_count = live_message_count(&self.ws, &s.messages())?;
        meta.last_archive = Some(meta.last_archive.unwrap_or(0).max(n));
        meta.store(&self.ws, s)?;
        crate::crash_point!("session.commit.ready");
        Ok(())
    }

    /// The next archive number: above every archive on disk and every one recorded.
    fn next_archive(&self, s: &SessionPath, meta: &Meta) -> Result<u32, SessionError> {
        let on_disk = archives_on_disk(&self.ws, s)?.last().copied().unwrap_or(0);
        Ok(on_disk.max(meta.last_archive.unwrap_or(0)) + 1)
    }

    fn write_archive(&self, s: &SessionPath, n: u32, bytes: &[u8]) -> Result<(), SessionError> {
        fsx::create_dir_durable(&self.ws, &s.archive(n))?;
        fsx::atomic_write(&self.ws, &s.archive_file(n, MESSAGES), bytes)
    }

    /// Queue phase 2 of archive `n`, keyed by the archive so a repeat does not add a job.
    pub(crate) fn enqueue_phase2(&self, s: &SessionPath, n: u32) -> Result<i64, SessionError> {
        let payload = json!({ "session": s.dir.as_str(), "archive": n });
        Ok(self
            .light
            .enqueue(SESSION_COMMIT, Some(s.archive(n).as_str()), &payload)?)
    }
}

/// Messages (valid or not) left in the live file.
fn live_message_count(
    ws: &crate::workspace::Workspace,
    p: &crate::uri::VPath,
) -> Result<u64, SessionError> {
    let bytes = fsx::read_opt(ws, p)?.unwrap_or_default();
    let parsed = parse_messages(&String::from_utf8_lossy(&bytes));
    Ok((parsed.messages.len() + parsed.invalid.len()) as u64)
}

/// Where the archived part of `live` ends: before its last `keep` lines (blank lines do not
/// count), or at its end. A last line without a newline counts as a line.
fn archive_cut(live: &[u8], keep: usize) -> usize {
    if keep == 0 {
        return live.len();
    }
    let mut kept = 0;
    let mut end = live.len();
    // Walk back over lines: [start, end) is one line, its newline excluded.
    while end > 0 {
        let body_end = if live[end - 1] == b'\n' { end - 1 } else { end };
        let start = live[..body_end]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        if !live[start..body_end].iter().all(u8::is_ascii_whitespace) {
            kept += 1;
            if kept == keep {
                return start;
            }
        }
        end = start;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::archive_cut;

    #[test]
    fn cut_keeps_the_last_lines() {
        let live = b"a\nb\n\nc\nd";
        assert_eq!(archive_cut(live, 0), live.len());
        assert_eq!(&live[archive_cut(live, 1)..], b"d");
        assert_eq!(&live[archive_cut(live, 2)..], b"c\nd");
        assert_eq!(&live[archive_cut(live, 3)..], b"b\n\nc\nd");
        assert_eq!(archive_cut(live, 4), 0);
        assert_eq!(archive_cut(live, 9), 0);
        assert_eq!(&b"x\n"[archive_cut(b"x\n", 1)..], b"x\n");
        assert_eq!(archive_cut(b"", 3), 0);
    }
}
