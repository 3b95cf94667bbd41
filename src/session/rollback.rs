//! `vikingfs session rollback SID [--archive N]`: take out exactly the facts a session's
//! commits wrote into its user's memories (OpenViking users ask for this: upstream issues
//! #4178 and #3329).
//!
//! What a commit wrote is in its archive's `memory_diff.json` (each memory file and the fact
//! lines it added), and each memory file names the commits its facts came from in its fields
//! ([`crate::semantic::memory::fields`]). A rollback of archive N, newest archive first, for
//! each file of its diff and under that file's EXACT lock (the lock phase 2 writes it under):
//! the lines N added come out, and N's source; the version replaced is kept in the history
//! first, so `vikingfs undo` can put it back. A file left without a fact is removed by the
//! locked rm (kept in the history too). Then `archive_NNN/.rolled_back` records it: a second
//! rollback of N does nothing, and the session's memory counts leave N out.
//!
//! Order and crashes: the marker is written last, and taking out lines already out is a no-op,
//! so a rollback a crash cut short is finished by running it again. An archive whose phase 2
//! has not finished (no `.done`) is refused: its job may still write.

use serde::Serialize;
use serde_json::json;

use super::layout::{archives_on_disk, SessionPath, DONE, MEMORY_DIFF};
use super::{fsx, SessionError, Sessions};
use crate::lock::LockKind;
use crate::semantic::memory::{fields, MemoryDiff};

/// Written in an archive once its commit's memories are rolled back.
pub const ROLLED_BACK: &str = ".rolled_back";

/// What a rollback did.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize)]
pub struct RollbackReport {
    /// The archives rolled back now, newest first.
    pub archives: Vec<u32>,
    /// Those rolled back before (nothing done for them).
    pub already: Vec<u32>,
    /// Memory files that lost facts and stay.
    pub changed: Vec<String>,
    /// Memory files left without a fact, removed (kept in the history).
    pub removed: Vec<String>,
    /// Fact lines taken out.
    pub lines: usize,
}

/// Has archive `n` of `s` been rolled back?
pub fn rolled_back(ws: &crate::workspace::Workspace, s: &SessionPath, n: u32) -> bool {
    // A link there (or on the way) is no marker: the archive counts as not rolled back, and
    // the rollback that would write the marker reports the link.
    fsx::exists(ws, &s.archive_file(n, ROLLED_BACK)).unwrap_or(false)
}

