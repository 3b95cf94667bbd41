//! The `rederive` job: after a rule file (`.vikingignore`) changed, remove what is derived
//! from the paths it now ignores (records, and the sidecars of ignored directories, each under
//! the lock a job writes it under) and queue the jobs of what it now includes and of every
//! directory whose summary may change ([`super::derive`] has the rules).

use serde_json::Value;

use super::keys::{embed_job, semantic_job};
use super::lifecycle::JobLock;
use super::{source_version, stat, Ops, OpsError, Stores};
use crate::index::Level;
use crate::queue::{self, Job, JobError};
use crate::uri::{VPath, ABSTRACT_FILE, OVERVIEW_FILE};

impl Ops {
    /// The `rederive` job: after the rule file of `dir` changed, remove what is derived from
    /// paths it now ignores and queue the jobs of what it now includes (see the module doc).
    pub fn run_rederive(&self, job: &Job) -> std::result::Result<(), JobError> {
        let uri = job
            .payload
            .get("dir")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                JobError::Permanent(format!("payload has no \"dir\": {}", job.payload).into())
            })?;
        let dir = self.parse(uri).map_err(super::jobs::bad_payload)?;
        crate::crash_point!("job.rederive.start");
        self.derive.rules.invalidate(&dir);
        if !self.derive.derives(&dir, true)
            || !stat(&self.backing(&dir))?.is_some_and(|m| m.is_dir())
        {
            return Ok(());
        }
        let mut jobs = vec![semantic_job(&dir, None)];
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for (p, is_dir) in self.children(&d)? {
                if !self.derive.derives(&p, is_dir) {
                    self.underive(&p, is_dir)?;
                    crate::crash_point!("job.rederive.underived");
                } else if is_dir {
                    jobs.push(semantic_job(&p, None));
                    stack.push(p);
                } else {
                    let now = stat(&self.backing(&p))?.map(|m| source_version(&m));
                    if now.is_some() && self.index.version_of(&p, Level::Content)? != now {
                        jobs.push(embed_job(&p, None));
                    }
                }
            }
        }
        for chunk in jobs.chunks(1000) {
            self.queue.submit(chunk)?;
        }
        Ok(())
    }
}

impl Stores {
    /// Remove what is derived from the ignored `p`: its records and those below it, and the
    /// sidecars of every directory at or below it, each under the lock a job writes it under.
    fn underive(&self, p: &VPath, is_dir: bool) -> std::result::Result<(), JobError> {
        self.drop_records_under(p)?;
        if !is_dir {
            return Ok(());
        }
        let mut stack = vec![p.clone()];
        while let Some(d) = stack.pop() {
            self.drop_sidecars_of(&d)?;
            stack.extend(
                self.children(&d)?
                    .into_iter()
                    .filter(|(_, dir)| *dir)
                    .map(|(c, _)| c),
            );
        }
        Ok(())
    }

    /// Drop the records at or below `p`, each under its write-back lock.
    pub(crate) fn drop_records_under(&self, p: &VPath) -> std::result::Result<(), JobError> {
        for (uri, _) in self.index.uris_under(p).map_err(OpsError::from)? {
            let JobLock::Held(_g) = self.job_lock(std::slice::from_ref(&uri), None)? else {
                continue;
            };
            self.index.delete(&uri).map_err(OpsError::from)?;
        }
        Ok(())
    }

    /// Remove the sidecars of directory `d`, under the lock the semantic job writes them
    /// under.
    pub(crate) fn drop_sidecars_of(&self, d: &VPath) -> std::result::Result<(), JobError> {
        let sidecars = [
            d.join(ABSTRACT_FILE).map_err(OpsError::from)?,
            d.join(OVERVIEW_FILE).map_err(OpsError::from)?,
        ];
        if !sidecars
            .iter()
            .any(|s| std::fs::symlink_metadata(self.backing(s)).is_ok())
        {
            return Ok(());
        }
        if let JobLock::Held(_g) = self.job_lock(&sidecars, None)? {
            for s in &sidecars {
                match std::fs::remove_file(self.backing(s)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(OpsError::io(self.backing(s), e).into())
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}
/// The worker pool's handler for the `rederive` queue.
pub struct RederiveHandler(pub std::sync::Arc<Ops>);

impl queue::JobHandler for RederiveHandler {
    fn handle(&self, job: &Job) -> std::result::Result<(), JobError> {
        self.0.run_rederive(job)
    }
}
