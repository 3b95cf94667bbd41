//! Documents: a PDF, an office file (DOCX, PPTX, XLSX; ODT, ODS, ODP), an EPUB or an HTML page
//! is indexed and summarised by the text a reader sees in it, while the file itself is stored
//! and served byte for byte as written. Judged by content (magic numbers, a zip's entry names,
//! an HTML doctype), never by name.
//!
//! Invariants, whatever the bytes (a damaged or hostile file included):
//! - the text is at most `max` bytes, and reading it never inflates more than [`INFLATE_FACTOR`]
//!   × `max` bytes out of the file's compressed streams (a zip bomb, a PDF's huge stream or
//!   object streams), so its time and memory are bounded by the index's own limit;
//! - nothing recurses on the document's structure: the XML and HTML walks are flat loops over a
//!   stream of events (a million nested elements are a million loop turns), and lopdf's parser
//!   stops at a nesting depth of 100;
//! - a reader that panics is caught ([`text`] returns an error): a bad file is named by its kind
//!   like any binary, never the end of the daemon.
//!
//! The caller reads a container (PDF, zip) whole, and only when it is at most
//! `vikingfs.index.max_file_bytes` long; HTML is text, read from its head like any text.
//! Pure functions of bytes, as the rest of [`super`].

use std::cell::Cell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::rc::Rc;

/// How many bytes a document's compressed parts may inflate to, per byte of text allowed:
/// XML and PDF content streams hold several bytes of markup and operators per byte of text.
pub const INFLATE_FACTOR: usize = 16;

/// A kind of document whose text is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `%PDF-`.
    Pdf,
    /// A zip archive: an OOXML, ODF or EPUB container when its entries say so.
    Zip,
    /// An HTML (or XHTML) page.
    Html,
}

impl Kind {
    /// The document kind `head` (a file's first bytes) starts as.
    pub fn of(head: &[u8]) -> Option<Kind> {
        if head.starts_with(b"%PDF-") {
            Some(Kind::Pdf)
        } else if head.starts_with(b"PK\x03\x04") {
            Some(Kind::Zip)
        } else if is_html(head) {
            Some(Kind::Html)
        } else {
            None
        }
    }

    /// Whether the whole file is needed (a container whose index lies anywhere in it), rather
    /// than its head.
    pub fn whole(self) -> bool {
        matches!(self, Kind::Pdf | Kind::Zip)
    }
}

/// At most `max` bytes of the text of `data` (a document of `kind`), and whether there was
/// more. An error, in words, for what is not a readable document of that kind (an ordinary
/// zip archive, an encrypted or damaged file): the caller names it by its kind instead.
pub fn text(kind: Kind, data: &[u8], max: usize) -> Result<(String, bool), String> {
    let read = || {
        let mut out = Out::new(max);
        match kind {
            Kind::Pdf => pdf(data, &mut out)?,
            Kind::Zip => container(data, &mut out)?,
            Kind::Html => html(&String::from_utf8_lossy(data), &mut out),
        }
        Ok(out.finish())
    };
    // A reader's bug on a strange file costs that file its text, never the process.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
        .unwrap_or_else(|_| Err(format!("the {kind:?} reader failed on this file")))
}

/// The text being built: at most `max` bytes (cut at a character boundary), with runs of
/// blank lines squeezed, so a long run of empty paragraphs costs nothing.
struct Out {
    s: String,
    max: usize,
    /// Whether text was dropped at the limit.
    more: bool,
    /// Whether the inflation budget ran out (the file may hold more text).
    spent: Rc<Cell<bool>>,
    /// Inflation left ([`INFLATE_FACTOR`] × `max`), shared with the readers of the
    /// compressed streams ([`Out::bounded`]).
    budget: Rc<Cell<usize>>,
}

impl Out {
    fn new(max: usize) -> Out {
        Out {
            s: String::new(),
            max,
            more: false,
            spent: Rc::default(),
            budget: Rc::new(Cell::new(max.saturating_mul(INFLATE_FACTOR))),
        }
    }

    /// Whether the text is at its limit.
    fn full(&self) -> bool {
        self.more
    }

    /// Whether the inflation budget is spent: nothing more is read.
    fn spent(&self) -> bool {
        self.spent.get()
    }

    fn push(&mut self, t: &str) {
        if self.full() || t.is_empty() {
            return;
        }
        let room = self.max - self.s.len();
        if t.len() <= room {
            self.s.push_str(t);
        } else {
            let mut cut = room;
            while !t.is_char_boundary(cut) {
                cut -= 1;
            }
            self.s.push_str(&t[..cut]);
            self.more = true;
        }
    }

    /// A word break: one space, unless the text already ends in whitespace.
    fn space(&mut self) {
        if !self.s.is_empty() && !self.s.ends_with(char::is_whitespace) {
            self.push(" ");
        }
    }

    /// A line break (none at the start, none twice).
    fn line(&mut self) {
        let t = self.s.trim_end_matches([' ', '\t']).len();
        self.s.truncate(t);
        if !self.s.is_empty() && !self.s.ends_with('\n') {
            self.push("\n");
        }
    }

    /// A blank line: the end of a page.
    fn para(&mut self) {
        self.line();
        if !self.s.is_empty() && !self.s.ends_with("\n\n") {
            self.push("\n");
        }
    }

    /// A reader for a compressed stream that stops where the inflation budget does (marking
    /// the text cut there), and charges what it reads.
    fn bounded<R: Read>(&self, r: R) -> Budgeted<R> {
        Budgeted {
            r,
            budget: self.budget.clone(),
            spent: self.spent.clone(),
        }
    }

    fn finish(mut self) -> (String, bool) {
        let t = self.s.trim_end().len();
        self.s.truncate(t);
        (self.s, self.more || self.spent.get())
    }
}

/// [`Out::bounded`]'s reader.
struct Budgeted<R> {
    r: R,
    budget: Rc<Cell<usize>>,
    spent: Rc<Cell<bool>>,
}

