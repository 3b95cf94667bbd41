//! What of a file is derived. Two decisions every job and every walk of the tree asks here:
//!
//! - [`sniff`]: is a file's head *text* (indexed, embedded, quoted in snippets and summaries)
//!   or *binary* data (stored, served and locked byte for byte like any file, but only ever
//!   named by its kind and size)? Judged by content, never by name: magic numbers (`infer`),
//!   NUL bytes and byte-order marks (`content_inspector`), then UTF-8 validity and control
//!   characters;
//! - [`IgnoreRules`] (in [`rules`]): does a path get derived state at all?
//! - [`compressed`]: the text a gzip, bzip2 or zstd file decompresses to, which is what is
//!   derived from it;
//! - [`document`]: the text a reader sees in a PDF, an office file, an EPUB or an HTML page,
//!   which is what is derived from it.
//!
//! Pure functions of bytes and rule files: no locks, no stores, no queue.

pub mod compressed;
pub mod document;
pub mod rules;

pub use rules::{IgnoreRules, DEFAULT_IGNORE, IGNORE_FILE};

/// How much of a file [`sniff`] needs to judge it (the magic numbers and the NUL scan).
pub const SNIFF_BYTES: usize = 8 * 1024;

/// What a file's head is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// UTF-8 text: a BOM dropped, a character cut at the end of the head dropped.
    Text(String),
    /// Anything else, by kind: "gzip compressed data", "PNG image", "binary data".
    Binary(String),
}

/// Judge a file by its head (its first bytes, up to any length; [`SNIFF_BYTES`] suffice for
/// the kind, the whole head is checked for valid UTF-8).
pub fn sniff(head: Vec<u8>) -> Content {
    if let Some(t) = infer::get(&head) {
        // infer's "text" matchers (HTML, XML, shell scripts) are text to us too.
        if t.matcher_type() != infer::MatcherType::Text {
            return Content::Binary(describe(&t));
        }
    }
    use content_inspector::ContentType as C;
    let mut head = head;
    match content_inspector::inspect(&head) {
        C::BINARY => return Content::Binary("binary data".into()),
        C::UTF_16LE | C::UTF_16BE | C::UTF_32LE | C::UTF_32BE => {
            // Text, but not in the encoding the index, the model and the summaries speak.
            return Content::Binary("text in UTF-16 or UTF-32 (not indexed)".into());
        }
        C::UTF_8_BOM => {
            head.drain(..3);
        }
        C::UTF_8 => {}
    }
    let text = match String::from_utf8(head) {
        Ok(t) => t,
        Err(e) => {
            let u = e.utf8_error();
            let at = u.valid_up_to();
            let len = e.as_bytes().len();
            // Only a character the head's end cut in two is forgiven.
            if u.error_len().is_some() || len - at > 3 {
                return Content::Binary("data that is not UTF-8 text".into());
            }
            let mut b = e.into_bytes();
            b.truncate(at);
            String::from_utf8(b).expect("valid up to the cut")
        }
    };
    // Text has few control characters (beyond tabs, newlines, form feeds and the escapes
    // of a coloured log); data that happens to decode has many.
    let (mut chars, mut controls) = (0usize, 0usize);
    for c in text.chars() {
        chars += 1;
        if c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b') {
            controls += 1;
        }
    }
    if controls > 0 && controls * 100 > chars {
        return Content::Binary("binary data".into());
    }
    Content::Text(text)
}

