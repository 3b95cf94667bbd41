//! The core without FUSE: inode discipline, visibility rules and the mutation seam.

use std::ffi::OsStr;
use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::fs::mutations::MResult;

/// The real direct mutations, recording each call and refusing (Busy) one path and what is
/// below it, as the locked operations do while someone else holds a TREE lock on it.
struct Recording {
    inner: DirectMutations,
    calls: Mutex<Vec<String>>,
    busy: Option<String>,
    /// What an open with `O_TRUNC` does instead of the direct one, when set.
    on_trunc: Option<Box<OnTrunc>>,
}

type OnTrunc = dyn Fn(&VPath) -> File + Send + Sync;

impl Recording {
    fn check(&self, op: &str, p: &VPath) -> MResult<()> {
        self.calls.lock().push(format!("{op} {}", p.as_str()));
        let under = |b: &str| {
            p.as_str() == b
                || p.as_str()
                    .strip_prefix(b)
                    .is_some_and(|r| r.starts_with('/'))
        };
        if self.busy.as_deref().is_some_and(under) {
            // As the locked operations answer a lock that stays busy.
            return Err(mutations::MutationError::Io {
                op: "lock",
                path: p.as_str().into(),
                source: std::io::Error::from_raw_os_error(libc::EBUSY),
            });
        }
        Ok(())
    }
}