impl<R: Read> Read for Budgeted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.budget.get();
        if left == 0 {
            self.spent.set(true);
            return Ok(0);
        }
        let n = buf.len().min(left);
        let got = self.r.read(&mut buf[..n])?;
        self.budget.set(left - got);
        Ok(got)
    }
}

// ---------------------------------------------------------------------------------------
// PDF

/// A PDF's text, page by page: the strings its content streams show, decoded through each
/// font's ToUnicode map where it has one (else its encoding), with a line break where the
/// text moves to another line and a word break where it moves right past the end of what was
/// shown (by the font's own glyph widths where it gives them), as a reader sees the gaps.
fn pdf(data: &[u8], out: &mut Out) -> Result<(), String> {
    use lopdf::{Document, LoadOptions};
    // Object streams are inflated while loading, each under lopdf's own limit: share the
    // budget between them, so many streams cannot add up to more than it either.
    let objstms = memchr::memmem::find_iter(data, b"/ObjStm").count().max(1);
    let opts = LoadOptions {
        max_decompressed_size: Some(out.budget.get() / objstms),
        ..LoadOptions::default()
    };
    let doc = Document::load_mem_with_options(data, opts).map_err(|e| format!("PDF: {e}"))?;
    if doc.is_encrypted() {
        return Err("PDF: encrypted".into());
    }
    let mut fonts = Fonts::default();
    for (_, page) in doc.get_pages() {
        if out.full() || out.spent() {
            break;
        }
        let Ok(content) = doc.get_page_content_with_limit(page, out.budget.get()) else {
            // Over what is left of the budget: the text ends here.
            out.spent.set(true);
            break;
        };
        out.budget
            .set(out.budget.get().saturating_sub(content.len()));
        let Ok(content) = lopdf::content::Content::decode(&content) else {
            continue;
        };
        let page_fonts = fonts.of_page(&doc, page, out.max);
        page_text(&content.operations, &page_fonts, &fonts, out);
        out.para();
    }
    Ok(())
}

/// A font as text extraction needs it: how its codes decode, and how wide each is.
struct Font<'a> {
    /// The ToUnicode map, where the font has one and it reads.
    unicode: Option<lopdf::Encoding<'a>>,
    encoding: lopdf::Encoding<'a>,
    /// One byte a code (not a composite, Type0, font).
    simple: bool,
    /// A simple font's glyph widths in thousandths of an em, from its first code; empty for
    /// a composite font (two-byte codes), whose text is measured as half an em a character.
    widths: Vec<f32>,
    first: usize,
}

/// The fonts read so far, by the address of their dictionary in the loaded document (which
/// outlives this), each read once; at most [`Fonts::MAX`] of them.
#[derive(Default)]
struct Fonts<'a> {
    read: HashMap<usize, Option<Font<'a>>>,
}

impl<'a> Fonts<'a> {
    const MAX: usize = 256;

    /// The page's font names and the keys of their fonts in `self`.
    fn of_page(
        &mut self,
        doc: &'a lopdf::Document,
        page: lopdf::ObjectId,
        max: usize,
    ) -> HashMap<Vec<u8>, usize> {
        let mut names = HashMap::new();
        for (name, font) in doc.get_page_fonts(page).unwrap_or_default() {
            let key = font as *const lopdf::Dictionary as usize;
            if !self.read.contains_key(&key) && self.read.len() < Self::MAX {
                self.read
                    .insert(key, Self::font(doc, font, max.min(1 << 20)));
            }
            names.insert(name, key);
        }
        names
    }

    fn font(
        doc: &'a lopdf::Document,
        font: &'a lopdf::Dictionary,
        limit: usize,
    ) -> Option<Font<'a>> {
        use lopdf::Encoding;
        // A ToUnicode map says what each code means (ligatures, a composite font's glyph
        // ids); lopdf reads the /Encoding first, so the map is read from a copy without it.
        let unicode = font.has(b"ToUnicode").then(|| {
            let mut d = font.clone();
            d.remove(b"Encoding");
            match d.get_font_encoding_with_limit(doc, limit) {
                Ok(Encoding::UnicodeMapEncoding(m)) => Some(Encoding::UnicodeMapEncoding(m)),
                _ => None,
            }
        });
        let encoding = font.get_font_encoding_with_limit(doc, limit).ok()?;
        let num = |o: &lopdf::Object| o.as_float().ok();
        let widths: Vec<f32> = font
            .get_deref(b"Widths", doc)
            .and_then(lopdf::Object::as_array)
            .map(|w| w.iter().map(|o| num(o).unwrap_or(500.0)).collect())
            .unwrap_or_default();
        let first = font
            .get(b"FirstChar")
            .ok()
            .and_then(num)
            .unwrap_or(0.0)
            .max(0.0) as usize;
        Some(Font {
            simple: !font.has_type(b"Type0")
                && font.get(b"Subtype").and_then(|t| t.as_name()).ok() != Some(b"Type0"),
            unicode: unicode.flatten(),
            encoding,
            widths,
            first,
        })
    }
}

