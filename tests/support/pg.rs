//! A real PostgreSQL server (18, with pgvector) per test, for the postgres backend's tests.
//!
//! The binaries come from `scripts/fetch-postgres.sh` (`target/postgres`, or the bin directory
//! in `VIKINGFS_PG_BIN`). PostgreSQL refuses to run as root, so the server runs as `nobody`
//! in a temporary directory; `initdb` runs once per machine into a template that each server
//! copies (a copy takes milliseconds, `initdb` seconds). The server stops when the handle
//! drops; `.ci/run` sweeps any a killed test left.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running server; stopped (immediate mode) on drop.
pub struct PgServer {
    bin: PathBuf,
    _dir: tempfile::TempDir,
    data: PathBuf,
    sock: PathBuf,
    port: u16,
    listen: String,
}

fn nobody() -> (u32, u32) {
    let u = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("a user `nobody` to run PostgreSQL as");
    (u.uid.as_raw(), u.gid.as_raw())
}

/// The bin directory of PostgreSQL with pgvector; panics with the remedy when missing.
pub fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("VIKINGFS_PG_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/postgres/bin"),
        PathBuf::from,
    );
    assert!(
        dir.join("postgres").is_file(),
        "no PostgreSQL at {}: run scripts/fetch-postgres.sh (or set VIKINGFS_PG_BIN)",
        dir.display()
    );
    dir
}

/// Run a PostgreSQL tool as `nobody`; panics with its output when it fails.
fn run_as_nobody(bin: &Path, tool: &str, args: &[&str]) {
    let (uid, gid) = nobody();
    let out = Command::new(bin.join(tool))
        .args(args)
        .uid(uid)
        .gid(gid)
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A cluster made by `initdb` once per machine (and PostgreSQL build), copied by each server.
fn template(bin: &Path) -> PathBuf {
    let version = std::fs::metadata(bin.join("postgres"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let t = PathBuf::from(format!("/tmp/vikingfs-pg-template-{version}"));
    let lock = std::fs::File::create(format!("/tmp/vikingfs-pg-template-{version}.lock")).unwrap();
    // Held until `lock` closes at the end of this function.
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("locking the template: {e}"));
    if !t.join("PG_VERSION").exists() {
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir(&t).unwrap();
        let (uid, gid) = nobody();
        std::os::unix::fs::chown(&t, Some(uid), Some(gid)).unwrap();
        run_as_nobody(
            bin,
            "initdb",
            &[
                "-D",
                t.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
    }
    drop(lock);
    t
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl PgServer {
    /// A fresh server on 127.0.0.1 with an empty database `vikingfs`.
    pub fn start() -> PgServer {
        PgServer::start_on("127.0.0.1")
    }

    /// A fresh server listening on `listen` (an address of this host or of a network
    /// namespace's veth) with an empty database `vikingfs`; it lets in clients from
    /// 127.0.0.1 only (see [`PgServer::start_for`]).
    pub fn start_on(listen: &str) -> PgServer {
        PgServer::start_for(listen, None)
    }

    /// [`PgServer::start_on`] letting in clients of the subnet `clients` too (a CIDR, e.g. the
    /// network namespaces of a test lab, `tests/support/netns.rs`).
    pub fn start_for(listen: &str, clients: Option<&str>) -> PgServer {
        let bin = bin_dir();
        let tpl = template(&bin);
        let dir = tempfile::Builder::new()
            .prefix("vikingfs-pg-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let data = dir.path().join("data");
        let sock = dir.path().join("sock");
        let st = Command::new("cp")
            .args(["-a", tpl.to_str().unwrap(), data.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success(), "copying the PostgreSQL template");
        if let Some(net) = clients {
            use std::io::Write;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))
                .unwrap();
            writeln!(hba, "host all all {net} trust").unwrap();
        }
        std::fs::create_dir(&sock).unwrap();
        let (uid, gid) = nobody();
        std::os::unix::fs::chown(&sock, Some(uid), Some(gid)).unwrap();
        let mut s = PgServer {
            bin,
            _dir: dir,
            data,
            sock,
            port: 0,
            listen: listen.to_string(),
        };
        s.port = free_port();
        s.start_again();
        let mut c = postgres::Client::connect(&s.dsn_for("postgres"), postgres::NoTls).unwrap();
        c.batch_execute("CREATE DATABASE vikingfs").unwrap();
        s
    }

    /// The libpq connection string of the database `vikingfs`.
    pub fn dsn(&self) -> String {
        self.dsn_for("vikingfs")
    }

    /// The connection string of database `db` on this server.
    pub fn dsn_for(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.listen, self.port
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Start the (stopped) server again on the same port and data.
    pub fn start_again(&self) {
        let opts = format!(
            "-c listen_addresses={} -p {} -k {} -c fsync=off -c max_connections=200",
            self.listen,
            self.port,
            self.sock.display()
        );
        run_as_nobody(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                self.sock.join("log").to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// Stop the server as a crash would (`immediate`: no checkpoint, clients cut off).
    pub fn stop(&self) {
        run_as_nobody(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    /// A new empty database on this server; its connection string.
    pub fn new_database(&self, name: &str) -> String {
        let mut c = postgres::Client::connect(&self.dsn_for("postgres"), postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        self.dsn_for(name)
    }

    /// A plain client of the database `vikingfs`, for checks.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.dsn(), postgres::NoTls).unwrap()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let (uid, gid) = nobody();
        let _ = Command::new(self.bin.join("pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"])
            .uid(uid)
            .gid(gid)
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