impl Sessions {
    /// Roll back the memory writes of `s`'s commit `archive`, or of all its commits.
    pub fn rollback(
        &self,
        s: &SessionPath,
        archive: Option<u32>,
    ) -> Result<RollbackReport, SessionError> {
        let ops = self.ops.clone().ok_or_else(|| {
            SessionError::Rollback("a rollback needs the operations engine".into())
        })?;
        let on_disk = archives_on_disk(&self.ws, s)?;
        if on_disk.is_empty() && !fsx::exists(&self.ws, &s.dir)? {
            return Err(SessionError::NoSuchSession(s.dir.uri()));
        }
        let mut todo: Vec<u32> = match archive {
            Some(n) if !on_disk.contains(&n) => {
                return Err(SessionError::Rollback(format!(
                    "session {} has no archive {n} (it has {on_disk:?})",
                    s.sid
                )))
            }
            Some(n) => vec![n],
            None => on_disk,
        };
        todo.reverse();
        let mut report = RollbackReport::default();
        for n in todo {
            if rolled_back(&self.ws, s, n) {
                report.already.push(n);
                continue;
            }
            let diff_p = s.archive_file(n, MEMORY_DIFF);
            let diff_path = self.ws.fs_path(&diff_p);
            if !fsx::exists(&self.ws, &s.archive_file(n, DONE))? {
                if archive.is_none() && !fsx::exists(&self.ws, &diff_p)? {
                    continue; // a commit that wrote nothing yet and may never: nothing to undo
                }
                return Err(SessionError::Rollback(format!(
                    "archive {n} of session {} is still being committed (no .done): wait for \
                     it (`vikingfs wait`), then roll back",
                    s.sid
                )));
            }
            let diff: MemoryDiff = match fsx::read_opt(&self.ws, &diff_p)? {
                Some(b) => serde_json::from_slice(&b)
                    .map_err(|e| SessionError::Rollback(format!("{}: {e}", diff_path.display())))?,
                None => MemoryDiff::default(),
            };
            let by = format!("session rollback {} archive_{n:03}", s.sid);
            for entry in diff.adds.iter().chain(&diff.updates) {
                let p = s.memories().join_rel(&entry.rel_path)?;
                let guard = self.lock(&[(p.clone(), LockKind::Exact)])?;
                let Some(bytes) = fsx::read_opt(&self.ws, &p)? else {
                    continue; // removed since: nothing of it left to take out
                };
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let (out, taken) = take_out(&text, &entry.lines, &s.sid, n);
                if out == text {
                    continue;
                }
                report.lines += taken;
                let (body, _) = fields::split(&out);
                if !body.lines().any(|l| l.trim_end().starts_with("- ")) {
                    drop(guard);
                    ops.rm(&p, false)
                        .map_err(|e| SessionError::Rollback(crate::error::Chain(&e).to_string()))?;
                    report.removed.push(p.uri());
                    continue;
                }
                ops.keep_rewritten(&p, &by);
                fsx::atomic_write(&self.ws, &p, out.as_bytes())?;
                self.notify_written(std::slice::from_ref(&p))?;
                drop(guard);
                crate::crash_point!("rollback.rewritten");
                report.changed.push(p.uri());
            }
            let marker = json!({
                "rolled_back_at": jiff::Timestamp::now().to_string(),
                "lines": report.lines,
            });
            fsx::atomic_write(
                &self.ws,
                &s.archive_file(n, ROLLED_BACK),
                format!("{marker}\n").as_bytes(),
            )?;
            report.archives.push(n);
        }
        if !report.archives.is_empty() {
            // The session's memory counts leave the rolled-back commits out.
            self.count_memories(s)?;
        }
        Ok(report)
    }
}

/// `text` without one occurrence of each of `lines` (the last: a commit appends) and without
/// `session`'s archive `n` among its sources; how many lines went.
fn take_out(text: &str, lines: &[String], session: &str, n: u32) -> (String, usize) {
    let (body, f) = fields::split(text);
    let mut kept: Vec<&str> = body.lines().collect();
    let mut taken = 0;
    for l in lines {
        if let Some(i) = kept.iter().rposition(|k| k.trim_end() == l.trim_end()) {
            kept.remove(i);
            taken += 1;
        }
    }
    let mut out = kept.join("\n");
    out.push('\n');
    let out = match f {
        Some(f) => fields::remove_source(&fields::join(&out, &f), session, n),
        None => out,
    };
    // Unchanged text stays byte for byte (no rewrite for nothing).
    if taken == 0 && out.trim_end() == text.trim_end() {
        return (text.to_string(), 0);
    }
    (out, taken)
}

#[cfg(test)]
mod tests {
    use super::take_out;
    use crate::semantic::memory::fields;
    use serde_json::json;

    #[test]
    fn only_that_commits_lines_and_source_go() {
        // Session a wrote the first two facts, b the third.
        let t = "# Prefs\n\n- likes tea\n- likes rust\n- likes jazz\n";
        let t = fields::add_source(t, json!({"session": "a", "archive": 1}));
        let t = fields::add_source(&t, json!({"session": "b", "archive": 1}));
        let (out, n) = take_out(&t, &["- likes jazz".into()], "b", 1);
        assert_eq!(n, 1);
        let (body, f) = fields::split(&out);
        assert_eq!(body, "# Prefs\n\n- likes tea\n- likes rust");
        let sources = f.unwrap()["sources"].clone();
        assert_eq!(sources, json!([{"session": "a", "archive": 1}]));
        // Again: nothing left to take out, the text as it is.
        let (again, n) = take_out(&out, &["- likes jazz".into()], "b", 1);
        assert_eq!((again.as_str(), n), (out.as_str(), 0));
    }
}
