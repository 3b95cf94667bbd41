//! A mutation stuck waiting (as on a busy lock) holds one worker only: other paths keep
//! answering. The mount runs in this process with a seam whose unlink of one path blocks
//! until the test lets it go.

use std::ffi::OsStr;
use std::fs::File;
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use vikingfs::fs::mutations::{MResult, MutationError};
use vikingfs::fs::{AttrChange, DirectMutations, Mutations, Owner, RenameMode, VikingFs};
use vikingfs::fuse::mount::{MountOptions, Mounted};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

/// Direct mutations, except that unlink of `slow` waits for a go (then answers Busy).
struct Stalling {
    inner: DirectMutations,
    slow: VPath,
    entered: Mutex<Sender<()>>,
    go: Mutex<Receiver<()>>,
}

impl Mutations for Stalling {
    fn create(&self, p: &VPath, m: u32, f: i32, o: Owner) -> MResult<File> {
        self.inner.create(p, m, f, o)
    }
    fn open_write(&self, p: &VPath, f: i32) -> MResult<File> {
        self.inner.open_write(p, f)
    }
    fn file_written(&self, p: &VPath) {
        self.inner.file_written(p)
    }
    fn mkdir(&self, p: &VPath, m: u32, o: Owner) -> MResult<()> {
        self.inner.mkdir(p, m, o)
    }
    fn mknod(&self, p: &VPath, m: u32, r: u64, o: Owner) -> MResult<()> {
        self.inner.mknod(p, m, r, o)
    }
    fn symlink(&self, t: &OsStr, p: &VPath, o: Owner) -> MResult<()> {
        self.inner.symlink(t, p, o)
    }
    fn link(&self, a: &VPath, b: &VPath) -> MResult<()> {
        self.inner.link(a, b)
    }
    fn unlink(&self, p: &VPath) -> MResult<()> {
        if *p == self.slow {
            self.entered.lock().send(()).unwrap();
            let _ = self.go.lock().recv_timeout(Duration::from_secs(120));
            return Err(MutationError::Io {
                op: "unlink",
                path: p.as_str().into(),
                source: std::io::Error::from_raw_os_error(libc::EBUSY),
            });
        }
        self.inner.unlink(p)
    }
    fn rmdir(&self, p: &VPath) -> MResult<()> {
        self.inner.rmdir(p)
    }
    fn rename(&self, a: &VPath, b: &VPath, m: RenameMode) -> MResult<()> {
        self.inner.rename(a, b, m)
    }
    fn setattr(&self, p: &VPath, c: &AttrChange) -> MResult<()> {
        self.inner.setattr(p, c)
    }
}

/// Unmounts (lazily, so a panic never leaves the mount behind).
struct Guard(Option<Mounted>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            let _ = vikingfs::fuse::mount::detach(&m.mountpoint);
            let _ = m.join();
        }
    }
}

#[test]
fn a_stalled_unlink_does_not_stall_other_paths() {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    if unsafe { libc::geteuid() } != 0 {
        crate::support::skip("needs root to mount: NOT TESTED");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let data = ws.data_root().join("resources");
    std::fs::create_dir_all(data.join("slow")).unwrap();
    std::fs::create_dir_all(data.join("other")).unwrap();
    std::fs::write(data.join("slow/x"), "x").unwrap();
    std::fs::write(data.join("other/f"), "f").unwrap();
    let (entered_tx, entered_rx) = channel();
    let (go_tx, go_rx) = channel();
    let seam = Stalling {
        inner: DirectMutations::new(&ws).unwrap(),
        slow: VPath::from_rel("resources/slow/x").unwrap(),
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
    };
    let core = Arc::new(VikingFs::new(&ws, Arc::new(seam)).unwrap());
    let mounted = Mounted::start(core, ws.root(), &mp, &MountOptions::default(), || {}).unwrap();
    let guard = Guard(Some(mounted));
    // Declared after the guard so it drops first: on a panic the stalled unlink is released
    // before the unmount waits for in-flight requests.
    let go_tx = go_tx;
    let res = mp.join("resources");

    let mut rm = Command::new("rm")
        .arg(res.join("slow/x"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    entered_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("unlink reached the seam");
    // rm is stuck in the seam; everything else answers.
    let ls = Command::new("ls").arg(res.join("other")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "f\n");
    let st = Command::new("sh")
        .arg("-c")
        .arg("echo g > other/g && cat other/f other/g && ls -a /")
        .current_dir(&res)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(String::from_utf8_lossy(&st.stdout).starts_with("fg\n"));
    // (The stalled directory itself is another matter: the kernel holds its lock during
    // unlink, as on any filesystem.)
    if let Some(st) = rm.try_wait().unwrap() {
        let mut e = String::new();
        std::io::Read::read_to_string(rm.stderr.as_mut().unwrap(), &mut e).unwrap();
        panic!("rm should still be waiting, but ended: {st} {e}");
    }
    go_tx.send(()).unwrap();
    let out = rm.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    assert!(
        data.join("slow/x").exists(),
        "a busy unlink changes nothing"
    );
    drop(guard);
}
