//! Lock tokens `{owner}:{time_ns}:{E|T}` and owner identities.
//!
//! vikingfs owners read `vfs-{host}-{pid}-{start}-{n}`: `host` hashes the boot id and the PID
//! namespace, so a token written on another machine, before a reboot or in another container
//! never looks local; `start` is the process start time (clock ticks since boot), so a recycled
//! pid is not mistaken for the owner; `n` tells apart the handles of one process. A local owner
//! whose process is gone is dead at once; any other owner (OpenViking's UUIDs, peers) is judged
//! by the age of its token against `lock_expire`.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::process::{host_id, process_start, seen, Seen};

use super::LockKind;

/// A parsed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token<'a> {
    pub owner: &'a str,
    pub time_ns: u64,
    pub kind: LockKind,
}

/// What a lock file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content<'a> {
    /// Empty: a holder between its exclusive create and its write. Counts as held.
    Empty,
    Token(Token<'a>),
}

/// Parse lock file content; `None` when it is not a token (a corrupt file).
pub fn parse(raw: &[u8]) -> Option<Content<'_>> {
    if raw.is_empty() {
        return Some(Content::Empty);
    }
    let s = std::str::from_utf8(raw).ok()?;
    let mut it = s.rsplitn(3, ':');
    let kind = match it.next()? {
        "E" => LockKind::Exact,
        "T" => LockKind::Tree,
        _ => return None,
    };
    let time = it.next()?;
    if time.is_empty() || !time.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let time_ns = time.parse().ok()?;
    let owner = it.next()?;
    if owner.is_empty() || owner.contains(':') {
        return None;
    }
    Some(Content::Token(Token {
        owner,
        time_ns,
        kind,
    }))
}

/// Format a token into `buf` (cleared first), without allocating when `buf` has room.
pub fn format_into(buf: &mut String, owner: &str, time_ns: u64, kind: LockKind) {
    use std::fmt::Write;
    buf.clear();
    let _ = write!(buf, "{owner}:{time_ns}:{}", kind.letter());
}

pub fn format(owner: &str, time_ns: u64, kind: LockKind) -> String {
    let mut s = String::with_capacity(owner.len() + 24);
    format_into(&mut s, owner, time_ns, kind);
    s
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

const PREFIX: &str = "vfs-";

/// The owner-name prefix of this process: `vfs-{host}-{pid}-{start}-`.
pub fn process_owner_prefix() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| {
        let pid = std::process::id();
        owner_prefix(pid, process_start(pid).unwrap_or(0))
    })
}

fn owner_prefix(pid: u32, start: u64) -> String {
    format!("{PREFIX}{}-{pid}-{start}-", host_id())
}

/// The owner name of another process of this host, as that process would name its first
/// lock (`vfs-{host}-{pid}-{start}-1`); `None` when it no longer runs.
pub fn owner_of_process(pid: u32) -> Option<String> {
    Some(owner_prefix(pid, process_start(pid)?) + "1")
}

/// A fresh owner name, never handed out before in this process.
pub fn new_owner() -> String {
    numbered("")
}

/// A fresh owner name for background work (a job's write-back): `…-bg{n}`. Still an
/// ordinary owner to OpenViking and to the liveness check; to vikingfs it says that the lock
/// is held for milliseconds by work that gives way, so a foreground request waits for it
/// ([`is_background_owner`]) instead of failing at once.
pub fn new_background_owner() -> String {
    numbered("bg")
}

/// A fresh owner name for vikingfs's own foreground operations (an rm, a mv, a change
/// through the mount, a session's cut): `…-br{n}`. Held for the operation, which does not
/// give way as a job does; another request waits it out ([`is_outwaited_owner`]) rather
/// than fail at once as it does on a user's hold.
pub fn new_brief_owner() -> String {
    numbered("br")
}

