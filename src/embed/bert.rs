//! In-process sentence embeddings from a local BERT model (e.g. all-MiniLM-L6-v2).
//!
//! Owns loading a sentence-transformers model directory (`config.json`, `tokenizer.json`,
//! `model.safetensors`, optionally `sentence_bert_config.json`) and running it on the CPU in
//! f32: WordPiece tokens truncated to the model's maximum sequence length, the encoder
//! (`encoder.rs`), mean pooling over each text's tokens, L2 normalisation — the same vectors
//! sentence-transformers gives for such a model. No network: the files must already be on
//! disk (`scripts/fetch-model.sh` fetches all-MiniLM-L6-v2).

use std::fs;
use std::path::{Path, PathBuf};

use candle_core::Device;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

use super::encoder::{Config, Encoder, Scratch};
use super::{EmbedError, Embedder};
use crate::config::Precision;

/// Tokens per forward pass: texts are packed (not padded) into batches of about this many
/// (one text longer than this is a batch alone). The linear layers' products run on matrices
/// of this many rows. On 256-token windows (`benches/embed.rs`, one core, CPU time) 4096 was no
/// faster than 2048, which needs half the activations' memory (about 32 MB).
const BATCH_TOKENS: usize = 2048;
/// sentence-transformers' default when a model directory does not say (and all-MiniLM-L6-v2's
/// own value).
const DEFAULT_MAX_SEQ: usize = 256;
/// How much of each end of the weights file goes into the model id: enough that different
/// weights of the same size give a different id, without reading 90 MB on every open.
const ID_SAMPLE: usize = 1 << 20;
const REMEDY: &str = "point embedding.dense.model at a sentence-transformers model directory \
                      (scripts/fetch-model.sh fetches all-MiniLM-L6-v2)";

/// A loaded model: its weights (about 90 MB for all-MiniLM-L6-v2) live as long as it does.
/// `embed` takes `&self` and may run on several threads at once; each call's work is spread
/// over rayon's global pool (`RAYON_NUM_THREADS`, else one thread per core), so concurrent
/// calls share those cores rather than multiply them.
pub struct BertEmbedder {
    model: Encoder,
    tokenizer: Tokenizer,
    dim: usize,
    max_tokens: usize,
    model_id: String,
    /// For error messages.
    dir: PathBuf,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

impl BertEmbedder {
    /// Load the model in `dir`, run in f32 (what the reference vectors are held to). Every
    /// missing or unreadable file is an [`EmbedError::Config`] naming it.
    pub fn load(dir: &Path) -> Result<BertEmbedder, EmbedError> {
        Self::load_with(dir, Precision::F32)
    }

    /// [`BertEmbedder::load`] at `precision`: [`Precision::Auto`] runs the linear layers in
    /// 8-bit integers where the CPU has AVX-512 VNNI; [`Precision::Int8`] insists on it.
    pub fn load_with(dir: &Path, precision: Precision) -> Result<BertEmbedder, EmbedError> {
        if precision == Precision::Int8 && !super::int8::available() {
            return Err(EmbedError::Config(
                "vikingfs.index.model_precision \"int8\" needs a CPU with AVX-512 VNNI, which \
                 this one lacks: set it to \"auto\" or \"f32\""
                    .into(),
            ));
        }
        let config_path = dir.join("config.json");
        let config_text = read_to_string(&config_path)?;
        let config: Config =
            serde_json::from_str(&config_text).map_err(|e| bad_file(&config_path, e))?;
        // RoBERTa-style models load into the same layers but number positions differently:
        // they would run and give wrong vectors, so refuse them here.
        if let Some(t) = config.model_type.as_deref().filter(|t| *t != "bert") {
            return Err(bad_file(
                &config_path,
                format!("model_type {t:?} is not \"bert\""),
            ));
        }
        if let Some(t) = config
            .position_embedding_type
            .as_deref()
            .filter(|t| *t != "absolute")
        {
            return Err(bad_file(
                &config_path,
                format!("position_embedding_type {t:?} is not \"absolute\""),
            ));
        }
        if config.hidden_size == 0 || config.max_position_embeddings == 0 {
            return Err(bad_file(
                &config_path,
                "hidden_size and max_position_embeddings must be at least 1",
            ));
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(bad_file(
                &config_path,
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    config.hidden_size, config.num_attention_heads
                ),
            ));
        }

        let st_config_path = dir.join("sentence_bert_config.json");
        let st_config_text = match fs::read_to_string(&st_config_path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(bad_file(&st_config_path, e)),
        };
        let max_seq = match &st_config_text {
            Some(t) => serde_json::from_str::<SentenceBertConfig>(t)
                .map_err(|e| bad_file(&st_config_path, e))?
                .max_seq_length
                .unwrap_or(DEFAULT_MAX_SEQ),
            None => DEFAULT_MAX_SEQ,
        };
        // Positions past the embedding table do not exist; [CLS] and [SEP] need two slots.
        let max_tokens = max_seq.min(config.max_position_embeddings).max(2);

        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer_text = read_to_string(&tokenizer_path)?;
        let mut tokenizer: Tokenizer = tokenizer_text
            .parse()
            .map_err(|e| bad_file(&tokenizer_path, e))?;
        // tokenizer.json carries its own truncation and fixed padding (128 for
        // all-MiniLM-L6-v2); sentence-transformers overrides both, and so do we: truncate to
        // the model's sequence length, and never pad (the encoder packs texts instead).
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| bad_file(&tokenizer_path, e))?;
        tokenizer.with_padding(None);

