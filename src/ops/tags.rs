//! Tags: OpenViking's explicit `k=v` retrieval tags of a file or directory (its
//! `fs/attrs`, `fs/attrs/set_tags`, `content/set_tags`, and `tags` of `content/batch-write`).
//!
//! - Kept with the file itself, as its extended attribute [`TAGS_XATTR`]
//!   (`user.openviking.tags`: the tags, normalised, one per line): a copy, a move, a backup
//!   with attributes takes them along, and through the mount `getfattr -n
//!   user.openviking.tags FILE` reads them (the mount passes attributes through). A workspace
//!   on a filesystem without user attributes answers the setter's errno (`ENOTSUP`), named.
//! - Normalised as OpenViking normalises them (`openviking/utils/tags.py`): trimmed,
//!   lower-cased, exactly one `=` with both sides non-empty; one value per key, the later
//!   winning, in first-seen key order. A malformed tag in a request is dropped, as
//!   OpenViking's `set_tags` drops it (`discard_invalid=True`).
//! - A change takes the path's lock, as any change does: EXACT for one path, TREE for a
//!   directory set recursively (each file and directory below gets the same change). Tags
//!   are metadata, not content: nothing is re-indexed.

use std::ffi::OsStr;

use super::{Locked, OpsError, Result};
use crate::lock::LockKind;
use crate::uri::VPath;

/// The extended attribute the tags of a file or directory are kept in.
pub const TAGS_XATTR: &str = "user.openviking.tags";

/// How [`Locked::set_tags`] changes a path's tags (OpenViking's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagMode {
    /// The tags given become the tags.
    Replace,
    /// Merged into the tags there by key, the new value winning.
    Append,
    /// No tags.
    Clear,
}

impl TagMode {
    /// OpenViking's name of a mode; `None` for one it does not know.
    pub fn parse(s: &str) -> Option<TagMode> {
        match s {
            "replace" => Some(TagMode::Replace),
            "append" => Some(TagMode::Append),
            "clear" => Some(TagMode::Clear),
            _ => None,
        }
    }
}

/// One tag as OpenViking normalises it (`normalize_search_tag`), or why it is not one.
pub fn normalize_tag(tag: &str) -> std::result::Result<String, String> {
    let v = tag.trim().to_lowercase();
    if v.is_empty() {
        return Err("search tag must be a non-empty k=v string".into());
    }
    if v.matches('=').count() != 1 {
        return Err(format!(
            "invalid search tag '{tag}': expected strict k=v format"
        ));
    }
    let (k, val) = v.split_once('=').expect("one '='");
    if k.is_empty() || val.is_empty() {
        return Err(format!(
            "invalid search tag '{tag}': key and value must both be non-empty"
        ));
    }
    Ok(v)
}

/// `tags` normalised, one value per key (the later wins, in first-seen key order), the
/// malformed dropped: OpenViking's `normalize_search_tags(…, discard_invalid=True)`.
pub fn normalize_tags<'a>(tags: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in tags {
        let Ok(v) = normalize_tag(t) else { continue };
        let (k, val) = v.split_once('=').expect("normalised");
        match out.iter_mut().find(|(key, _)| key == k) {
            Some(e) => e.1 = val.to_string(),
            None => out.push((k.to_string(), val.to_string())),
        }
    }
    out.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

impl Locked {
    /// The tags of `p` (none when it has no attribute).
    pub fn tags(&self, p: &VPath) -> Result<Vec<String>> {
        let raw = self
            .root
            .get_xattr(p, OsStr::new(TAGS_XATTR))
            .map_err(|e| self.tag_error(p, e))?;
        Ok(raw.map_or_else(Vec::new, |b| {
            normalize_tags(String::from_utf8_lossy(&b).lines())
        }))
    }

    /// Change the tags of `p` by `mode` with `tags` (normalised here), and with `recursive`
    /// of every file and directory below a directory `p`, under `p`'s lock (module doc).
    /// Returns the paths whose tags changed.
    pub fn set_tags(
        &self,
        p: &VPath,
        tags: &[String],
        mode: TagMode,
        recursive: bool,
    ) -> Result<Vec<VPath>> {
        let is_dir = self
            .lstat(p)?
            .ok_or_else(|| OpsError::NotFound(p.uri()))?
            .is_dir();
        let kind = if is_dir && recursive {
            LockKind::Tree
        } else {
            LockKind::Exact
        };
        let _guard = self.lock_existing(&[(p.clone(), kind)])?;
        let mut paths = vec![p.clone()];
        if is_dir && recursive {
            let mut files = Vec::new();
            let mut dirs = Vec::new();
            self.walk(p, &mut files, &mut dirs)?;
            paths.extend(dirs);
            paths.extend(files);
        }
        let given = normalize_tags(tags.iter().map(String::as_str));
        let mut changed = Vec::new();
        for q in paths {
            let before = match self.tags(&q) {
                Ok(t) => t,
                // Removed meanwhile below a directory whose TREE lock a mount's change does
                // not wait for: nothing to tag.
                Err(OpsError::NotFound(_)) if q != *p => continue,
                Err(e) => return Err(e),
            };
            let after = match mode {
                TagMode::Replace => given.clone(),
                TagMode::Clear => Vec::new(),
                TagMode::Append => {
                    normalize_tags(before.iter().chain(given.iter()).map(String::as_str))
                }
            };
            if after == before {
                continue;
            }
            let value = after.join("\n");
            self.root
                .set_xattr(
                    &q,
                    OsStr::new(TAGS_XATTR),
                    (!after.is_empty()).then_some(value.as_bytes()),
                )
                .map_err(|e| self.tag_error(&q, e))?;
            changed.push(q);
        }
        Ok(changed)
    }

    fn tag_error(&self, p: &VPath, e: std::io::Error) -> OpsError {
        if crate::sys::is_gone(&e) {
            OpsError::NotFound(p.uri())
        } else {
            OpsError::io(self.backing(p), e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_normalised_as_openviking_normalises_them() {
        assert_eq!(normalize_tag(" Team=Search "), Ok("team=search".into()));
        assert!(normalize_tag("no-equals").is_err());
        assert!(normalize_tag("a=b=c").is_err());
        assert!(normalize_tag("=v").is_err());
        assert!(normalize_tag("  ").is_err());
        assert_eq!(
            normalize_tags(["a=1", "bad", "b=2", "A=3"]),
            ["a=3", "b=2"],
            "one value per key, the later winning, in first-seen order"
        );
        assert_eq!(TagMode::parse("append"), Some(TagMode::Append));
        assert_eq!(TagMode::parse("merge"), None);
    }
}
