//! The queue tests' processes: the test binary re-executed as a child process with a role,
//! waiting on conditions, and append-only logs that children write and parents check.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vikingfs::queue::{Queue, QueueOptions};

/// Environment variable that turns the test binary into a child with that role.
pub const ROLE: &str = "VQ_CHILD_ROLE";
/// Directory the parent and its children share.
pub const DIR: &str = "VQ_DIR";

/// Environment variable naming the PostgreSQL database a child's queue lives in (unset:
/// SQLite in the shared directory).
pub const PG_DSN: &str = "VQ_PG_DSN";

static POSTGRES: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// From now on this process, and the children it spawns, keep the queue in the PostgreSQL
/// database `dsn` instead of `DIR/queue.db`.
pub fn use_postgres(dsn: &str) {
    POSTGRES.set(dsn.to_string()).unwrap();
}

/// The PostgreSQL database this process's queue lives in, if any.
pub fn postgres_dsn() -> Option<String> {
    POSTGRES
        .get()
        .cloned()
        .or_else(|| std::env::var(PG_DSN).ok())
}

/// Generous: the machine is small and shared.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Start this test binary again, running only the `child` test of the test module `module`
/// (its `module_path!()`), as `role`.
pub fn spawn_child(module: &str, dir: &Path, role: &str, extra: &[(&str, String)]) -> Child {
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
    .env(DIR, dir)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    if let Some(dsn) = postgres_dsn() {
        cmd.env(PG_DSN, dsn);
    }
    cmd.spawn().expect("spawning a child test process")
}

/// In a child: its role and shared directory, or `None` in a normal test run.
pub fn child_role() -> Option<(String, PathBuf)> {
    let role = std::env::var(ROLE).ok()?;
    Some((role, PathBuf::from(std::env::var(DIR).unwrap())))
}

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The queue every process of a test opens: `DIR/queue.db`, or the PostgreSQL database of
/// [`use_postgres`] (spool files stay in `DIR` either way).
pub fn open_queue(dir: &Path, max_attempts: u32, backoff: Duration) -> Queue {
    let opts = QueueOptions {
        max_attempts,
        backoff_base: backoff,
        rerun_delay: Duration::ZERO,
        ..QueueOptions::default()
    };
    let db = dir.join("queue.db");
    match postgres_dsn() {
        None => Queue::open_with(&db, opts).unwrap(),
        Some(dsn) => {
            let pg = std::sync::Arc::new(vikingfs::pg::Pg::connect(&dsn).unwrap());
            let engine = vikingfs::queue::postgres::PgEngine::open(pg).unwrap();
            Queue::with_engine(Box::new(engine), &db, opts).unwrap()
        }
    }
}

/// When the lease of job `id` ends (ms), read from whichever database holds it.
pub fn lease_end(dir: &Path, id: i64) -> i64 {
    match postgres_dsn() {
        None => rusqlite::Connection::open(dir.join("queue.db"))
            .unwrap()
            .query_row("SELECT due FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .unwrap(),
        Some(dsn) => postgres::Client::connect(&dsn, postgres::NoTls)
            .unwrap()
            .query_one("SELECT due FROM vq_jobs WHERE id = $1", &[&id])
            .unwrap()
            .get(0),
    }
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