        let weights_path = dir.join("model.safetensors");
        // Read rather than mmap: a model file replaced under a live mapping is undefined
        // behaviour, and the weights are copied into tensors anyway.
        let weights = fs::read(&weights_path).map_err(|e| bad_file(&weights_path, e))?;
        let model_id = model_id(
            dir,
            &[
                &config_text,
                &tokenizer_text,
                st_config_text.as_deref().unwrap_or(""),
            ],
            &weights,
        );
        let tensors = candle_core::safetensors::load_buffer(&weights, &Device::Cpu)
            .map_err(|e| bad_file(&weights_path, e))?;
        drop(weights);
        let model = Encoder::load(&tensors, &config, precision != Precision::F32)
            .map_err(|e| bad_file(&weights_path, e))?;

        Ok(BertEmbedder {
            model,
            tokenizer,
            dim: config.hidden_size,
            max_tokens,
            model_id,
            dir: dir.to_path_buf(),
        })
    }

    /// Whether its linear layers run in 8-bit integers ([`Precision`]).
    pub fn int8(&self) -> bool {
        self.model.int8()
    }

    /// Word pieces per text, `[CLS]` and `[SEP]` included; the rest of a longer text is ignored.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn inference_error(&self, e: impl std::fmt::Display) -> EmbedError {
        EmbedError::Inference {
            model: self.dir.display().to_string(),
            msg: e.to_string(),
        }
    }

    /// Unit vectors of `seqs` (token id sequences, packed into one forward pass): the mean of
    /// each text's hidden states, L2-normalised.
    fn embed_batch(
        &self,
        seqs: &[&[u32]],
        scratch: &mut Scratch,
        out: &mut Vec<Vec<f32>>,
    ) -> Result<(), EmbedError> {
        let dim = self.model.hidden_size();
        let hidden = self
            .model
            .forward(seqs, scratch)
            .map_err(|e| self.inference_error(e))?;
        let mut rows = hidden.chunks_exact(dim);
        for s in seqs {
            let mut mean = vec![0.0f32; dim];
            for row in rows.by_ref().take(s.len()) {
                for (m, x) in mean.iter_mut().zip(row) {
                    *m += x;
                }
            }
            // Clamped as sentence-transformers does, for a tokenizer without [CLS]/[SEP] and
            // an empty text (whose vector is then all zeros).
            let count = (s.len() as f32).max(1e-9);
            mean.iter_mut().for_each(|m| *m /= count);
            // sentence-transformers' Normalize clamps the norm the same way.
            let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            mean.iter_mut().for_each(|m| *m /= norm);
            out.push(mean);
        }
        Ok(())
    }
}

impl Embedder for BertEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn model_id(&self) -> String {
        self.model_id.clone()
    }

    fn describe(&self) -> String {
        super::local_name(&self.dir)
    }

    fn precision(&self) -> Option<&'static str> {
        Some(if self.int8() { "int8" } else { "f32" })
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut encodings = Vec::with_capacity(texts.len());
        for t in texts {
            let enc = self
                .tokenizer
                .encode(*t, true)
                .map_err(|e| self.inference_error(format!("tokenizing: {e}")))?;
            encodings.push(enc);
        }
        // Packed, not padded: a batch's texts may have any lengths, so they are taken in
        // input order and the vectors come out in it.
        let seqs: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let mut out = Vec::with_capacity(texts.len());
        let mut scratch = Scratch::default();
        let mut rest = &seqs[..];
        while !rest.is_empty() {
            let mut tokens = rest[0].len();
            let take = 1 + rest[1..]
                .iter()
                .take_while(|s| {
                    tokens += s.len();
                    tokens <= BATCH_TOKENS
                })
                .count();
            let (batch, after) = rest.split_at(take);
            self.embed_batch(batch, &mut scratch, &mut out)?;
            rest = after;
        }
        Ok(out)
    }
}

/// `bert:{dir name}:{12 hex digits}` over the text files and a sample of the weights (their
/// length and first and last MiB), so replacing any model file changes the vector space's id.
fn model_id(dir: &Path, texts: &[&str], weights: &[u8]) -> String {
    let mut h = Sha256::new();
    for t in texts {
        // Length-prefixed, so moving bytes from one file to the next changes the hash.
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    }
    h.update((weights.len() as u64).to_le_bytes());
    h.update(&weights[..weights.len().min(ID_SAMPLE)]);
    h.update(&weights[weights.len().saturating_sub(ID_SAMPLE)..]);
    let name = fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    format!("bert:{name}:{}", &hex::encode(h.finalize())[..12])
}

fn read_to_string(path: &Path) -> Result<String, EmbedError> {
    fs::read_to_string(path).map_err(|e| bad_file(path, e))
}

fn bad_file(path: &Path, e: impl std::fmt::Display) -> EmbedError {
    // One line: tokenizer and serde errors may carry newlines.
    let msg = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    EmbedError::Config(format!("{}: {msg}; {REMEDY}", path.display()))
}