impl Mutations for Recording {
    fn create(&self, p: &VPath, mode: u32, flags: i32, o: Owner) -> MResult<File> {
        self.check("create", p)?;
        self.inner.create(p, mode, flags, o)
    }
    fn open_write(&self, p: &VPath, flags: i32) -> MResult<File> {
        self.check("open_write", p)?;
        match &self.on_trunc {
            Some(f) if flags & libc::O_TRUNC != 0 => Ok(f(p)),
            _ => self.inner.open_write(p, flags),
        }
    }
    fn file_written(&self, p: &VPath) {
        let _ = self.check("file_written", p);
    }
    fn mkdir(&self, p: &VPath, mode: u32, o: Owner) -> MResult<()> {
        self.check("mkdir", p)?;
        self.inner.mkdir(p, mode, o)
    }
    fn mknod(&self, p: &VPath, mode: u32, rdev: u64, o: Owner) -> MResult<()> {
        self.check("mknod", p)?;
        self.inner.mknod(p, mode, rdev, o)
    }
    fn symlink(&self, t: &OsStr, p: &VPath, o: Owner) -> MResult<()> {
        self.check("symlink", p)?;
        self.inner.symlink(t, p, o)
    }
    fn link(&self, a: &VPath, b: &VPath) -> MResult<()> {
        self.check("link", b)?;
        self.inner.link(a, b)
    }
    fn unlink(&self, p: &VPath) -> MResult<()> {
        self.check("unlink", p)?;
        self.inner.unlink(p)
    }
    fn wait_unlocked(&self, p: &VPath) -> MResult<()> {
        self.check("wait_unlocked", p)
    }
    fn rmdir(&self, p: &VPath) -> MResult<()> {
        self.check("rmdir", p)?;
        self.inner.rmdir(p)
    }
    fn rename(&self, a: &VPath, b: &VPath, m: RenameMode) -> MResult<()> {
        self.check("rename", a)?;
        self.inner.rename(a, b, m)
    }
    fn setattr(&self, p: &VPath, c: &AttrChange) -> MResult<()> {
        self.check("setattr", p)?;
        self.inner.setattr(p, c)
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    ws: Workspace,
    rec: Arc<Recording>,
    fs: VikingFs,
    res: u64,
}

fn fixture(busy: Option<&str>) -> Fixture {
    fixture_with(busy, FsConfig::default())
}

fn fixture_with(busy: Option<&str>, config: FsConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let rec = Arc::new(Recording {
        inner: DirectMutations::new(&ws).unwrap(),
        calls: Mutex::new(Vec::new()),
        busy: busy.map(String::from),
        on_trunc: None,
    });
    let fs = VikingFs::new(&ws, rec.clone()).unwrap().with_config(config);
    let res = fs.lookup(ROOT_INO, OsStr::new("resources")).unwrap().ino;
    Fixture {
        _dir: dir,
        ws,
        rec,
        fs,
        res,
    }
}

const ME: Owner = Owner { uid: 0, gid: 0 };

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// The names a listing of directory `ino` shows, in order.
fn list(fs: &VikingFs, ino: u64) -> Vec<String> {
    let dh = fs.opendir(ino).unwrap();
    let mut names = Vec::new();
    fs.readdir(dh, 0, |_, e| {
        names.push(e.name.to_string_lossy().into_owned());
        false
    })
    .unwrap();
    fs.releasedir(dh);
    names
}

#[test]
fn lookups_are_counted_and_forget_drops_the_inode() {
    let f = fixture(None);
    let (a, fh) =
        f.fs.create(f.res, os("x"), 0o644, libc::O_WRONLY, ME)
            .unwrap();
    f.fs.release(fh).unwrap();
    assert_eq!(f.fs.inodes().lookup_count(a.ino), 1);
    let again = f.fs.lookup(f.res, os("x")).unwrap();
    assert_eq!(again.ino, a.ino);
    assert_eq!(f.fs.inodes().lookup_count(a.ino), 2);
    let before = f.fs.inodes().len();
    f.fs.forget(a.ino, 1);
    assert_eq!(f.fs.inodes().len(), before);
    f.fs.forget(a.ino, 1);
    assert_eq!(f.fs.inodes().len(), before - 1);
    assert_eq!(f.fs.getattr(a.ino).unwrap_err().errno(), libc::ESTALE);
    // The root is never forgotten.
    f.fs.forget(ROOT_INO, 100);
    assert!(f.fs.getattr(ROOT_INO).is_ok());
}

#[test]
fn hard_links_share_one_inode_with_the_right_nlink() {
    let f = fixture(None);
    let (a, fh) =
        f.fs.create(f.res, os("x"), 0o644, libc::O_WRONLY, ME)
            .unwrap();
    f.fs.release(fh).unwrap();
    let l = f.fs.link(a.ino, f.res, os("y")).unwrap();
    assert_eq!(l.ino, a.ino);
    assert_eq!(l.st.st_nlink, 2);
    assert_eq!(f.fs.lookup(f.res, os("y")).unwrap().ino, a.ino);
    assert_eq!(f.fs.inodes().lookup_count(a.ino), 3);
    // The first name goes; the inode is still reachable (and writable) by the other.
    f.fs.unlink(f.res, os("x")).unwrap();
    assert_eq!(f.fs.getattr(a.ino).unwrap().st.st_nlink, 1);
    let fh = f.fs.open(a.ino, libc::O_WRONLY).unwrap();
    f.fs.write(fh, 0, b"hi").unwrap();
    f.fs.release(fh).unwrap();
    assert!(f
        .rec
        .calls
        .lock()
        .contains(&"file_written resources/y".to_string()));
}

#[test]
fn internal_names_are_hidden_and_cannot_be_created() {
    let f = fixture(None);
    let d = f.ws.data_root().join("resources");
    std::fs::write(d.join(".path.ovlock"), "").unwrap();
    std::fs::write(d.join(".abstract.md"), "sum").unwrap();
    std::fs::write(d.join("plain.md"), "p").unwrap();
    assert_eq!(
        f.fs.lookup(f.res, os(".path.ovlock")).unwrap_err().errno(),
        libc::ENOENT
    );
    let e =
        f.fs.create(f.res, os(".vikingfs.x"), 0o644, libc::O_WRONLY, ME);
    assert_eq!(e.unwrap_err().errno(), libc::EPERM);
    // Neither the lock file nor the sidecar is listed (see the next test for the sidecar).
    assert_eq!(list(&f.fs, f.res), [".", "..", "plain.md"]);
    // Sidecars read by name, never written, and look read-only.
    let s = f.fs.lookup(f.res, os(".abstract.md")).unwrap();
    assert_eq!(s.st.st_mode & 0o222, 0);
    let fh = f.fs.open(s.ino, libc::O_RDONLY).unwrap();
    assert_eq!(f.fs.read(fh, 0, 100).unwrap(), b"sum");
    f.fs.release(fh).unwrap();
    assert_eq!(
        f.fs.open(s.ino, libc::O_WRONLY).unwrap_err().errno(),
        libc::EACCES
    );
    assert_eq!(
        f.fs.unlink(f.res, os(".abstract.md")).unwrap_err().errno(),
        libc::EACCES
    );
    assert_eq!(f.fs.open_file_handles(), 0);
}

#[test]
fn sidecars_are_listed_only_with_show_summaries() {
    for show in [false, true] {
        let f = fixture_with(
            None,
            FsConfig {
                show_summaries: show,
            },
        );
        let d = f.ws.data_root().join("resources/d");
        std::fs::create_dir(&d).unwrap();
        for n in [
            "z.md",
            ".overview.md",
            ".abstract.md",
            ".exact.ovlock.z.md.0",
        ] {
            std::fs::write(d.join(n), n).unwrap();
        }
        let di = f.fs.lookup(f.res, os("d")).unwrap().ino;
        let got = list(&f.fs, di);
        assert_eq!(got[..3], [".", "..", "z.md"], "show_summaries={show}");
        // Listed after the user's entries, so that `rm -rf` reaches them last.
        let mut sidecars = got[3..].to_vec();
        sidecars.sort();
        let want: &[&str] = if show {
            &[".abstract.md", ".overview.md"]
        } else {
            &[]
        };
        assert_eq!(sidecars, want, "show_summaries={show}");
        // Listed or not, a sidecar answers by name.
        let s = f.fs.lookup(di, os(".overview.md")).unwrap();
        let fh = f.fs.open(s.ino, libc::O_RDONLY).unwrap();
        assert_eq!(f.fs.read(fh, 0, 100).unwrap(), b".overview.md");
        f.fs.release(fh).unwrap();
        // The directory shows nothing once z.md goes, and rmdir takes its sidecars with it.
        f.fs.unlink(di, os("z.md")).unwrap();
        assert_eq!(list(&f.fs, di).len(), if show { 4 } else { 2 });
        f.fs.rmdir(f.res, os("d")).unwrap();
        assert!(!d.exists(), "show_summaries={show}");
    }
}

/// Unlinking a sidecar while its directory holds a user entry: read-only derived data
/// (EACCES), unless someone else's lock covers it, which answers first (EBUSY), as it does
/// for the user entry itself. With nothing else left, the sidecar goes (or waits, busy).
#[test]
fn sidecar_unlink_is_busy_under_a_lock_and_read_only_otherwise() {
    for locked in [false, true] {
        let f = fixture(locked.then_some("resources/d"));
        let d = f.ws.data_root().join("resources/d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("f.md"), "f").unwrap();
        std::fs::write(d.join(".overview.md"), "o").unwrap();
        let di = f.fs.lookup(f.res, os("d")).unwrap().ino;
        let errno = |n: &str| f.fs.unlink(di, os(n)).err().map(|e| e.errno());
        if locked {
            assert_eq!(errno("f.md"), Some(libc::EBUSY));
            assert_eq!(errno(".overview.md"), Some(libc::EBUSY));
            // Its holder removed the user entry meanwhile: the sidecar is still busy.
            std::fs::remove_file(d.join("f.md")).unwrap();
            assert_eq!(errno(".overview.md"), Some(libc::EBUSY));
            assert!(d.join(".overview.md").exists());
            let calls = f.rec.calls.lock().clone();
            assert!(
                calls.contains(&"wait_unlocked resources/d/.overview.md".to_string()),
                "{calls:?}"
            );
        } else {
            assert_eq!(errno(".overview.md"), Some(libc::EACCES));
            assert!(d.join(".overview.md").exists());
            assert_eq!(errno("f.md"), None);
            assert_eq!(errno(".overview.md"), None);
            assert!(!d.join(".overview.md").exists());
        }
    }
}

#[test]
fn root_holds_only_the_scopes() {
    let f = fixture(None);
    assert_eq!(
        f.fs.mkdir(ROOT_INO, os("other"), 0o755, ME)
            .unwrap_err()
            .errno(),
        libc::EPERM
    );
    assert_eq!(
        f.fs.lookup(ROOT_INO, os("other")).unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(
        f.fs.rmdir(ROOT_INO, os("agent")).unwrap_err().errno(),
        libc::EPERM
    );
}

#[test]
fn rename_modes_and_busy_from_the_seam() {
    let f = fixture(Some("resources/locked"));
    for n in ["a", "b"] {
        let (_, fh) =
            f.fs.create(f.res, os(n), 0o644, libc::O_WRONLY, ME)
                .unwrap();
        f.fs.write(fh, 0, n.as_bytes()).unwrap();
        f.fs.release(fh).unwrap();
    }
    let e = f.fs.create(f.res, os("locked"), 0o644, libc::O_WRONLY, ME);
    assert_eq!(e.unwrap_err().errno(), libc::EBUSY);
    std::fs::write(f.ws.data_root().join("resources/locked"), "").unwrap();
    let e =
        f.fs.rename(f.res, os("a"), f.res, os("b"), RenameMode::NoReplace);
    assert_eq!(e.unwrap_err().errno(), libc::EEXIST);
    f.fs.rename(f.res, os("a"), f.res, os("b"), RenameMode::Exchange)
        .unwrap();
    let d = f.ws.data_root().join("resources");
    assert_eq!(std::fs::read(d.join("a")).unwrap(), b"b");
    assert_eq!(std::fs::read(d.join("b")).unwrap(), b"a");
    let e = f.fs.unlink(f.res, os("locked"));
    assert_eq!(e.unwrap_err().errno(), libc::EBUSY);
    assert!(f.ws.data_root().join("resources/locked").exists());
    let calls = f.rec.calls.lock().clone();
    assert!(
        calls.contains(&"rename resources/a".to_string()),
        "{calls:?}"
    );
    assert!(calls.contains(&"unlink resources/locked".to_string()));
}

/// `> note` may keep the old version by moving the file itself into the history, an empty
/// file taking its name (`ops::history`'s `Keep::Swap`); an open of the same inode on another
/// thread in that moment must get the file that keeps the name, not the one that moved.
#[test]
fn an_open_beside_an_overwrite_kept_whole_gets_the_file_that_keeps_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let (data, attic) = (ws.data_root(), dir.path().join("kept"));
    let swapped = Arc::new(std::sync::Barrier::new(2));
    let on_trunc = {
        let (attic, swapped) = (attic.clone(), swapped.clone());
        move |p: &VPath| {
            let live = data.join(p.as_str());
            std::fs::rename(&live, &attic).unwrap();
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&live)
                .unwrap();
            swapped.wait();
            // Only widens the moment (the other opens fetch the inode meanwhile, and without
            // the truncating lock took the moved file); with it they wait for this open.
            std::thread::sleep(std::time::Duration::from_millis(200));
            file
        }
    };
    let rec = Arc::new(Recording {
        inner: DirectMutations::new(&ws).unwrap(),
        calls: Mutex::new(Vec::new()),
        busy: None,
        on_trunc: Some(Box::new(on_trunc)),
    });
    let fs = VikingFs::new(&ws, rec).unwrap();
    let res = fs.lookup(ROOT_INO, os("resources")).unwrap().ino;
    let (a, fh) = fs
        .create(res, os("note"), 0o644, libc::O_WRONLY, ME)
        .unwrap();
    fs.write(fh, 0, b"the old version").unwrap();
    fs.release(fh).unwrap();
    std::thread::scope(|s| {
        let trunc = s.spawn(|| fs.open(a.ino, libc::O_WRONLY | libc::O_TRUNC).unwrap());
        swapped.wait();
        // Meanwhile another program opens the same inode, to read and to append.
        let (r, w) = (
            fs.open(a.ino, libc::O_RDONLY).unwrap(),
            fs.open(a.ino, libc::O_WRONLY | libc::O_APPEND).unwrap(),
        );
        let t = trunc.join().unwrap();
        assert_eq!(fs.read(r, 0, 100).unwrap(), b"", "read the moved version");
        fs.write(w, 0, b"appended").unwrap();
        for fh in [r, w, t] {
            fs.release(fh).unwrap();
        }
    });
    let live = std::fs::read(ws.data_root().join("resources/note")).unwrap();
    assert_eq!(
        live, b"appended",
        "the append went to the file the user sees"
    );
    let kept = std::fs::read(&attic).unwrap();
    assert_eq!(kept, b"the old version", "the kept version is untouched");
}
