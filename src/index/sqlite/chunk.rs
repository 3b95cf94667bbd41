//! The packed chunk format: up to [`CHUNK_SLOTS`] records' int8 codes in one blob, so a search
//! reads a few hundred blobs rather than stepping through one SQLite row per record.
//!
//! Blob layout: `CHUNK_SLOTS` record ids (i64 LE, 0 = free slot), then as many scales
//! (f32 LE), then as many rows of `dim` int8 codes.

use super::quant::quantise;
use super::CHUNK_SLOTS;

/// Offsets into a chunk blob for one dimension.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub dim: usize,
}

impl Layout {
    pub fn len(&self) -> usize {
        CHUNK_SLOTS * (8 + 4 + self.dim)
    }
    pub fn rid(&self, data: &[u8], slot: usize) -> i64 {
        let o = slot * 8;
        i64::from_le_bytes(data[o..o + 8].try_into().expect("8 bytes"))
    }
    pub fn scale(&self, data: &[u8], slot: usize) -> f32 {
        let o = CHUNK_SLOTS * 8 + slot * 4;
        f32::from_le_bytes(data[o..o + 4].try_into().expect("4 bytes"))
    }
    /// The codes of every slot, one row of `dim` bytes each.
    pub fn all_codes<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &data[CHUNK_SLOTS * 12..]
    }
    /// The byte ranges of one slot: its id, its scale, its codes.
    pub fn slot_ranges(&self, slot: usize) -> [std::ops::Range<usize>; 3] {
        let s = CHUNK_SLOTS * 8 + slot * 4;
        let o = CHUNK_SLOTS * 12 + slot * self.dim;
        [slot * 8..slot * 8 + 8, s..s + 4, o..o + self.dim]
    }
    pub fn set(&self, data: &mut [u8], slot: usize, rid: i64, unit: &[f32]) {
        data[slot * 8..slot * 8 + 8].copy_from_slice(&rid.to_le_bytes());
        let o = CHUNK_SLOTS * 12 + slot * self.dim;
        let scale = quantise(unit, &mut data[o..o + self.dim]);
        let s = CHUNK_SLOTS * 8 + slot * 4;
        data[s..s + 4].copy_from_slice(&scale.to_le_bytes());
    }
}