/// One page's text operators into `out`, following where the text is drawn (see [`pdf`]).
fn page_text(
    ops: &[lopdf::content::Operation],
    names: &HashMap<Vec<u8>, usize>,
    fonts: &Fonts,
    out: &mut Out,
) {
    use lopdf::Object;
    let f = |args: &[Object], i: usize| args.get(i).and_then(|o| o.as_float().ok()).unwrap_or(0.0);
    let mut font: Option<&Font> = None;
    // The font size and the text matrix's scale; where the current line starts and where the
    // text drawn so far ends, in page units; character and word spacing.
    let (mut size, mut scale) = (10.0f32, 1.0f32);
    let (mut line_x, mut line_y, mut x, mut y) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let (mut tc, mut tw) = (0.0f32, 0.0f32);
    // A move to (nx, ny): another line, or a gap on this one.
    let moved = |out: &mut Out, nx: f32, ny: f32, x: f32, y: f32, em: f32| {
        if (ny - y).abs() > 0.5 * em {
            out.line();
        } else if nx > x + 0.15 * em || nx < x - 2.0 * em {
            out.space();
        }
    };
    for op in ops {
        if out.full() {
            return;
        }
        let args = &op.operands;
        let em = (size * scale).abs().max(0.1);
        let show = |out: &mut Out, x: &mut f32, bytes: &[u8]| {
            let Some(font) = font else { return };
            // The ToUnicode map where it reads the string (some writers map only their
            // ligatures, or give a simple font a two-byte map), else the encoding.
            let mapped = (font.unicode.as_ref())
                .and_then(|u| u.bytes_to_string(bytes).ok())
                .filter(|s| !s.is_empty() && !s.contains('\u{FFFD}'));
            let by_byte = || {
                // A simple font's one-byte codes read through a two-byte map (gropdf's):
                // each code as `00XX` in the map where it is there, else in the encoding.
                let u = font.unicode.as_ref().filter(|_| font.simple)?;
                let one = |e: &lopdf::Encoding, b: &[u8]| {
                    e.bytes_to_string(b)
                        .ok()
                        .filter(|s| !s.is_empty() && !s.contains('\u{FFFD}'))
                };
                let mut s = String::new();
                for &b in bytes {
                    let c = one(u, &[0, b]).or_else(|| one(&font.encoding, &[b]));
                    s.push_str(c.as_deref().unwrap_or(""));
                }
                Some(s)
            };
            let Some(s) = mapped
                .or_else(by_byte)
                .or_else(|| font.encoding.bytes_to_string(bytes).ok())
            else {
                return;
            };
            out.push(&s);
            let advance: f32 = if font.widths.is_empty() {
                s.chars().count() as f32 * 500.0
            } else {
                bytes
                    .iter()
                    .map(|&b| {
                        (b as usize)
                            .checked_sub(font.first)
                            .and_then(|i| font.widths.get(i))
                            .copied()
                            .unwrap_or(500.0)
                    })
                    .sum()
            };
            let spaces = bytes.iter().filter(|&&b| b == b' ').count() as f32;
            *x += advance / 1000.0 * em + (tc * bytes.len() as f32 + tw * spaces) * scale;
        };
        match op.operator.as_str() {
            "Tf" => {
                font = args
                    .first()
                    .and_then(|n| n.as_name().ok())
                    .and_then(|n| names.get(n))
                    .and_then(|k| fonts.read.get(k))
                    .and_then(Option::as_ref);
                size = f(args, 1);
            }
            "Tc" => tc = f(args, 0),
            "Tw" => tw = f(args, 0),
            "BT" => (line_x, line_y) = (0.0, 0.0),
            "Tm" => {
                let (nx, ny) = (f(args, 4), f(args, 5));
                moved(out, nx, ny, x, y, em);
                scale = f(args, 0).hypot(f(args, 1)).max(f(args, 3).abs());
                (line_x, line_y, x, y) = (nx, ny, nx, ny);
            }
            "Td" | "TD" => {
                let (nx, ny) = (line_x + f(args, 0) * scale, line_y + f(args, 1) * scale);
                moved(out, nx, ny, x, y, em);
                (line_x, line_y, x, y) = (nx, ny, nx, ny);
            }
            "T*" => {
                out.line();
                line_y -= em * 1.2;
                (x, y) = (line_x, line_y);
            }
            "Tj" => {
                if let Some(Object::String(b, _)) = args.first() {
                    show(out, &mut x, b);
                }
            }
            "'" | "\"" => {
                out.line();
                line_y -= em * 1.2;
                (x, y) = (line_x, line_y);
                if let Some(Object::String(b, _)) = args.last() {
                    show(out, &mut x, b);
                }
            }
            "TJ" => {
                for a in args
                    .first()
                    .and_then(|a| a.as_array().ok())
                    .into_iter()
                    .flatten()
                {
                    match a {
                        Object::String(b, _) => show(out, &mut x, b),
                        a => {
                            // A move back by a number of thousandths of an em: a gap of more
                            // than a fifth of one is a word break.
                            let n = a.as_float().unwrap_or(0.0);
                            if n < -200.0 {
                                out.space();
                            }
                            x -= n / 1000.0 * em;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// Zip containers: OOXML, ODF, EPUB

/// How the text of one XML part is walked: only the text inside `text_in` elements (all text
/// when empty), none inside `skip`; `para` elements end a line, `tab` and `space` (empty)
/// elements are a word break, `brk` a line break. Names are local (no namespace prefix).
struct Rules {
    text_in: &'static [&'static str],
    skip: &'static [&'static str],
    para: &'static [&'static str],
    tab: &'static [&'static str],
    brk: &'static [&'static str],
}

/// Word's `w:t` runs, in `w:p` paragraphs; deleted text and field codes are other elements.
const DOCX: Rules = Rules {
    text_in: &["t"],
    skip: &[],
    para: &["p", "tr"],
    tab: &["ta", "tc"],
    brk: &["br", "cr"],
};
/// PowerPoint's `a:t` runs in `a:p` paragraphs.
const PPTX: Rules = Rules {
    text_in: &["t"],
    skip: &[],
    para: &["p"],
    tab: &["ta"],
    brk: &["br"],
};
/// Excel's shared strings (`si`, each a cell's text) and inline strings; phonetic runs skipped.
const XLSX: Rules = Rules {
    text_in: &["t"],
    skip: &["rPh"],
    para: &["si", "row"],
    tab: &["c"],
    brk: &[],
};
/// ODF's `content.xml`: all text in the body, `text:p` and `text:h` paragraphs; a tracked
/// change's deleted text skipped.
const ODF: Rules = Rules {
    text_in: &[],
    skip: &["tracked-changes", "automatic-styles", "font-face-decls"],
    para: &["p", "h", "table-row"],
    tab: &["ta", "s", "table-cell"],
    brk: &["line-break"],
};

/// The text of an OOXML, ODF or EPUB container; an error for any other zip archive.
fn container(data: &[u8], out: &mut Out) -> Result<(), String> {
    let mut zip = zip::ZipArchive::new(Cursor::new(data)).map_err(|e| format!("zip: {e}"))?;
    let names: Vec<String> = zip
        .file_names()
        .filter_map(|n| n.ok().map(|n| n.into_owned()))
        .collect();
    let has = |n: &str| names.iter().any(|x| x == n);
    if has("word/document.xml") {
        for part in [
            "word/document.xml",
            "word/footnotes.xml",
            "word/endnotes.xml",
        ] {
            xml_part(&mut zip, part, &DOCX, out)?;
        }
        return Ok(());
    }
    if has("ppt/presentation.xml") {
        for prefix in ["ppt/slides/slide", "ppt/notesSlides/notesSlide"] {
            for part in numbered(&names, prefix) {
                out.line();
                xml_part(&mut zip, &part, &PPTX, out)?;
            }
        }
        return Ok(());
    }
    if has("xl/workbook.xml") {
        xml_part(&mut zip, "xl/sharedStrings.xml", &XLSX, out)?;
        for part in numbered(&names, "xl/worksheets/sheet") {
            xml_part(&mut zip, &part, &XLSX, out)?;
        }
        return Ok(());
    }
    let mimetype = match zip.by_name("mimetype") {
        Ok(f) => {
            let mut m = String::new();
            f.take(100)
                .read_to_string(&mut m)
                .map_err(|e| format!("zip: {e}"))?;
            m
        }
        Err(_) => String::new(),
    };
    let mimetype = mimetype.trim();
    if mimetype.starts_with("application/vnd.oasis.opendocument.") {
        return xml_part(&mut zip, "content.xml", &ODF, out);
    }
    if mimetype == "application/epub+zip" {
        return epub(&mut zip, out);
    }
    Err("an archive, not a document".into())
}

type Zip<'a> = zip::ZipArchive<Cursor<&'a [u8]>>;

/// The entries `prefix` + a number + `.xml` (slides, sheets), in the numbers' order.
fn numbered(names: &[String], prefix: &str) -> Vec<String> {
    let mut v: Vec<(u32, &String)> = names
        .iter()
        .filter_map(|n| {
            let num = n.strip_prefix(prefix)?.strip_suffix(".xml")?;
            Some((num.parse().ok()?, n))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n.clone()).collect()
}

/// Walk one XML part of `zip` into `out` (a part that is missing is no text).
fn xml_part(zip: &mut Zip, name: &str, rules: &Rules, out: &mut Out) -> Result<(), String> {
    if out.full() || out.spent() {
        return Ok(());
    }
    let Ok(f) = zip.by_name(name) else {
        return Ok(());
    };
    walk_xml(BufReader::new(out.bounded(f)), rules, out);
    Ok(())
}

fn local(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or(name)
}

/// The text of one XML stream under `rules` into `out`; markup that does not parse ends the
/// walk with what was read so far (a damaged part keeps its readable start).
fn walk_xml(r: impl BufRead, rules: &Rules, out: &mut Out) {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(r);
    reader.config_mut().check_end_names = false;
    let mut buf = Vec::new();
    // How many `text_in` and `skip` elements are open: counts, not a stack, so depth costs
    // no memory.
    let (mut inside, mut skipping) = (0usize, 0usize);
    let is = |set: &[&str], n: &str| set.contains(&n);
    loop {
        if out.full() {
            return;
        }
        buf.clear();
        let ev = match reader.read_event_into(&mut buf) {
            Ok(Event::Eof) | Err(_) => return,
            Ok(ev) => ev,
        };
        let collecting = skipping == 0 && (rules.text_in.is_empty() || inside > 0);
        match ev {
            Event::Start(e) => {
                let n = e.local_name();
                let n = n.as_ref();
                if is(rules.skip, n) {
                    skipping += 1;
                } else if is(rules.text_in, n) {
                    inside += 1;
                } else if is(rules.tab, n) {
                    out.space();
                }
            }
            Event::End(e) => {
                let n = e.local_name();
                let n = n.as_ref();
                if is(rules.skip, n) {
                    skipping = skipping.saturating_sub(1);
                } else if is(rules.text_in, n) {
                    inside = inside.saturating_sub(1);
                } else if is(rules.para, n) && skipping == 0 {
                    out.line();
                }
            }
            Event::Empty(e) => {
                let n = e.local_name();
                let n = n.as_ref();
                if skipping > 0 {
                } else if is(rules.brk, n) || is(rules.para, n) {
                    out.line();
                } else if is(rules.tab, n) {
                    out.space();
                }
            }
            Event::Text(t) if collecting => out.push(&t.xml10_content()),
            Event::CData(t) if collecting => out.push(&t.xml10_content()),
            Event::GeneralRef(r) if collecting => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    out.push(c.encode_utf8(&mut [0; 4]));
                } else if let Some(s) = quick_xml::escape::resolve_xml_entity(&r) {
                    out.push(s);
                }
            }
            _ => {}
        }
    }
}

/// An EPUB's text: its spine's XHTML documents in reading order, as HTML.
fn epub(zip: &mut Zip, out: &mut Out) -> Result<(), String> {
    let container = read_part(zip, "META-INF/container.xml", out)?;
    let opf_path = attr_of(&container, "rootfile", "full-path")
        .into_iter()
        .next()
        .ok_or("EPUB: no rootfile in META-INF/container.xml")?;
    let opf = read_part(zip, &opf_path, out)?;
    let dir = match opf_path.rfind('/') {
        Some(i) => &opf_path[..=i],
        None => "",
    };
    let ids = attr_of(&opf, "item", "id");
    let hrefs = attr_of(&opf, "item", "href");
    let manifest: HashMap<&str, &str> = ids
        .iter()
        .map(String::as_str)
        .zip(hrefs.iter().map(String::as_str))
        .collect();
    for idref in attr_of(&opf, "itemref", "idref") {
        if out.full() || out.spent() {
            break;
        }
        let Some(href) = manifest.get(idref.as_str()) else {
            continue;
        };
        let path = normalize(&format!("{dir}{}", percent_decode(href)));
        let page = read_part(zip, &path, out)?;
        out.line();
        html(&String::from_utf8_lossy(&page), out);
    }
    Ok(())
}

/// A whole part, within the inflation budget (a missing part is empty).
fn read_part(zip: &mut Zip, name: &str, out: &mut Out) -> Result<Vec<u8>, String> {
    let Ok(f) = zip.by_name(name) else {
        return Ok(Vec::new());
    };
    let mut v = Vec::new();
    out.bounded(f)
        .read_to_end(&mut v)
        .map_err(|e| format!("zip: {name}: {e}"))?;
    Ok(v)
}

/// Every value of attribute `attr` on elements named `elem` (local names), in order; one
/// `None`-free list per attribute, so elements lacking it are skipped. Used on an EPUB's
/// container and package files, where each `item` has both `id` and `href`.
fn attr_of(xml: &[u8], elem: &str, attr: &str) -> Vec<String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(xml);
    reader.config_mut().check_end_names = false;
    let mut found = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) | Ok(Event::Empty(e)) if e.local_name().as_ref() == elem => {
                let v = e
                    .attributes()
                    .flatten()
                    .find(|a| local(a.key.as_ref()) == attr)
                    .and_then(|a| {
                        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                            .ok()
                            .map(|v| v.into_owned())
                    });
                found.push(v.unwrap_or_default());
            }
            Ok(Event::Eof) | Err(_) => return found,
            _ => {}
        }
    }
}

