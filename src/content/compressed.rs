//! Compressed text: a `.gz`, `.bz2` or `.zst` file (Debian's documentation is mostly gzip) is
//! indexed and summarised by the text it decompresses to, while the file itself is stored and
//! served byte for byte as written. Judged by magic number, never by name.
//!
//! Decompression is bounded by what is read out (the derived text's size limit), so a small
//! file that inflates to gigabytes costs no more than that limit; a damaged stream is data,
//! named by its kind as before. Pure functions of bytes, as the rest of [`super`].

use std::io::{self, Read};

/// A compression format vikingfs reads through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Gzip,
    Bzip2,
    Zstd,
}

impl Codec {
    /// The format whose magic number `head` starts with.
    pub fn of(head: &[u8]) -> Option<Codec> {
        match head {
            [0x1f, 0x8b, ..] => Some(Codec::Gzip),
            [b'B', b'Z', b'h', b'1'..=b'9', ..] => Some(Codec::Bzip2),
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// Up to `max` bytes of what `src` (compressed with `codec`) decompresses to, and whether
/// there is more. An error for a stream that is not what its magic number says.
pub fn decompress(codec: Codec, src: impl Read, max: u64) -> io::Result<(Vec<u8>, bool)> {
    let src = io::BufReader::new(src);
    let reader: Box<dyn Read> = match codec {
        // Several members (`cat a.gz b.gz`, pigz) are one file: all of them.
        Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(src)),
        Codec::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(src)),
        Codec::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(src)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        ),
    };
    let mut out = Vec::new();
    reader.take(max.saturating_add(1)).read_to_end(&mut out)?;
    let more = out.len() as u64 > max;
    out.truncate(max as usize);
    Ok((out, more))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn each_format_reads_back_and_a_bomb_stops_at_the_limit() {
        let text = b"The quokka is a small macropod.\n".repeat(100);
        let gz = gzip(&text);
        assert_eq!(Codec::of(&gz), Some(Codec::Gzip));
        let (out, more) = decompress(Codec::Gzip, &gz[..], 1 << 20).unwrap();
        assert_eq!((out.as_slice(), more), (text.as_slice(), false));
        // Two members are one file.
        let two = [gzip(b"first\n"), gzip(b"second\n")].concat();
        assert_eq!(
            decompress(Codec::Gzip, &two[..], 100).unwrap().0,
            b"first\nsecond\n"
        );
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        bz.write_all(&text).unwrap();
        let bz = bz.finish().unwrap();
        assert_eq!(Codec::of(&bz), Some(Codec::Bzip2));
        assert_eq!(decompress(Codec::Bzip2, &bz[..], 1 << 20).unwrap().0, text);
        // 64 MiB of zeros in a few KiB: read out no further than asked.
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let (out, more) = decompress(Codec::Gzip, &bomb[..], 4096).unwrap();
        assert_eq!((out.len(), more), (4096, true));
        // A damaged stream is an error, never a panic.
        let mut bad = gz.clone();
        bad.truncate(12);
        assert!(decompress(Codec::Gzip, &bad[..], 1 << 20).is_err());
        assert_eq!(Codec::of(b"plain text"), None);
    }
}
