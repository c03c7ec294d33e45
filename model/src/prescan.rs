//! A bounded walk over a GGUF header's metadata section, done before
//! candle's parser sees the file, for the one value that parser uses
//! unchecked: `general.alignment`. candle 0.11 computes the tensor data
//! offset as `position.div_ceil(alignment)`, so an alignment of 0 divides by
//! zero and aborts the process (release builds abort on panic). This walk
//! reads no value into memory except that key's; every length it skips is
//! checked against the bytes left in the file first, so a hostile header
//! cannot make it loop or allocate.

use std::io::{BufRead, Read, Seek};

use crate::error::ModelError;

/// The alignment key (GGUF spec: a `uint32`, a power of two).
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";

/// GGUF value type ids (spec, "gguf_metadata_value_type").
const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// Arrays of arrays deeper than this are refused (candle refuses nesting
/// too; SmolLM2's header has none).
const MAX_DEPTH: u32 = 2;

/// Bytes one value of a fixed-size type takes, or `None` for string and
/// array (and for an unknown id, which is refused).
fn fixed_size(vtype: u32) -> Option<u64> {
    match vtype {
        0 | 1 | 7 => Some(1), // u8, i8, bool
        2 | 3 => Some(2),     // u16, i16
        4..=6 => Some(4),     // u32, i32, f32
        10..=12 => Some(8),   // u64, i64, f64
        _ => None,
    }
}

/// The alignment as the file states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alignment {
    /// The key is absent (the spec's default, 32, applies).
    Absent,
    /// A value of an integer type candle reads (u8/u16/u32, i8/i16/i32).
    Value(i64),
    /// The key holds another type (a 64-bit integer, a float, a string):
    /// candle would silently use 32 while the file meant something else.
    OtherType(u32),
}

struct Walk<'a, R> {
    reader: &'a mut R,
    pos: u64,
    file_size: u64,
}

impl<R: Read + Seek + BufRead> Walk<'_, R> {
    fn truncated(&self, n: u64) -> ModelError {
        ModelError::Truncated {
            what: "the header (metadata)".to_owned(),
            needed: self.pos.saturating_add(n),
            file_size: self.file_size,
        }
    }

    /// Fails unless `n` more bytes are in the file.
    fn need(&self, n: u64) -> Result<(), ModelError> {
        if n > self.file_size.saturating_sub(self.pos) {
            return Err(self.truncated(n));
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], ModelError> {
        self.need(N as u64)?;
        let mut b = [0u8; N];
        self.reader
            .read_exact(&mut b)
            .map_err(|_| self.truncated(N as u64))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn skip(&mut self, n: u64) -> Result<(), ModelError> {
        self.need(n)?;
        let step = i64::try_from(n).map_err(|_| self.truncated(n))?;
        self.reader
            .seek_relative(step)
            .map_err(|_| self.truncated(n))?;
        self.pos += n;
        Ok(())
    }

    /// A string's length prefix, checked against the file.
    fn string_len(&mut self) -> Result<u64, ModelError> {
        let len = self.u64()?;
        self.need(len)?;
        Ok(len)
    }

    /// Skips one value of type `vtype`.
    fn skip_value(&mut self, vtype: u32, depth: u32) -> Result<(), ModelError> {
        if let Some(size) = fixed_size(vtype) {
            return self.skip(size);
        }
        match vtype {
            STRING => {
                let len = self.string_len()?;
                self.skip(len)
            }
            ARRAY if depth < MAX_DEPTH => {
                let elem = self.u32()?;
                let count = self.u64()?;
                // The least one element takes: a fixed value's size, a
                // string's 8-byte length, an array's 12-byte header.
                let least = match (fixed_size(elem), elem) {
                    (Some(s), _) => s,
                    (None, STRING) => 8,
                    (None, ARRAY) => 12,
                    (None, other) => return Err(unknown_type(other)),
                };
                self.need(count.saturating_mul(least))?;
                if let Some(size) = fixed_size(elem) {
                    return self.skip(count * size);
                }
                for _ in 0..count {
                    self.skip_value(elem, depth + 1)?;
                }
                Ok(())
            }
            ARRAY => Err(ModelError::Malformed {
                reason: format!("metadata arrays nested deeper than {MAX_DEPTH}"),
            }),
            other => Err(unknown_type(other)),
        }
    }

    /// Reads an integer value of type `vtype` the way candle reads the
    /// alignment, or skips a value of any other type.
    fn alignment_value(&mut self, vtype: u32) -> Result<Alignment, ModelError> {
        Ok(match vtype {
            0 => Alignment::Value(self.bytes::<1>()?[0].into()),
            1 => Alignment::Value(i8::from_le_bytes(self.bytes()?).into()),
            2 => Alignment::Value(u16::from_le_bytes(self.bytes()?).into()),
            3 => Alignment::Value(i16::from_le_bytes(self.bytes()?).into()),
            4 => Alignment::Value(self.u32()?.into()),
            5 => Alignment::Value(i32::from_le_bytes(self.bytes()?).into()),
            other => {
                self.skip_value(other, 0)?;
                Alignment::OtherType(other)
            }
        })
    }
}

fn unknown_type(vtype: u32) -> ModelError {
    ModelError::Malformed {
        reason: format!("unknown metadata value type {vtype}"),
    }
}

/// Walks the metadata of the GGUF (v2 or v3, the version already checked)
/// that `reader` is positioned at the start of, and returns the last
/// `general.alignment` in it (candle keeps the last of duplicate keys).
pub(crate) fn alignment<R: Read + Seek + BufRead>(
    reader: &mut R,
    file_size: u64,
) -> Result<Alignment, ModelError> {
    let mut w = Walk {
        reader,
        pos: 0,
        file_size,
    };
    w.skip(8)?; // magic and version
    let _tensor_count = w.u64()?;
    let kv_count = w.u64()?;
    // Each entry takes at least a key length, a type and one byte.
    w.need(kv_count.saturating_mul(13))?;
    let mut found = Alignment::Absent;
    for _ in 0..kv_count {
        let len = w.string_len()?;
        let is_alignment = if len == ALIGNMENT_KEY.len() as u64 {
            let key: [u8; ALIGNMENT_KEY.len()] = w.bytes()?;
            key == ALIGNMENT_KEY.as_bytes()
        } else {
            w.skip(len)?;
            false
        };
        let vtype = w.u32()?;
        if is_alignment {
            found = w.alignment_value(vtype)?;
        } else {
            w.skip_value(vtype, 0)?;
        }
    }
    Ok(found)
}