/// `a/b/../c` → `a/c`: an EPUB's hrefs are relative to its package file.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut v = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied(), b.get(i + 2).copied()) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                v.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (c, _, _) => {
                v.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&v).into_owned()
}

// ---------------------------------------------------------------------------------------
// HTML

/// Whether `head` is an HTML page: after a byte-order mark, whitespace, comments and an XML
/// declaration, a `<!DOCTYPE html` or an `<html` tag. Stricter than "starts with a tag", so
/// Markdown or XML that opens with a comment stays as written.
fn is_html(head: &[u8]) -> bool {
    let mut s = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    loop {
        s = s.trim_ascii_start();
        if s.starts_with(b"<!--") {
            match memchr::memmem::find(s, b"-->") {
                Some(i) => s = &s[i + 3..],
                None => return false,
            }
        } else if s.starts_with(b"<?") {
            match memchr::memchr(b'>', s) {
                Some(i) => s = &s[i + 1..],
                None => return false,
            }
        } else {
            break;
        }
    }
    let starts = |p: &[u8]| s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p);
    let then_space_or_end = |n: usize| {
        s.get(n)
            .is_some_and(|c| c.is_ascii_whitespace() || *c == b'>')
    };
    (starts(b"<!doctype") && then_space_or_end(9) && {
        let rest = s[9..].trim_ascii_start();
        rest.len() >= 5
            && rest[..4].eq_ignore_ascii_case(b"html")
            && (rest[4].is_ascii_whitespace() || rest[4] == b'>')
    }) || (starts(b"<html") && then_space_or_end(5))
}

