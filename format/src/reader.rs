//! One bounds-checked reader for fixed binary layouts (SNP reports, TDX
//! quotes, TPM structures, ZIP headers): every read names the field it
//! reads, nothing reads past the end, and [`Reader::finish`] rejects bytes
//! left over. Parsers map [`ReadError`] into their own typed errors.

/// Why a read failed. `offset` counts from the start of the whole structure
/// (the reader's base plus its position).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("{what} at offset {offset}: need {need} bytes, {have} left")]
    Truncated {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("{what}: reserved byte at offset {offset} is {value:#04x}, must be zero")]
    ReservedNonZero {
        what: &'static str,
        offset: usize,
        value: u8,
    },
    #[error("{count} trailing bytes after {what} (offset {offset})")]
    Trailing {
        what: &'static str,
        offset: usize,
        count: usize,
    },
}

/// A cursor over a byte string.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf` inside the enclosing structure, for error messages.
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, offsets counted from its start.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader::with_base(buf, 0)
    }

    /// A reader over `buf`, which starts at `base` in the enclosing structure.
    pub fn with_base(buf: &'a [u8], base: usize) -> Reader<'a> {
        Reader { buf, pos: 0, base }
    }

    /// Offset of the next byte, from the enclosing structure's start.
    pub fn offset(&self) -> usize {
        self.base.saturating_add(self.pos)
    }

    /// Position of the next byte inside this reader's buffer.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ReadError> {
        let out = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or(ReadError::Truncated {
                what,
                offset: self.offset(),
                need: n,
                have: self.remaining(),
            })?;
        self.pos = self.pos.saturating_add(n);
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ReadError> {
        let offset = self.offset();
        let have = self.remaining();
        let s = self.take(N, what)?;
        <[u8; N]>::try_from(s).map_err(|_| ReadError::Truncated {
            what,
            offset,
            need: N,
            have,
        })
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, ReadError> {
        self.array::<1>(what).map(|[b]| b)
    }

    pub fn u16_le(&mut self, what: &'static str) -> Result<u16, ReadError> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub fn u32_le(&mut self, what: &'static str) -> Result<u32, ReadError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub fn u64_le(&mut self, what: &'static str) -> Result<u64, ReadError> {
        self.array(what).map(u64::from_le_bytes)
    }

    pub fn u16_be(&mut self, what: &'static str) -> Result<u16, ReadError> {
        self.array(what).map(u16::from_be_bytes)
    }

    pub fn u32_be(&mut self, what: &'static str) -> Result<u32, ReadError> {
        self.array(what).map(u32::from_be_bytes)
    }

    pub fn u64_be(&mut self, what: &'static str) -> Result<u64, ReadError> {
        self.array(what).map(u64::from_be_bytes)
    }

    /// Consumes `n` bytes that must all be zero.
    pub fn reserved(&mut self, n: usize, what: &'static str) -> Result<(), ReadError> {
        let start = self.offset();
        let s = self.take(n, what)?;
        match s.iter().position(|&b| b != 0) {
            None => Ok(()),
            Some(i) => Err(ReadError::ReservedNonZero {
                what,
                offset: start.saturating_add(i),
                value: s.get(i).copied().unwrap_or(0),
            }),
        }
    }

    /// Everything not yet read.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        out
    }

    /// The structure `what` must end exactly here.
    pub fn finish(&self, what: &'static str) -> Result<(), ReadError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(ReadError::Trailing {
                what,
                offset: self.offset(),
                count,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_byte_orders_and_names_the_field_it_could_not_read() {
        let bytes = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut r = Reader::with_base(&bytes, 100);
        assert_eq!(r.u16_le("a"), Ok(0x0201));
        assert_eq!(r.u16_be("b"), Ok(0x0304));
        assert_eq!(r.u32_le("c"), Ok(0x0807_0605));
        assert_eq!(
            r.u32_be("d"),
            Err(ReadError::Truncated {
                what: "d",
                offset: 108,
                need: 4,
                have: 1
            })
        );
        // A failed read consumes nothing.
        assert_eq!(r.u8("e"), Ok(9));
        assert_eq!(r.finish("whole"), Ok(()));
    }

    #[test]
    fn reserved_bytes_must_be_zero_and_trailing_bytes_are_refused() {
        let mut r = Reader::new(&[0, 0, 7, 1]);
        assert_eq!(
            r.reserved(3, "rsvd"),
            Err(ReadError::ReservedNonZero {
                what: "rsvd",
                offset: 2,
                value: 7
            })
        );
        let mut r = Reader::new(&[0, 0, 0, 1]);
        assert_eq!(r.reserved(3, "rsvd"), Ok(()));
        assert_eq!(
            r.finish("thing"),
            Err(ReadError::Trailing {
                what: "thing",
                offset: 3,
                count: 1
            })
        );
        assert_eq!(r.rest(), &[1]);
        assert_eq!(r.finish("thing"), Ok(()));
    }

    #[test]
    fn huge_lengths_do_not_overflow() {
        let mut r = Reader::new(&[1, 2]);
        r.u8("x").ok();
        assert!(matches!(
            r.take(usize::MAX, "big"),
            Err(ReadError::Truncated {
                need: usize::MAX,
                ..
            })
        ));
    }
}
