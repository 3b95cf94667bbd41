//! The built-in embedder: feature hashing of word unigrams and bigrams.
//!
//! Deterministic across runs and machines (FNV-1a, no random seed), needs no model files or
//! network. Lexical only — it finds documents that share words with the query, which is what
//! a fresh offline install needs; configure an HTTP provider for semantic search.

use std::collections::HashMap;

use super::{EmbedError, Embedder};

/// Version tag of the hashing scheme; change it whenever the vectors would change.
const MODEL_ID: &str = "vikingfs-local-hash-v1";
/// Bigrams add phrase information but should not outweigh the words themselves.
const BIGRAM_WEIGHT: f32 = 0.5;

#[derive(Debug, Clone)]
pub struct LocalEmbedder {
    dim: usize,
}

impl LocalEmbedder {
    /// `dim` must be at least 1 ([`super::from_config`] checks).
    pub fn new(dim: usize) -> Self {
        LocalEmbedder { dim: dim.max(1) }
    }

    /// The L2-normalised vector of one text (all zeros when it has no words).
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let tokens = tokens(text);
        let mut tf: HashMap<u64, u32> = HashMap::with_capacity(tokens.len() * 2);
        for t in &tokens {
            *tf.entry(fnv1a(1, t.as_bytes())).or_default() += 1;
        }
        let mut bigram_tf: HashMap<u64, u32> = HashMap::with_capacity(tokens.len());
        for w in tokens.windows(2) {
            let h = fnv1a(fnv1a(2, w[0].as_bytes()), w[1].as_bytes());
            *bigram_tf.entry(h).or_default() += 1;
        }
        let mut v = vec![0f32; self.dim];
        for (map, weight) in [(&tf, 1.0f32), (&bigram_tf, BIGRAM_WEIGHT)] {
            for (&h, &n) in map {
                // Sublinear tf: a word repeated ten times is not ten times as relevant.
                let w = weight * (1.0 + (n as f32).ln());
                // The top bit picks the sign so colliding features cancel instead of pile up.
                let sign = if h >> 63 == 1 { -1.0 } else { 1.0 };
                v[(h % self.dim as u64) as usize] += sign * w;
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl Embedder for LocalEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn model_id(&self) -> String {
        MODEL_ID.to_string()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// Lowercased words: runs of alphanumeric characters in any script, except that CJK
/// ideographs and kana (written without spaces) each count as one token; bigrams then
/// capture their two-character words.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if is_cjk(c) {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        } else if c.is_alphanumeric() {
            cur.push(c);
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FFFF)
}

/// FNV-1a, 64 bit, continuing from `seed` (so a bigram hashes its two words in sequence).
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x0000_0100_0000_01b3);
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // A final avalanche so the low bits (the bucket) and the top bit (the sign) are independent.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenises_across_scripts() {
        assert_eq!(tokens("Hello, Wörld! x2"), ["hello", "wörld", "x2"]);
        assert_eq!(tokens("ÜBER über"), ["über", "über"]);
        assert_eq!(tokens("ab中文c"), ["ab", "中", "文", "c"]);
        assert!(tokens(" ,.;").is_empty());
    }
}