/// Elements that end a line of text (block-level), by lower-case name.
const HTML_BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "caption",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "title",
    "tr",
    "ul",
    "body",
    "head",
    "html",
    "details",
    "fieldset",
    "legend",
    "option",
    "textarea",
];

/// The text of an HTML page into `out`: tags dropped (a block element ends a line, a table
/// cell is a word break), `script`, `style` and `template` contents skipped, character
/// references decoded, whitespace collapsed outside `pre`. One flat pass: a tag's quotes end
/// at the tag's own quote, an unclosed comment or tag ends the text.
fn html(src: &str, out: &mut Out) {
    let b = src.as_bytes();
    let mut i = 0;
    let mut pre = 0usize;
    let mut text_start = 0;
    // Text since the last tag, flushed at each tag: a run of whitespace is one word break.
    let flush = |out: &mut Out, t: &str, pre: bool| {
        if pre {
            out.push(&decode_entities(t));
            return;
        }
        let ws = |c: char| c.is_ascii_whitespace();
        if t.starts_with(ws) {
            out.space();
        }
        for (k, w) in t.split_ascii_whitespace().enumerate() {
            if k > 0 {
                out.push(" ");
            }
            out.push(&decode_entities(w));
        }
        if t.ends_with(ws) {
            out.space();
        }
    };
    while i < b.len() {
        if out.full() {
            return;
        }
        if b[i] != b'<' {
            i += memchr::memchr(b'<', &b[i..]).unwrap_or(b.len() - i);
            continue;
        }
        let rest = &b[i..];
        let is_tag_start = |off: usize| rest.get(off).is_some_and(|c| c.is_ascii_alphabetic());
        if rest.starts_with(b"<!--") {
            flush(out, &src[text_start..i], pre > 0);
            let end = memchr::memmem::find(&rest[4..], b"-->").map_or(b.len(), |e| i + 4 + e + 3);
            i = end;
            text_start = i;
            continue;
        }
        let closing = rest.get(1) == Some(&b'/');
        if rest.starts_with(b"<!")
            || rest.starts_with(b"<?")
            || is_tag_start(1)
            || (closing && is_tag_start(2))
        {
            flush(out, &src[text_start..i], pre > 0);
            let name_at = i + if closing { 2 } else { 1 };
            let name_end = name_at
                + b[name_at..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'-' || *c == b':'))
                    .unwrap_or(b.len() - name_at);
            let name = src[name_at..name_end].to_ascii_lowercase();
            let name = name.rsplit(':').next().unwrap_or("");
            // The tag's end: its `>` outside quotes.
            let mut j = name_end;
            let mut quote = None;
            while j < b.len() {
                match (quote, b[j]) {
                    (None, b'>') => break,
                    (None, q @ (b'"' | b'\'')) => quote = Some(q),
                    (Some(q), c) if c == q => quote = None,
                    _ => {}
                }
                j += 1;
            }
            i = (j + 1).min(b.len());
            if !closing
                && matches!(name, "script" | "style" | "template")
                && !b[..i].ends_with(b"/>")
            {
                // Raw text up to the matching end tag, whatever it holds.
                let close = format!("</{name}");
                let end = find_ascii_ci(&b[i..], close.as_bytes()).map_or(b.len(), |e| i + e);
                i = memchr::memchr(b'>', &b[end..]).map_or(b.len(), |e| end + e + 1);
            } else if name == "pre" {
                pre = if closing {
                    pre.saturating_sub(1)
                } else {
                    pre + 1
                };
                out.line();
            } else if HTML_BLOCKS.contains(&name) {
                out.line();
            } else if matches!(name, "td" | "th") {
                out.space();
            }
            text_start = i;
            continue;
        }
        i += 1; // A `<` that starts no tag is text.
    }
    flush(out, &src[text_start.min(src.len())..], pre > 0);
}

