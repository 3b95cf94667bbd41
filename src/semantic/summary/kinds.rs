//! What kind of file a child is, in words a person counts in: "Markdown document", "Rust
//! source file", "gzip file". Text files by their extension (else name, else shebang),
//! binaries by the kind [`crate::content::sniff`] found in their bytes.

use super::text::shebang_interpreter;
use super::Child;

/// A kind of file: its singular and plural.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Kind {
    pub one: String,
    pub many: String,
}

impl Kind {
    fn of(one: &str, many: &str) -> Kind {
        Kind {
            one: one.to_string(),
            many: many.to_string(),
        }
    }

    /// A kind whose plural adds an `s`.
    fn regular(one: &str) -> Kind {
        Kind::of(one, &format!("{one}s"))
    }

    pub fn counted(&self, n: usize) -> String {
        if n == 1 {
            format!("1 {}", self.one)
        } else {
            format!("{n} {}", self.many)
        }
    }
}

/// The kind of a child that is a file.
pub(super) fn kind_of(c: &Child) -> Kind {
    match &c.binary {
        Some(desc) => binary_kind(desc),
        None => text_kind(&c.name, &c.text),
    }
}

/// `gzip compressed data, 12 KiB` → gzip file; `PNG image` → PNG image; `ELF executable`.
fn binary_kind(desc: &str) -> Kind {
    // The description is "{kind}, {size}": the size is not part of the kind.
    let kind = desc.rsplit_once(", ").map_or(desc, |(k, _)| k).trim();
    if let Some(label) = kind.strip_suffix(" compressed data") {
        return Kind::regular(&format!("{label} file"));
    }
    if kind == "binary data" || kind == "data that is not UTF-8 text" {
        return Kind::regular("binary file");
    }
    if kind.starts_with("text in UTF-16") {
        return Kind::regular("UTF-16 or UTF-32 text file");
    }
    if let Some(label) = kind.strip_suffix(" data") {
        return Kind::regular(&format!("{label} file"));
    }
    if kind.ends_with(" audio") || kind.ends_with(" video") {
        return Kind::regular(&format!("{kind} file"));
    }
    if kind.is_empty() {
        return Kind::regular("binary file");
    }
    Kind::regular(kind)
}

fn source(lang: &str) -> Kind {
    Kind::regular(&format!("{lang} source file"))
}

fn text_kind(name: &str, text: &str) -> Kind {
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "makefile" | "gnumakefile" => return Kind::regular("Makefile"),
        "dockerfile" | "containerfile" => return Kind::regular("Dockerfile"),
        "cmakelists.txt" => return Kind::regular("CMake file"),
        "license" | "licence" | "copying" | "copyright" | "notice" => {
            return Kind::regular("licence text")
        }
        _ => {}
    }
    let ext = match lower.rsplit_once('.') {
        Some((stem, e)) if !stem.is_empty() => e,
        _ => "",
    };
    match ext {
        "md" | "markdown" | "mdx" => Kind::regular("Markdown document"),
        "rst" => Kind::regular("reStructuredText document"),
        "adoc" | "asciidoc" => Kind::regular("AsciiDoc document"),
        "org" => Kind::regular("Org document"),
        "tex" => Kind::regular("TeX document"),
        "txt" | "text" => Kind::regular("text file"),
        "rs" => source("Rust"),
        "py" | "pyi" => source("Python"),
        "js" | "mjs" | "cjs" | "jsx" => source("JavaScript"),
        "ts" | "tsx" | "mts" | "cts" => source("TypeScript"),
        "go" => source("Go"),
        "c" => source("C"),
        "h" => Kind::regular("C header"),
        "cc" | "cpp" | "cxx" => source("C++"),
        "hpp" | "hh" | "hxx" => Kind::regular("C++ header"),
        "java" => source("Java"),
        "kt" | "kts" => source("Kotlin"),
        "swift" => source("Swift"),
        "cs" => source("C#"),
        "rb" => source("Ruby"),
        "php" => source("PHP"),
        "pl" | "pm" => source("Perl"),
        "lua" => source("Lua"),
        "hs" => source("Haskell"),
        "scala" => source("Scala"),
        "el" => source("Emacs Lisp"),
        "sh" | "bash" | "zsh" | "ksh" | "fish" => Kind::regular("shell script"),
        "ps1" => Kind::regular("PowerShell script"),
        "sql" => Kind::regular("SQL file"),
        "json" | "jsonl" | "ndjson" => Kind::regular("JSON file"),
        "yaml" | "yml" => Kind::regular("YAML file"),
        "toml" => Kind::regular("TOML file"),
        "ini" | "cfg" | "conf" => Kind::regular("configuration file"),
        "xml" => Kind::regular("XML file"),
        "html" | "htm" => Kind::regular("HTML page"),
        "css" | "scss" | "less" => Kind::regular("stylesheet"),
        "csv" | "tsv" => Kind::regular("table"),
        "svg" => Kind::regular("SVG image"),
        "patch" | "diff" => Kind::regular("patch"),
        "log" => Kind::regular("log"),
        "lock" => Kind::regular("lock file"),
        "proto" => Kind::regular("Protocol Buffers file"),
        "cmake" | "mk" | "mak" => Kind::regular("build file"),
        _ => match shebang_interpreter(text) {
            Some(p) if p.starts_with("python") => Kind::regular("Python script"),
            Some(p) if p.starts_with("perl") => Kind::regular("Perl script"),
            Some(p) if p.starts_with("ruby") => Kind::regular("Ruby script"),
            Some("node" | "deno" | "bun") => Kind::regular("JavaScript script"),
            Some(_) => Kind::regular("shell script"),
            None => Kind::regular("text file"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_extension_shebang_and_magic() {
        let k = |c: Child| kind_of(&c).counted(2);
        assert_eq!(k(Child::file("a.md", "")), "2 Markdown documents");
        assert_eq!(k(Child::file("mod.rs", "")), "2 Rust source files");
        assert_eq!(
            k(Child::file("run", "#!/usr/bin/env python3\n")),
            "2 Python scripts"
        );
        assert_eq!(k(Child::file("x.sh", "")), "2 shell scripts");
        assert_eq!(k(Child::file("README.Debian", "x")), "2 text files");
        assert_eq!(k(Child::file(".gitignore", "x")), "2 text files");
        assert_eq!(
            k(Child::binary("c.gz", "gzip compressed data", 12_000)),
            "2 gzip files"
        );
        assert_eq!(k(Child::binary("p.png", "PNG image", 9)), "2 PNG images");
        assert_eq!(k(Child::binary("b", "binary data", 9)), "2 binary files");
        assert_eq!(
            kind_of(&Child::file("b.md", "")).counted(1),
            "1 Markdown document"
        );
    }
}
