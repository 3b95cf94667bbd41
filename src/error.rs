//! How an error is told: on one line, with its causes.
//!
//! Every error enum of vikingfs names only its own layer in its message (`index /x/index.db`)
//! and keeps what caused it as its `source()` (the SQLite error), so code above can still ask
//! the cause what it is (its errno, whether it is damage). [`Chain`] prints the whole chain
//! on one line, `index /x/index.db: database disk image is malformed`: the CLI's error line,
//! every log line that names an error, and the text a failed job keeps.

use std::error::Error;
use std::fmt;

/// An error and its causes, `outer: inner: innermost`.
///
/// A cause whose text its parent already shows is left out: some errors of other crates put
/// their source's text in their own (an `io::Error` wrapping another, `serde_json`, `ureq`).
/// The chain stops at an SQLite error: its source is the bare result code ("Error code 11:
/// The database disk image is malformed"), which its own message already spells out.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut cur = self.0;
        while let Some(cause) = next(cur) {
            let text = cause.to_string();
            if !text.is_empty() && !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown = text;
            }
            cur = cause;
        }
        Ok(())
    }
}

/// The cause [`Chain`] goes on to after `e`, if any.
fn next<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    if e.is::<rusqlite::Error>() {
        return None;
    }
    e.source()
}

/// `tracing`'s event macros take their level as a constant; this one takes it at run time,
/// for a failure whose error decides how loud its line is (`ToErrno::level`).
macro_rules! log_at {
    ($level:expr, $($arg:tt)+) => {
        match $level {
            ::tracing::Level::ERROR => ::tracing::error!($($arg)+),
            ::tracing::Level::WARN => ::tracing::warn!($($arg)+),
            ::tracing::Level::INFO => ::tracing::info!($($arg)+),
            ::tracing::Level::DEBUG => ::tracing::debug!($($arg)+),
            _ => ::tracing::trace!($($arg)+),
        }
    };
}
pub(crate) use log_at;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("index {path}")]
    struct Outer {
        path: &'static str,
        #[source]
        source: rusqlite::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("find")]
    struct Top(#[source] Outer);

    #[test]
    fn one_line_with_every_cause_once() {
        let sql = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some("database disk image is malformed".into()),
        );
        let e = Top(Outer {
            path: "/x/index.db",
            source: sql,
        });
        assert_eq!(
            Chain(&e).to_string(),
            "find: index /x/index.db: database disk image is malformed"
        );

        // An error of another crate that shows its source's text: said once.
        #[derive(Debug, thiserror::Error)]
        #[error("request failed: {0}")]
        struct Shows(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("embed")]
        struct Ctx(#[source] Shows);
        let e = Ctx(Shows(std::io::Error::other("connection refused")));
        assert_eq!(
            Chain(&e).to_string(),
            "embed: request failed: connection refused"
        );
    }
}