/// The first place `needle` (ASCII, lower case) occurs in `hay`, ignoring ASCII case.
fn find_ascii_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle[0];
    let mut at = 0;
    while let Some(k) = memchr::memchr2(first, first.to_ascii_uppercase(), &hay[at..]) {
        let s = at + k;
        if hay.len() - s >= needle.len() && hay[s..s + needle.len()].eq_ignore_ascii_case(needle) {
            return Some(s);
        }
        at = s + 1;
    }
    None
}

/// `&amp;`, `&#233;`, `&#xE9;` and the named references common in prose; an unknown one stays
/// as written.
fn decode_entities(t: &str) -> std::borrow::Cow<'_, str> {
    if !t.contains('&') {
        return t.into();
    }
    let mut s = String::with_capacity(t.len());
    let mut rest = t;
    while let Some(a) = rest.find('&') {
        s.push_str(&rest[..a]);
        rest = &rest[a..];
        let semi = rest[1..].find(';').map(|k| k + 1).filter(|&k| k <= 32);
        let decoded = semi.and_then(|k| {
            let name = &rest[1..k];
            let c = if let Some(num) = name.strip_prefix('#') {
                let n = match num.strip_prefix(['x', 'X']) {
                    Some(h) => u32::from_str_radix(h, 16).ok(),
                    None => num.parse().ok(),
                };
                n.and_then(char::from_u32).map(String::from)
            } else {
                named_entity(name).map(str::to_string)
            };
            c.map(|c| (c, k + 1))
        });
        match decoded {
            Some((c, len)) => {
                s.push_str(&c);
                rest = &rest[len..];
            }
            None => {
                s.push('&');
                rest = &rest[1..];
            }
        }
    }
    s.push_str(rest);
    s.into()
}

