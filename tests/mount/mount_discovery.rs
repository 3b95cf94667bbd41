//! Finding the workspace from a mount: commands run inside a vikingfs mount (no
//! `--workspace`, a HOME whose default workspace does not exist) act on that mount's workspace,
//! take paths under it wherever a `viking://` URI goes and name `find`'s results by path;
//! `status` with no workspace named lists this host's mounts, a dead one with its remedy.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{self, daemon::Mount, token};

/// `vikingfs ARGS` run in `dir` with the mount's HOME and no workspace named.
fn inside(m: &Mount, dir: &Path, args: &[&str]) -> Output {
    support::vikingfs(m.dir.path())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The mount's default workspace (`HOME/.vikingfs/workspace`), which no test here may create.
fn default_ws(m: &Mount) -> std::path::PathBuf {
    m.dir.path().join(".vikingfs/workspace")
}

fn drain(m: &Mount) {
    let out = m.cli(&["wait", "--timeout", "300"]).output().unwrap();
    support::assert_ok(&out, &["wait"]);
}

/// The bug: `find` run inside the mount searched `~/.vikingfs/workspace` (creating it) and
/// printed nothing. Now find, status, config show and rm there act on the mount's workspace.
#[test]
fn find_rm_and_status_inside_a_mount_act_on_its_workspace() {
    let m = Mount::new();
    let tok = token("inside-a-mount");
    std::fs::write(m.res().join("note.md"), format!("a note about {tok}\n")).unwrap();
    drain(&m);

    let out = inside(&m, &m.res(), &["find", &tok, "--mode", "lexical"]);
    support::assert_ok(&out, &["find", &tok]);
    let path = m.mp.join("resources/note.md");
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first.split('\t').nth(1),
        Some(path.to_str().unwrap()),
        "results inside a mount are its paths: {}",
        stdout(&out)
    );
    // --uris, and --json keeping the uri beside the path.
    let out = inside(&m, &m.res(), &["find", &tok, "--uris", "-n", "1"]);
    assert!(
        stdout(&out).contains("\tviking://resources/note.md\t"),
        "{}",
        stdout(&out)
    );
    let out = inside(&m, &m.mp, &["find", &tok, "--json", "-n", "1"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["uri"], "viking://resources/note.md");
    assert_eq!(v[0]["path"], path.to_str().unwrap());

    let out = inside(&m, &m.res(), &["status", "--json"]);
    support::assert_ok(&out, &["status"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["workspace"],
        m.ws.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(v["daemons"][0]["pid"], m.pid(), "{v}");
    let out = inside(&m, &m.res(), &["config", "show"]);
    assert!(
        stdout(&out).contains(&format!(
            "storage.workspace = {:?}",
            m.ws.canonicalize().unwrap()
        )) && stdout(&out).contains(&format!("# mount {}", m.mp.display())),
        "{}",
        stdout(&out)
    );

    let out = inside(&m, &m.res(), &["rm", "./note.md"]);
    support::assert_ok(&out, &["rm", "./note.md"]);
    assert!(!m.backing().join("note.md").exists());
    let out = inside(&m, &m.res(), &["find", &tok, "--mode", "lexical"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        !default_ws(&m).exists(),
        "a command in the mount made the default workspace"
    );
}

/// `--under .`, `mv`, `write`, `add-resource --to` and session paths take paths under the
/// mount, relative or absolute, and from outside it a path argument names the workspace too.
#[test]
fn paths_under_a_mount_stand_for_uris() {
    let m = Mount::new();
    let tok = token("paths-for-uris");
    for d in ["a", "b"] {
        std::fs::create_dir_all(m.res().join(d)).unwrap();
        std::fs::write(m.res().join(d).join("f.md"), format!("{d} holds {tok}\n")).unwrap();
    }
    drain(&m);
    let found = |dir: &Path, under: &str| -> Vec<String> {
        let out = inside(
            &m,
            dir,
            &[
                "find", &tok, "--mode", "lexical", "--json", "--under", under,
            ],
        );
        // The files' own records (level 2), not their directories' summaries.
        support::hits(&out)
            .into_iter()
            .filter(|(_, level, _)| *level == 2)
            .map(|(uri, _, _)| uri)
            .collect()
    };
    assert_eq!(
        found(&m.res().join("a"), "."),
        ["viking://resources/a/f.md"]
    );
    assert_eq!(
        found(&m.res().join("a"), "../b/f.md"),
        ["viking://resources/b/f.md"]
    );
    // From outside the mount an absolute path under it names the workspace.
    assert_eq!(
        found(m.dir.path(), m.res().join("b").to_str().unwrap()),
        ["viking://resources/b/f.md"]
    );

    let out = inside(&m, &m.res(), &["mv", "a/f.md", "./b/moved.md"]);
    support::assert_ok(&out, &["mv"]);
    assert!(m.backing().join("b/moved.md").is_file() && !m.backing().join("a/f.md").exists());
    let out = support::vikingfs(m.dir.path())
        .args(["write", "./new.md"])
        .current_dir(m.res().join("a"))
        .stdin(std::fs::File::open(m.backing().join("b/moved.md")).unwrap())
        .output()
        .unwrap();
    support::assert_ok(&out, &["write", "./new.md"]);
    assert_eq!(
        std::fs::read_to_string(m.backing().join("a/new.md")).unwrap(),
        format!("a holds {tok}\n")
    );
    let src = m.dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x.md"), "imported\n").unwrap();
    let out = inside(
        &m,
        &m.mp,
        &[
            "add-resource",
            src.to_str().unwrap(),
            "--to",
            "resources/imported",
        ],
    );
    support::assert_ok(&out, &["add-resource"]);
    assert_eq!(stdout(&out).trim(), "viking://resources/imported");
    assert!(m.backing().join("imported/x.md").is_file());

    let out = inside(&m, &m.mp, &["session", "add", "s1", "user", "hello"]);
    support::assert_ok(&out, &["session", "add"]);
    let sdir = m.mp.join("user/default/sessions/s1");
    let out = inside(&m, &sdir, &["session", "show", ".", "--json"]);
    support::assert_ok(&out, &["session", "show", "."]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["uri"], "viking://user/default/sessions/s1");
    assert_eq!(v["messages"][0]["content"], "hello");

    let out = inside(&m, &m.res(), &["rm", "-r", "./b", "a/new.md"]);
    support::assert_ok(&out, &["rm", "-r", "./b"]);
    assert!(!m.backing().join("b").exists() && !m.backing().join("a/new.md").exists());
    assert!(!default_ws(&m).exists());
}

/// A path that is neither a URI nor under a mount of the workspace is one line naming it and
/// the mount, and nothing is removed (not even the arguments before it).
#[test]
fn a_path_outside_the_workspaces_mounts_is_refused_in_one_line() {
    let m = Mount::new();
    std::fs::write(m.res().join("keep.md"), "kept\n").unwrap();
    let elsewhere = m.dir.path().join("elsewhere.md");
    std::fs::write(&elsewhere, "not in the namespace\n").unwrap();
    let out = inside(
        &m,
        &m.res(),
        &["rm", "keep.md", elsewhere.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(elsewhere.to_str().unwrap())
            && err.contains(&format!("mounted at {}", m.mp.display())),
        "{err}"
    );
    assert!(m.backing().join("keep.md").is_file() && elsewhere.is_file());

    // Under the mount, but --workspace names another workspace: refused, naming both.
    let other = m.dir.path().join("other-ws");
    let out = support::vikingfs(m.dir.path())
        .arg("--workspace")
        .arg(&other)
        .args(["rm", "keep.md"])
        .current_dir(m.res())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("leave out --workspace") && err.contains(m.ws.to_str().unwrap()),
        "{err}"
    );
    assert!(m.backing().join("keep.md").is_file() && !other.exists());
}

/// The entry of `status --json` (no workspace named) for the mount point `mp`.
fn listed(home: &Path, mp: &Path) -> Option<serde_json::Value> {
    let out = support::vikingfs(home)
        .arg("status")
        .arg("--json")
        .current_dir("/")
        .output()
        .unwrap();
    // No mount left on the host (other tests' included): one line, exit 1.
    if String::from_utf8_lossy(&out.stderr).contains("no vikingfs mounts and no workspace") {
        assert_eq!(out.status.code(), Some(1));
        return None;
    }
    support::assert_ok(&out, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .expect("an array of mounts")
        .iter()
        .find(|e| e["mountpoint"] == mp.to_str().unwrap())
        .cloned()
}

/// With no workspace named and none at the default place, `status` lists this host's mounts
/// (with their workspaces and daemons), a dead one with `umount -l`, and creates nothing.
#[test]
fn status_with_no_workspace_named_lists_the_mounts_and_a_dead_one() {
    let m = Mount::new();
    let home = tempfile::tempdir().unwrap();
    let e = listed(home.path(), &m.mp).expect("the mount is listed");
    assert_eq!(
        e["workspace"],
        m.ws.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(e["state"], "live");
    assert_eq!(e["daemon_pid"], m.pid());
    let out = support::vikingfs(home.path())
        .arg("status")
        .current_dir("/")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "  {}  workspace {}  daemon pid {}\n",
            m.mp.display(),
            m.ws.canonicalize().unwrap().display(),
            m.pid()
        )),
        "{text}"
    );

    m.kill9();
    let e = listed(home.path(), &m.mp).expect("the dead mount is listed");
    assert_eq!(e["state"], "dead");
    assert_eq!(e["error"], "ENOTCONN");
    assert_eq!(e["remedy"], format!("umount -l {}", m.mp.display()));
    let out = support::vikingfs(home.path())
        .arg("status")
        .current_dir("/")
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(&format!(
            "dead (ENOTCONN): run umount -l {}",
            m.mp.display()
        )),
        "{}",
        stdout(&out)
    );
    // The status of that workspace, named, names its dead mount too (text and JSON).
    let out = m.cli(&["status"]).output().unwrap();
    let want = format!(
        "dead mount: {} (ENOTCONN): run umount -l {}",
        m.mp.display(),
        m.mp.display()
    );
    assert!(stdout(&out).contains(&want), "{}", stdout(&out));
    let out = m.cli(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mounts"][0]["state"], "dead", "{v}");
    let st = Command::new("umount")
        .arg("-l")
        .arg(&m.mp)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(
        listed(home.path(), &m.mp).is_none(),
        "unmounted, still listed"
    );
    assert!(
        !home.path().join(".vikingfs").exists(),
        "status made a workspace"
    );
}

/// With no mount in sight (a mount namespace of its own with every vikingfs mount detached)
/// and no workspace, `status` says so in one line, exit 1.
#[test]
fn status_with_no_mounts_and_no_workspace_says_so() {
    let _m = Mount::new();
    let home = tempfile::tempdir().unwrap();
    let script = format!(
        "awk '{{for (i = 7; i < NF; i++) if ($i == \"-\") {{ if ($(i+1) == \"fuse.vikingfs\") \
         print $5; break }}}}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l && \
         HOME={} {} status",
        home.path().display(),
        support::BIN
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env_remove("VIKINGFS_WORKSPACE")
        .env_remove("VIKINGFS_CONFIG")
        .current_dir("/")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim(),
        format!(
            "vikingfs: no vikingfs mounts and no workspace at {}",
            home.path().join(".vikingfs/workspace").display()
        )
    );
    assert!(!home.path().join(".vikingfs").exists());
}
