//! The session tests' fixture: a workspace driven through the real `vikingfs` binary
//! ([`Ws`]), and a reader of everything a session holds (archives and live file) for the
//! checkers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use super::{assert_ok, files_under, found_json, vikingfs};

pub struct Ws {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Ws {
    /// Default settings, except a 5 s lock expiry: a process killed while another of its
    /// threads was creating a lock file leaves an empty one, which counts as held until it
    /// expires (OpenViking's rule); 5 s keeps crash recovery quick without changing anything
    /// else (live holders refresh every expiry / 3).
    pub fn new() -> Ws {
        Self::with_config(r#"{"storage": {"agfs": {"pathlock": {"lock_expire_secs": 5}}}}"#)
    }

    pub fn with_config(json: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.json");
        std::fs::write(&config, json).unwrap();
        Ws { dir, config }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// `vikingfs --config C --workspace W`, with no crash point armed.
    pub fn cmd(&self) -> Command {
        let mut c = vikingfs(self.dir.path());
        c.arg("--config")
            .arg(&self.config)
            .arg("--workspace")
            .arg(self.root())
            // A job whose worker was killed is handed on after 3 s instead of 30.
            .env("VIKINGFS_JOB_LEASE_MS", "3000");
        c
    }

    /// Run and require success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert_ok(&out, args);
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run `find --json ...`; its stdout, after checking the exit status: 0 with results,
    /// 1 (like grep) with none.
    pub fn found(&self, args: &[&str]) -> String {
        found_json(&self.cmd().args(args).output().unwrap())
    }

    pub fn session_dir(&self, sid: &str) -> PathBuf {
        self.root()
            .join("viking/default/user/default/sessions")
            .join(sid)
    }

    pub fn memories_dir(&self) -> PathBuf {
        self.root().join("viking/default/user/default/memories")
    }

    /// Archive number -> its `messages.jsonl` lines.
    pub fn archives(&self, sid: &str) -> BTreeMap<u32, Vec<String>> {
        let mut out = BTreeMap::new();
        let hist = self.session_dir(sid).join("history");
        let Ok(rd) = std::fs::read_dir(&hist) else {
            return out;
        };
        for e in rd {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let Some(n) = name.strip_prefix("archive_") else {
                continue; // history/'s own summaries
            };
            let n: u32 = n.parse().unwrap();
            let text = std::fs::read_to_string(e.path().join("messages.jsonl")).unwrap_or_default();
            out.insert(n, lines(&text));
        }
        out
    }

    pub fn live(&self, sid: &str) -> Vec<String> {
        lines(
            &std::fs::read_to_string(self.session_dir(sid).join("messages.jsonl"))
                .unwrap_or_default(),
        )
    }

    /// Every line of the session, archives in order then the live file.
    pub fn all_lines(&self, sid: &str) -> Vec<String> {
        let mut v: Vec<String> = self.archives(sid).into_values().flatten().collect();
        v.extend(self.live(sid));
        v
    }

    /// Every regular file under `memories/`, relative path -> content.
    pub fn memories(&self) -> BTreeMap<String, String> {
        files_under(&self.memories_dir())
    }
}

pub fn lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The `content` of a message line, or the raw line when it is not JSON.
pub fn content_of(line: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(v) => v["content"].as_str().unwrap_or(line).to_string(),
        Err(_) => line.to_string(),
    }
}