/// `PREFIX{tag}{n}`, `n` counting across every kind of owner this process hands out.
fn numbered(tag: &'static str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{}{tag}{}",
        process_owner_prefix(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn tagged(owner: &str, tag: &str) -> bool {
    owner.starts_with(PREFIX)
        && owner.rsplit('-').next().is_some_and(|n| {
            n.strip_prefix(tag)
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Whether `owner` is a vikingfs process's background work ([`new_background_owner`]).
pub fn is_background_owner(owner: &str) -> bool {
    tagged(owner, "bg")
}

/// Whether a lock of `owner` is vikingfs's own work, which a foreground request waits out
/// (a job's, [`new_background_owner`]; an operation's, [`new_brief_owner`]).
pub fn is_outwaited_owner(owner: &str) -> bool {
    is_background_owner(owner) || tagged(owner, "br")
}

/// Whether an owner can be checked directly, and what the check says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// A process of this host (same boot, same PID namespace) that still runs.
    Alive,
    /// A process of this host that no longer runs; the reason says why.
    Dead(String),
    /// Another host, boot or namespace, or not a vikingfs owner: judge by token age.
    Unknown,
}

/// Decide whether `owner` still runs, when it names a process of this host.
pub fn liveness(owner: &str) -> Liveness {
    let Some(rest) = owner.strip_prefix(PREFIX) else {
        return Liveness::Unknown;
    };
    let mut it = rest.split('-');
    let (Some(host), Some(pid), Some(start), Some(_n), None) =
        (it.next(), it.next(), it.next(), it.next(), it.next())
    else {
        return Liveness::Unknown;
    };
    if host != host_id() {
        return Liveness::Unknown;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return Liveness::Unknown;
    };
    match seen(pid) {
        Seen::Gone => Liveness::Dead(format!("owner process {pid} is gone")),
        Seen::Running(s) if s != start => Liveness::Dead(format!(
            "owner process {pid} is gone (pid reused by a process started later)"
        )),
        Seen::Running(_) => Liveness::Alive,
        // /proc would not say: a lock is never broken on a guess.
        Seen::Unknown => Liveness::Unknown,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn background_owners_are_recognised_and_checkable() {
        let bg = super::new_background_owner();
        assert!(super::is_background_owner(&bg), "{bg}");
        assert!(!super::is_background_owner(&super::new_owner()));
        let br = super::new_brief_owner();
        assert!(!super::is_background_owner(&br), "{br}");
        assert!(super::is_outwaited_owner(&br) && super::is_outwaited_owner(&bg));
        assert!(!super::is_outwaited_owner(&super::new_owner()));
        assert!(!super::is_background_owner(
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        ));
        assert_eq!(super::liveness(&bg), super::Liveness::Alive);
    }

    use super::*;

    #[test]
    fn a_zombie_owner_is_dead() {
        // A child that exited and is not reaped yet: a zombie.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while matches!(seen(pid), Seen::Running(_)) {
            assert!(std::time::Instant::now() < deadline, "child never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let start = process_start(pid).expect("a zombie still has its /proc entry");
        let owner = format!("{PREFIX}{}-{pid}-{start}-1", host_id());
        assert!(matches!(liveness(&owner), Liveness::Dead(_)));
        child.wait().unwrap();
        let me = process_owner_prefix().to_string() + "1";
        assert_eq!(liveness(&me), Liveness::Alive);
    }

    #[test]
    fn round_trips_tokens() {
        let t = format("peer-rust-1", 1_700_000_000_123_456_789, LockKind::Tree);
        assert_eq!(t, "peer-rust-1:1700000000123456789:T");
        assert_eq!(
            parse(t.as_bytes()),
            Some(Content::Token(Token {
                owner: "peer-rust-1",
                time_ns: 1_700_000_000_123_456_789,
                kind: LockKind::Tree
            }))
        );
        let uuid = "6f1c2a4e-8a8b-4c1e-9d57-0d7b1c9f3e21:17:E";
        assert!(matches!(
            parse(uuid.as_bytes()),
            Some(Content::Token(Token {
                kind: LockKind::Exact,
                time_ns: 17,
                ..
            }))
        ));
        assert_eq!(parse(b""), Some(Content::Empty));
    }

    #[test]
    fn rejects_what_is_not_a_token() {
        for bad in [
            &b"garbage"[..],
            b"o:12:X",
            b"o:12",
            b":12:E",
            b"o::E",
            b"o:1x:E",
            b"a:b:12:E",
            b"o:12:E\n",
            b"\xff:1:E",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn owners_are_local_alive_and_distinct() {
        let a = new_owner();
        let b = new_owner();
        assert_ne!(a, b);
        assert!(!a.contains(':'));
        assert_eq!(liveness(&a), Liveness::Alive);
        assert_eq!(liveness("6f1c2a4e-8a8b-4c1e"), Liveness::Unknown);
        // Same host, a pid that cannot exist (above pid_max).
        let ghost = format!("vfs-{}-4194400-1-1", host_id());
        assert!(matches!(liveness(&ghost), Liveness::Dead(_)));
        // Our pid with another start time: a recycled pid.
        let recycled = format!("vfs-{}-{}-1-1", host_id(), std::process::id());
        assert!(matches!(liveness(&recycled), Liveness::Dead(_)));
        // Another host's owner is never judged by our process table.
        let foreign = format!("vfs-000000000000-{}-1-1", std::process::id());
        assert_eq!(liveness(&foreign), Liveness::Unknown);
    }
}