/// A binary's kind in words, from its magic number.
fn describe(t: &infer::Type) -> String {
    use infer::MatcherType as M;
    let ext = t.extension();
    let label = match ext {
        "gz" => "gzip",
        "bz2" => "bzip2",
        "zst" => "zstd",
        "Z" => "compress",
        "7z" => "7-Zip",
        "elf" => "ELF",
        "exe" | "dll" => "PE",
        "wasm" => "WebAssembly",
        "jpg" => "JPEG",
        "deb" => "Debian",
        "sqlite" => return "SQLite database".into(),
        _ => "",
    };
    let label = if label.is_empty() {
        ext.to_ascii_uppercase()
    } else {
        label.to_string()
    };
    let noun = match t.matcher_type() {
        M::Archive if ["gz", "bz2", "xz", "zst", "lz4", "Z", "lz"].contains(&ext) => {
            "compressed data"
        }
        M::Archive => "archive",
        M::App => "executable",
        M::Audio => "audio",
        M::Book => "e-book",
        M::Doc => "document",
        M::Font => "font",
        M::Image => "image",
        M::Video => "video",
        M::Text | M::Custom => "data",
    };
    format!("{label} {noun}")
}

/// A size as people read it: `512 B`, `12 KiB`, `3.4 MiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.0} {}", UNITS[u])
    }
}

/// Text fit to quote: control characters (a log's colour escapes, stray form feeds) become
/// spaces and runs of whitespace one space.
pub fn quotable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for w in text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip_of(text: &[u8]) -> Vec<u8> {
        // A real gzip member: header, a stored (uncompressed) deflate block, CRC and size.
        let mut v = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1];
        let n = text.len() as u16;
        v.extend_from_slice(&n.to_le_bytes());
        v.extend_from_slice(&(!n).to_le_bytes());
        v.extend_from_slice(text);
        v.extend_from_slice(&[0; 8]);
        v
    }

    #[test]
    fn text_stays_text() {
        assert_eq!(
            sniff(b"# Title\n\nBody.\n".to_vec()),
            Content::Text("# Title\n\nBody.\n".into())
        );
        assert_eq!(sniff(Vec::new()), Content::Text(String::new()));
        let bom = [&[0xEF, 0xBB, 0xBF][..], "héllo".as_bytes()].concat();
        assert_eq!(sniff(bom), Content::Text("héllo".into()));
        // A head cut inside a character keeps what comes before it.
        let mut cut = "日本語".as_bytes().to_vec();
        cut.pop();
        assert_eq!(sniff(cut), Content::Text("日本".into()));
        // A coloured log line is text.
        assert!(matches!(
            sniff(b"\x1b[31merror\x1b[0m: disk\n".to_vec()),
            Content::Text(_)
        ));
        // infer's text kinds are text.
        assert!(matches!(
            sniff(b"#!/bin/sh\necho hi\n".to_vec()),
            Content::Text(_)
        ));
    }

    #[test]
    fn binaries_are_named_by_kind() {
        assert_eq!(
            sniff(gzip_of(b"changelog")),
            Content::Binary("gzip compressed data".into())
        );
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        assert_eq!(sniff(png), Content::Binary("PNG image".into()));
        assert_eq!(
            sniff([&b"\x7fELF\x02\x01\x01"[..], &[0; 57]].concat()),
            Content::Binary("ELF executable".into())
        );
        assert_eq!(
            sniff(b"abc\0def".to_vec()),
            Content::Binary("binary data".into())
        );
        // Latin-1 is not UTF-8: not quoted (it would come out as replacement characters).
        assert!(matches!(
            sniff(b"caf\xe9 cr\xe8me".to_vec()),
            Content::Binary(_)
        ));
        // Valid UTF-8 full of control characters is data.
        let noisy: Vec<u8> = (0..400u32)
            .map(|i| if i % 5 == 0 { 0x01 } else { b'a' })
            .collect();
        assert_eq!(sniff(noisy), Content::Binary("binary data".into()));
        let utf16 = [&[0xFF, 0xFE][..], &[b'h', 0, b'i', 0]].concat();
        assert!(matches!(sniff(utf16), Content::Binary(_)));
    }

    #[test]
    fn sizes_and_quotes() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(12 * 1024 + 100), "12 KiB");
        assert_eq!(human_size(3_565_158), "3.4 MiB");
        assert_eq!(quotable(" a\x1b[0m\n\tb\x0c c "), "a [0m b c");
    }
}
