//! Ignore rules: which paths get derived state (records, sidecars, summary jobs).
//!
//! `.vikingignore` files, in gitignore syntax, at any level of the namespace, over built-in
//! defaults ([`DEFAULT_IGNORE`], replaced by the `vikingfs.index.ignore` key). Decided as git
//! decides: the components of a path are judged from the top, each by the rule files of the
//! directories above it (the deepest file with a matching pattern wins, a `!pattern`
//! re-includes) and then by the defaults; once a directory is ignored, nothing below it can
//! be re-included.
//!
//! An ignored path is an ordinary file through the mount (locked, crash-safe, served); only
//! what is derived from it is skipped. Rule files are cached per directory and looked at
//! again at most every [`RECHECK`]; a rule file changed through vikingfs invalidates its
//! directory at once ([`IgnoreRules::invalidate`]).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::ignore::gitignore::{Gitignore, GitignoreBuilder};
use ::ignore::Match;

use crate::uri::VPath;

/// The rule file's name.
pub const IGNORE_FILE: &str = ".vikingignore";

/// What is ignored when `vikingfs.index.ignore` is not set: version-control internals,
/// dependency and build trees, caches, virtual environments and editor swap files.
pub const DEFAULT_IGNORE: &[&str] = &[
    ".git/",
    ".hg/",
    ".svn/",
    "node_modules/",
    "target/",
    "__pycache__/",
    ".venv/",
    "*.swp",
    "*.swo",
    "*.swx",
    "*~",
    ".#*",
    "\\#*#",
];

/// How long a directory's rule file is trusted before it is looked at again: changes behind
/// vikingfs's back are seen within this.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Past this many cached directories the cache starts over (a rule file is one stat away).
const CACHE_MAX: usize = 65_536;

/// The rules of one data root. Cheap to ask from many threads.
pub struct IgnoreRules {
    root: PathBuf,
    defaults: Gitignore,
    dirs: parking_lot::Mutex<HashMap<String, Cached>>,
}

struct Cached {
    stamp: Option<Stamp>,
    matcher: Option<Arc<Gitignore>>,
    checked: Instant,
}

/// What identifies one version of a rule file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Check patterns as the `vikingfs.index.ignore` key gives them: the first bad one's error.
pub fn check_patterns(patterns: &[String]) -> Result<(), String> {
    let mut b = GitignoreBuilder::new("/");
    for p in patterns {
        b.add_line(None, p).map_err(|e| format!("{p:?}: {e}"))?;
    }
    b.build().map(|_| ()).map_err(|e| e.to_string())
}

impl IgnoreRules {
    /// The rules of `data_root` with `defaults` as the built-in patterns.
    pub fn new(data_root: &Path, defaults: &[String]) -> Result<Self, String> {
        let mut b = GitignoreBuilder::new(data_root);
        for p in defaults {
            b.add_line(None, p).map_err(|e| format!("{p:?}: {e}"))?;
        }
        Ok(IgnoreRules {
            root: data_root.to_path_buf(),
            defaults: b.build().map_err(|e| e.to_string())?,
            dirs: Default::default(),
        })
    }

    /// The rules of `data_root` with [`DEFAULT_IGNORE`].
    pub fn with_defaults(data_root: &Path) -> Self {
        let d: Vec<String> = DEFAULT_IGNORE.iter().map(|s| s.to_string()).collect();
        Self::new(data_root, &d).expect("the built-in patterns parse")
    }

    /// Is `p` (a directory when `is_dir`) ignored: by a rule about it, or about a directory
    /// above it?
    pub fn is_ignored(&self, p: &VPath, is_dir: bool) -> bool {
        if p.is_root() {
            return false;
        }
        let s = p.as_str();
        let mut matchers: Vec<Arc<Gitignore>> = Vec::new();
        let mut start = 0;
        loop {
            // The directory above this component, then the component itself.
            let dir = s[..start].trim_end_matches('/');
            if let Some(m) = self.matcher(dir) {
                matchers.push(m);
            }
            let end = s[start..].find('/').map(|i| start + i);
            let prefix = &s[..end.unwrap_or(s.len())];
            let last = end.is_none();
            if self.decide(&matchers, &self.root.join(prefix), !last || is_dir) {
                return true;
            }
            match end {
                Some(e) => start = e + 1,
                None => return false,
            }
        }
    }