fn named_entity(name: &str) -> Option<&'static str> {
    Some(match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" | "ensp" | "emsp" | "thinsp" => " ",
        "shy" | "zwj" | "zwnj" => "",
        "ndash" => "–",
        "mdash" => "—",
        "hellip" => "…",
        "lsquo" => "‘",
        "rsquo" => "’",
        "ldquo" => "“",
        "rdquo" => "”",
        "laquo" => "«",
        "raquo" => "»",
        "copy" => "©",
        "reg" => "®",
        "trade" => "™",
        "deg" => "°",
        "times" => "×",
        "middot" => "·",
        "bull" => "•",
        "sect" => "§",
        "para" => "¶",
        "euro" => "€",
        "pound" => "£",
        "rarr" => "→",
        "larr" => "←",
        "eacute" => "é",
        "egrave" => "è",
        "aacute" => "á",
        "agrave" => "à",
        "ouml" => "ö",
        "uuml" => "ü",
        "auml" => "ä",
        "szlig" => "ß",
        "ccedil" => "ç",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    fn fixture(name: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/documents")
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn read(data: &[u8], max: usize) -> Result<(String, bool), String> {
        let kind = Kind::of(data).expect("a document kind");
        text(kind, data, max)
    }

    /// `f`'s result, how long it took and the most memory the process held meanwhile above
    /// what it held before (nextest runs each test in a process of its own): the peak is
    /// reset through /proc/self/clear_refs.
    fn measured<T>(f: impl FnOnce() -> T) -> (T, Duration, u64) {
        fn kib(field: &str) -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        }
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let before = kib("VmRSS:");
        let t = Instant::now();
        let r = f();
        let took = t.elapsed();
        (r, took, kib("VmHWM:").saturating_sub(before) * 1024)
    }

    /// Real files from real writers (tests/data/documents/make.sh): each one's own word,
    /// its paragraphs on lines of their own, and none of its markup.
    #[test]
    fn each_kind_reads_as_the_text_a_reader_sees() {
        for (file, word) in [
            ("sample.pdf", "quokkasprocket"),
            ("sample.docx", "marmotreel"),
            ("sample.pptx", "ibexpulley"),
            ("sample.xlsx", "tapirsprocket"),
            ("sample.odt", "okapiwinch"),
            ("sample.epub", "dugongspindle"),
            ("sample.html", "narwhalgrommet"),
        ] {
            let (t, more) = read(&fixture(file), 1 << 20).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!more, "{file}");
            assert!(t.contains(word), "{file}: {word} in {t:?}");
            assert!(
                !t.contains('<') && !t.contains("xmlns") && !t.contains("Tj"),
                "{file}: markup in {t:?}"
            );
            if file != "sample.xlsx" {
                // Words are kept apart: the sentence reads as written.
                assert!(t.contains("which appears only in this"), "{file}: {t:?}");
                // Ligatures (gropdf's fi, mapped in its ToUnicode table only) read as letters.
                assert!(
                    t.contains("Field notes") || t.contains("field notes"),
                    "{file}: {t:?}"
                );
                assert!(
                    t.lines()
                        .any(|l| l.trim_start().starts_with("Second paragraph")),
                    "{file}: paragraphs on their own lines in {t:?}"
                );
            } else {
                assert!(t.contains("appears only in this XLSX file"), "{t:?}");
            }
        }
        // A cut at a small limit is a prefix, and says so.
        let (full, _) = read(&fixture("sample.docx"), 1 << 20).unwrap();
        let (cut, more) = read(&fixture("sample.docx"), 20).unwrap();
        assert!(
            more && cut.len() <= 20 && full.starts_with(cut.trim_end()),
            "{cut:?}"
        );
    }

    /// Where the machine has them: real PDFs from Debian's documentation packages.
    #[test]
    fn real_pdfs_from_debian_read() {
        for (p, words) in [
            (
                "/usr/share/doc/libtasn1-doc/libtasn1.pdf",
                "asn1_create_element",
            ),
            (
                "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
                "freedesktop",
            ),
        ] {
            let Ok(data) = std::fs::read(p) else { continue };
            let (t, _) = read(&data, 1 << 20).unwrap_or_else(|e| panic!("{p}: {e}"));
            assert!(t.contains(words), "{p}: {}", &t[..t.len().min(2000)]);
            let bad = t.chars().filter(|c| *c == '\u{FFFD}').count();
            assert!(
                bad * 100 <= t.chars().count(),
                "{p}: {bad} replacement characters"
            );
        }
    }

    #[test]
    fn html_drops_scripts_styles_and_tags_and_decodes_references() {
        let page = "<!-- generated -->\n<!DOCTYPE html><html><head><title>The Title</title>\
            <style>p { color: red }</style><script>if (a < b) { x = '</p>'; }</script>\
            </head><body><h1>Heading&nbsp;one</h1><p>caf&eacute; &amp; cr&#232;me &#x2014; \
            <b>bold</b>text <a href=\"x>y\">link</a></p><pre>  keep\n  lines</pre>\
            <table><tr><td>a</td><td>b</td></tr></table></body></html>";
        let (t, _) = read(page.as_bytes(), 1 << 20).unwrap();
        assert_eq!(
            t,
            "The Title\nHeading one\ncafé & crème — boldtext link\n  keep\n  lines\na b"
        );
        // Only a page is HTML: Markdown or XML opening with a comment or a tag is text.
        for not in [
            "<!-- note -->\n# Title\n",
            "<div>markdown</div>\n",
            "<?xml version=\"1.0\"?><svg/>",
            "<!doctype htmlx>",
        ] {
            assert_eq!(Kind::of(not.as_bytes()), None, "{not}");
        }
        assert_eq!(
            Kind::of(b"\xEF\xBB\xBF <?xml version='1.0'?>\n<HTML lang=en>"),
            Some(Kind::Html)
        );
    }

    #[test]
    fn an_ordinary_archive_or_damaged_file_is_no_document() {
        let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
        z.start_file("notes.txt", zip::write::SimpleFileOptions::default())
            .unwrap();
        z.write_all(b"plain").unwrap();
        let z = z.finish().unwrap().into_inner();
        assert!(read(&z, 1 << 20).is_err());
        for file in ["sample.pdf", "sample.docx", "sample.epub"] {
            let d = fixture(file);
            // Cut anywhere, flipped anywhere: an error or some text, never a panic.
            for at in (0..d.len()).step_by(d.len() / 40 + 1) {
                let mut bad = d.clone();
                bad[at] ^= 0x5a;
                for d in [&d[..at.max(8)], &bad] {
                    if let Some(kind) = Kind::of(d) {
                        let _ = text(kind, d, 1 << 16);
                    }
                }
            }
        }
    }

    /// A zip whose one entry `name` holds `head`, then `body` repeated until `inflated`
    /// bytes, then `tail`, deflated as it is written (never held whole in memory), beside
    /// the small entries `extra`.
    fn zip_bomb(
        extra: &[(&str, &str)],
        name: &str,
        (head, body, tail): (&str, &str, &str),
        inflated: usize,
    ) -> Vec<u8> {
        let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(1))
            .large_file(true);
        for (n, t) in extra {
            z.start_file(*n, opts).unwrap();
            z.write_all(t.as_bytes()).unwrap();
        }
        z.start_file(name, opts).unwrap();
        z.write_all(head.as_bytes()).unwrap();
        let chunk = body.repeat((1 << 16) / body.len());
        let mut n = 0;
        while n < inflated {
            z.write_all(chunk.as_bytes()).unwrap();
            n += chunk.len();
        }
        z.write_all(tail.as_bytes()).unwrap();
        z.finish().unwrap().into_inner()
    }

    /// What every bomb must meet: text within the limit, cut and saying so, quickly and in
    /// little memory (the limit here is 16 KiB: the inflation budget is 256 KiB).
    fn assert_bounded(what: &str, data: &[u8], want: &str) {
        const MAX: usize = 16 << 10;
        let (r, took, peak) = measured(|| read(data, MAX));
        let (t, more) = r.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(t.len() <= MAX, "{what}: {} bytes", t.len());
        assert!(more, "{what}: the cut is reported");
        assert!(
            t.contains(want),
            "{what}: {want} in {:?}",
            &t[..t.len().min(200)]
        );
        assert!(took < Duration::from_secs(5), "{what}: {took:?}");
        assert!(peak < 48 << 20, "{what}: {} MiB at peak", peak >> 20);
    }

    #[test]
    fn zip_bombs_stop_at_the_budget() {
        // 32 times the inflation budget of the test's limit, in well under a MiB.
        const HUGE: usize = 8 << 20;
        let ct = ("[Content_Types].xml", "<Types/>");
        // A Word document whose text inflates to 256 MiB.
        let docx = zip_bomb(
            &[ct],
            "word/document.xml",
            (
                "<w:document><w:body><w:p><w:r><w:t>opening words</w:t></w:r></w:p>",
                "<w:p><w:r><w:t>bomb </w:t></w:r></w:p>",
                "</w:body></w:document>",
            ),
            HUGE,
        );
        assert!(docx.len() < 1 << 20, "{} bytes", docx.len());
        assert_bounded("docx text bomb", &docx, "opening words");
        // Markup without text: the budget, not the text limit, stops it.
        let docx = zip_bomb(
            &[ct],
            "word/document.xml",
            (
                "<w:document><w:body><w:p><w:r><w:t>opening words</w:t></w:r></w:p>",
                "<w:p/>",
                "",
            ),
            HUGE,
        );
        assert_bounded("docx markup bomb", &docx, "opening words");
        // Nested a million deep (never closed): a flat walk, no stack to overflow.
        let docx = zip_bomb(
            &[ct],
            "word/document.xml",
            (
                "<w:document><w:body><w:p><w:r><w:t>opening words</w:t></w:r></w:p>",
                "<w:tbl><w:tr><w:tc>",
                "",
            ),
            HUGE,
        );
        assert_bounded("docx nesting bomb", &docx, "opening words");
        let odt = zip_bomb(
            &[("mimetype", "application/vnd.oasis.opendocument.text")],
            "content.xml",
            (
                "<office:document-content><office:body><text:p>opening words</text:p>",
                "<text:span>bomb</text:span>",
                "",
            ),
            HUGE,
        );
        assert_bounded("odt bomb", &odt, "opening words");
        let xlsx = zip_bomb(
            &[("xl/workbook.xml", "<workbook/>")],
            "xl/sharedStrings.xml",
            (
                "<sst><si><t>opening words</t></si>",
                "<si><t>bomb</t></si>",
                "",
            ),
            HUGE,
        );
        assert_bounded("xlsx bomb", &xlsx, "opening words");
        let pptx = zip_bomb(
            &[("ppt/presentation.xml", "<p:presentation/>")],
            "ppt/slides/slide1.xml",
            (
                "<p:sld><a:p><a:t>opening words</a:t></a:p>",
                "<a:p><a:r><a:t>bomb</a:t></a:r></a:p>",
                "",
            ),
            HUGE,
        );
        assert_bounded("pptx bomb", &pptx, "opening words");
        let epub = zip_bomb(
            &[
                ("mimetype", "application/epub+zip"),
                (
                    "META-INF/container.xml",
                    "<container><rootfiles><rootfile full-path=\"OEBPS/content.opf\"/></rootfiles></container>",
                ),
                (
                    "OEBPS/content.opf",
                    "<package><manifest><item id=\"c1\" href=\"text/ch%201.xhtml\"/></manifest><spine><itemref idref=\"c1\"/></spine></package>",
                ),
            ],
            "OEBPS/text/ch 1.xhtml",
            ("<html><body><p>opening words</p>", "<div>bomb</div>", ""),
            HUGE,
        );
        assert_bounded("epub bomb", &epub, "opening words");
    }

    /// A PDF of the given objects (1: the catalog, 2: the page tree, 3: the page, ...) with a
    /// correct cross-reference table.
    fn pdf_of(objects: &[Vec<u8>]) -> Vec<u8> {
        let mut v = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, o) in objects.iter().enumerate() {
            offsets.push(v.len());
            v.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
            v.extend_from_slice(o);
            v.extend_from_slice(b"\nendobj\n");
        }
        let xref = v.len();
        v.extend_from_slice(
            format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
        );
        for o in offsets {
            v.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
        }
        v.extend_from_slice(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .as_bytes(),
        );
        v
    }

    fn one_page_pdf(content: &[u8], flate: bool) -> Vec<u8> {
        let filter = if flate { " /Filter /FlateDecode" } else { "" };
        let mut stream = format!("<< /Length {}{filter} >>\nstream\n", content.len()).into_bytes();
        stream.extend_from_slice(content);
        stream.extend_from_slice(b"\nendstream");
        pdf_of(&[
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_vec(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_vec(),
            stream,
        ])
    }

    #[test]
    fn a_pdf_reads_words_and_lines_as_laid_out() {
        let pdf = one_page_pdf(
            b"BT /F1 12 Tf 72 700 Td (Opening ) Tj [(wor) -20 (ds) -300 (apart)] TJ 0 -14 Td (next line) Tj ET",
            false,
        );
        assert_eq!(
            read(&pdf, 1 << 20).unwrap(),
            ("Opening words apart\nnext line".into(), false)
        );
    }

    #[test]
    fn pdf_bombs_stop_at_the_budget() {
        // A page whose content stream inflates to 8 MiB of shown text (32 times the budget).
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b"BT /F1 12 Tf (opening words) Tj ").unwrap();
        let chunk = b"(bomb) Tj ".repeat(6000);
        let mut n = 0;
        while n < 8 << 20 {
            e.write_all(&chunk).unwrap();
            n += chunk.len();
        }
        e.write_all(b"ET").unwrap();
        let pdf = one_page_pdf(&e.finish().unwrap(), true);
        assert!(pdf.len() < 1 << 20, "{} bytes", pdf.len());
        let (r, took, peak) = measured(|| read(&pdf, 16 << 10));
        // Over the budget: the page is not decoded at all, quickly.
        assert!(
            r.as_ref().is_ok_and(|(t, more)| *more && t.is_empty()),
            "{r:?}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(peak < 48 << 20, "{} MiB at peak", peak >> 20);
        // Nesting a hundred thousand deep, in an object and in a content stream: refused by
        // the parser's depth limit, no stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let mut objs = vec![
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        ];
        objs.push(format!("<< /Type /Page /Parent 2 0 R /Odd {deep} >>").into_bytes());
        let _ = read(&pdf_of(&objs), 1 << 20);
        let pdf = one_page_pdf(
            format!("BT /F1 12 Tf (words) Tj {deep} TJ ET").as_bytes(),
            false,
        );
        let _ = read(&pdf, 1 << 20);
    }

    #[test]
    fn html_bombs_stay_linear() {
        // Deep nesting, an unclosed comment, a script that never ends, a tag that never
        // closes: each one pass over at most the limit.
        for (what, page) in [
            (
                "nesting",
                format!("<html><body>opening words{}", "<div><span>".repeat(200_000)),
            ),
            (
                "comment",
                format!("<html>opening words<!--{}", "x".repeat(1 << 20)),
            ),
            (
                "script",
                format!("<html>opening words<script>{}", "<p>".repeat(300_000)),
            ),
            (
                "tag",
                format!("<html>opening words<a href=\"{}", "x".repeat(1 << 20)),
            ),
        ] {
            // As the caller reads HTML: at most the limit of it.
            let page = &page.as_bytes()[..64 << 10];
            let (r, took, _) = measured(|| read(page, 64 << 10));
            let (t, _) = r.unwrap();
            assert!(
                t.starts_with("opening words") && t.len() <= 64 << 10,
                "{what}: {t:?}"
            );
            assert!(took < Duration::from_secs(2), "{what}: {took:?}");
        }
    }
}
