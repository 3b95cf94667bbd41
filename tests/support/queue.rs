//! The queue tests' processes: a test's queue on a backend ([`QueueTest`], its [`Site`]), the
//! test binary re-executed as a child process with a role and the site its parent hands it,
//! waiting on conditions, and append-only logs that children write and parents check.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vikingfs::queue::{Queue, QueueOptions};

pub use super::backend::{Backend, Db};

/// Environment variable that turns the test binary into a child with that role.
pub const ROLE: &str = "VQ_CHILD_ROLE";
/// Directory the parent and its children share.
pub const DIR: &str = "VQ_DIR";

/// Environment variable naming the PostgreSQL database a child's queue lives in (unset:
/// SQLite in the shared directory). Set by [`Site::spawn_child`] from the site it is given.
pub const PG_DSN: &str = "VQ_PG_DSN";

/// Generous: the machine is small and shared.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Where one test's queue lives, as each of its processes opens it: the shared directory
/// (spool files and logs; `queue.db` on SQLite) and, on PostgreSQL, the database's DSN. A
/// parent hands it to every child it spawns ([`Site::spawn_child`]); a child gets it back
/// from [`child_role`]. Nothing about it is process-global.
#[derive(Clone, Debug)]
pub struct Site {
    pub dir: PathBuf,
    pub dsn: Option<String>,
}

impl Site {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The queue of this site: `DIR/queue.db`, or the PostgreSQL database (spool files stay
    /// in `DIR` either way).
    pub fn open(&self, max_attempts: u32, backoff: Duration) -> Queue {
        let opts = QueueOptions {
            max_attempts,
            backoff_base: backoff,
            rerun_delay: Duration::ZERO,
            ..QueueOptions::default()
        };
        let db = self.dir.join("queue.db");
        match &self.dsn {
            None => Queue::open_with(&db, opts).unwrap(),
            Some(dsn) => {
                let pg = std::sync::Arc::new(vikingfs::pg::Pg::connect(dsn).unwrap());
                let engine = vikingfs::queue::postgres::PgEngine::open(pg).unwrap();
                Queue::with_engine(Box::new(engine), &db, opts).unwrap()
            }
        }
    }

    /// When the lease of job `id` ends (ms), read from whichever database holds it.
    pub fn lease_end(&self, id: i64) -> i64 {
        match &self.dsn {
            None => rusqlite::Connection::open(self.dir.join("queue.db"))
                .unwrap()
                .query_row("SELECT due FROM jobs WHERE id = ?1", [id], |r| r.get(0))
                .unwrap(),
            Some(dsn) => postgres::Client::connect(dsn, postgres::NoTls)
                .unwrap()
                .query_one("SELECT due FROM vq_jobs WHERE id = $1", &[&id])
                .unwrap()
                .get(0),
        }
    }

    /// Start this test binary again, running only the `child` test of the test module
    /// `module` (its `module_path!()`), as `role`, on this site.
    pub fn spawn_child(&self, module: &str, role: &str, extra: &[(&str, String)]) -> Child {
        // `queue::queue_lease` (binary, module) names the test `queue_lease::child`.
        let module = module.split_once("::").map_or(module, |(_, m)| m);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            &format!("{module}::child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(DIR, &self.dir)
        .env_remove(PG_DSN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        if let Some(dsn) = &self.dsn {
            cmd.env(PG_DSN, dsn);
        }
        cmd.spawn().expect("spawning a child test process")
    }
}

/// One test's queue on `backend`: its [`Site`] (a fresh directory; on PostgreSQL, a server of
/// the test's own), kept alive as long as this is.
pub struct QueueTest {
    pub site: Site,
    pub db: Db,
    _dir: tempfile::TempDir,
}

impl QueueTest {
    pub fn new(backend: Backend) -> QueueTest {
        let db = backend.start();
        let dir = tempfile::tempdir().unwrap();
        QueueTest {
            site: Site {
                dir: dir.path().to_path_buf(),
                dsn: db.dsn(),
            },
            db,
            _dir: dir,
        }
    }
}

impl std::ops::Deref for QueueTest {
    type Target = Site;
    fn deref(&self) -> &Site {
        &self.site
    }
}

/// In a child: its role and the site its parent gave it, or `None` in a normal test run.
pub fn child_role() -> Option<(String, Site)> {
    let role = std::env::var(ROLE).ok()?;
    let site = Site {
        dir: PathBuf::from(std::env::var(DIR).unwrap()),
        dsn: std::env::var(PG_DSN).ok(),
    };
    Some((role, site))
}

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Poll `cond` until it holds; panic naming `what` after [`DEADLINE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Append one line with O_APPEND (one write(2), so lines of several processes never mix).
pub fn log_line(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

pub fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => s.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// Wait for a child's exit with a deadline; its status.
pub fn wait_child(child: &mut Child) -> std::process::ExitStatus {
    let mut status = None;
    wait_until("a child process to exit", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap()
}

/// SIGKILL a child and reap it.
pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Block until the parent closes our stdin (its way of saying "stop now").
pub fn wait_for_stdin_eof() {
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
}

/// Read a child's stdout until it prints `word` (see [`say`]), failing after [`DEADLINE`].
/// Takes the child's stdout; a thread keeps draining it so the child never blocks on it.
pub fn wait_child_says(child: &mut Child, word: &str) {
    use std::io::BufRead;
    let out = std::io::BufReader::new(child.stdout.take().expect("stdout not taken yet"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let want = format!("VQ:{word}");
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) if line.trim() == want => return,
            Ok(_) => {}
            Err(e) => panic!("child did not say {word:?}: {e}"),
        }
    }
}

/// In a child: tell the parent `word` (see [`wait_child_says`]).
pub fn say(word: &str) {
    let mut out = std::io::stdout().lock();
    // libtest may have left "test child ... " unterminated on this stream: start a new line.
    writeln!(out, "\nVQ:{word}").unwrap();
    out.flush().unwrap();
}