    /// The deepest rule file with a say decides, then the defaults.
    fn decide(&self, matchers: &[Arc<Gitignore>], path: &Path, is_dir: bool) -> bool {
        for m in matchers.iter().rev() {
            match m.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        self.defaults.matched(path, is_dir).is_ignore()
    }

    /// Forget what is cached of `dir`'s rule file (it was just written, moved or removed).
    pub fn invalidate(&self, dir: &VPath) {
        self.dirs.lock().remove(dir.as_str());
    }

    /// The rules of directory `dir` (a data-root-relative path, "" for the root), if it has
    /// a rule file.
    fn matcher(&self, dir: &str) -> Option<Arc<Gitignore>> {
        let now = Instant::now();
        if let Some(c) = self.dirs.lock().get(dir) {
            if now.duration_since(c.checked) < RECHECK {
                return c.matcher.clone();
            }
        }
        let dir_fs = self.root.join(dir);
        let file = dir_fs.join(IGNORE_FILE);
        let stamp = std::fs::symlink_metadata(&file)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| Stamp {
                ino: m.ino(),
                size: m.size(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
            });
        {
            let mut g = self.dirs.lock();
            if let Some(c) = g.get_mut(dir) {
                if c.stamp == stamp {
                    c.checked = now;
                    return c.matcher.clone();
                }
            }
        }
        let matcher = stamp.and_then(|_| build(&dir_fs, &file)).map(Arc::new);
        let mut g = self.dirs.lock();
        if g.len() >= CACHE_MAX {
            g.clear();
        }
        g.insert(
            dir.to_string(),
            Cached {
                stamp,
                matcher: matcher.clone(),
                checked: now,
            },
        );
        matcher
    }
}

/// A rule file's matcher; a line that does not parse is skipped with a warning (the rest
/// still applies), an unreadable file counts as none.
fn build(dir: &Path, file: &Path) -> Option<Gitignore> {
    let mut b = GitignoreBuilder::new(dir);
    if let Some(e) = b.add(file) {
        tracing::warn!(file = %file.display(), "ignore rules: {e}");
    }
    match b.build() {
        Ok(g) if g.num_ignores() + g.num_whitelists() > 0 => Some(g),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(file = %file.display(), "ignore rules: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VPath {
        VPath::from_rel(s).unwrap()
    }

    #[test]
    fn defaults_and_nested_files() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("resources/app/logs")).unwrap();
        let rules = IgnoreRules::with_defaults(root);
        assert!(rules.is_ignored(&p("resources/repo/.git/config"), false));
        assert!(rules.is_ignored(&p("resources/repo/.git"), true));
        assert!(!rules.is_ignored(&p("resources/repo/.gitignore"), false));
        assert!(rules.is_ignored(&p("resources/web/node_modules/x/index.js"), false));
        assert!(rules.is_ignored(&p("resources/notes.md.swp"), false));
        assert!(rules.is_ignored(&p("resources/#notes.md#"), false));
        assert!(!rules.is_ignored(&p("resources/notes.md"), false));
        // `target/` is a directory pattern: a file named target is not ignored.
        assert!(!rules.is_ignored(&p("resources/target"), false));

        std::fs::write(
            root.join("resources/app/.vikingignore"),
            "*.log\nbuild/\n!keep.log\n",
        )
        .unwrap();
        std::fs::write(root.join("resources/app/logs/.vikingignore"), "!deep.log\n").unwrap();
        let rules = IgnoreRules::with_defaults(root);
        assert!(rules.is_ignored(&p("resources/app/run.log"), false));
        assert!(rules.is_ignored(&p("resources/app/sub/run.log"), false));
        assert!(!rules.is_ignored(&p("resources/app/keep.log"), false));
        assert!(rules.is_ignored(&p("resources/app/build/out.txt"), false));
        // A deeper file re-includes what a shallower one ignored.
        assert!(!rules.is_ignored(&p("resources/app/logs/deep.log"), false));
        assert!(rules.is_ignored(&p("resources/app/logs/other.log"), false));
        // Rules apply only below their directory.
        assert!(!rules.is_ignored(&p("resources/run.log"), false));
        // Nothing below an ignored directory comes back.
        std::fs::create_dir_all(root.join("resources/app/build")).unwrap();
        std::fs::write(root.join("resources/app/build/.vikingignore"), "!*\n").unwrap();
        let rules = IgnoreRules::with_defaults(root);
        assert!(rules.is_ignored(&p("resources/app/build/out.txt"), false));
    }

    #[test]
    fn a_changed_rule_file_is_seen_after_invalidate() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("resources/a")).unwrap();
        let rules = IgnoreRules::with_defaults(root);
        assert!(!rules.is_ignored(&p("resources/a/x.txt"), false));
        std::fs::write(root.join("resources/a/.vikingignore"), "x.txt\n").unwrap();
        rules.invalidate(&p("resources/a"));
        assert!(rules.is_ignored(&p("resources/a/x.txt"), false));
        std::fs::remove_file(root.join("resources/a/.vikingignore")).unwrap();
        rules.invalidate(&p("resources/a"));
        assert!(!rules.is_ignored(&p("resources/a/x.txt"), false));
    }

    #[test]
    fn configured_patterns_replace_the_defaults() {
        let d = tempfile::tempdir().unwrap();
        let rules = IgnoreRules::new(d.path(), &["*.tmp".to_string()]).unwrap();
        assert!(!rules.is_ignored(&p("resources/r/.git/config"), false));
        assert!(rules.is_ignored(&p("resources/a.tmp"), false));
        assert!(check_patterns(&["ok/".into()]).is_ok());
        assert!(check_patterns(&["{a".into()]).is_err());
    }
}
