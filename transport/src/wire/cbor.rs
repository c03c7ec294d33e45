//! The CBOR subset the protocol uses, in the deterministic encoding of
//! RFC 8949 section 4.2.1: unsigned integers, byte strings, text strings,
//! arrays and maps, each with definite length and the shortest head; map
//! keys are text strings in bytewise order of their encoding. The decoder
//! accepts exactly that encoding (a non-shortest head, an indefinite length,
//! a tag, a float or a negative integer is an error), so what it accepts
//! re-encodes to the same bytes.
//!
//! Bytes are read through `kolm_format::reader::Reader`, so no read goes
//! past the frame and every error names the field and its offset.

use kolm_format::reader::{ReadError, Reader};

use super::codec::DecodeError;

const MAJOR_UINT: u8 = 0;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const MAJOR_MAP: u8 = 5;

fn major_name(major: u8) -> &'static str {
    match major {
        0 => "unsigned integer",
        1 => "negative integer",
        2 => "byte string",
        3 => "text string",
        4 => "array",
        5 => "map",
        6 => "tag",
        _ => "simple value or float",
    }
}

/// Writes the deterministic encoding.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// The shortest head for `value` under major type `major`.
    fn head(&mut self, major: u8, value: u64) {
        let m = major << 5;
        if let Ok(v) = u8::try_from(value) {
            if v < 24 {
                self.buf.push(m | v);
            } else {
                self.buf.extend_from_slice(&[m | 24, v]);
            }
        } else if let Ok(v) = u16::try_from(value) {
            self.buf.push(m | 25);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = u32::try_from(value) {
            self.buf.push(m | 26);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else {
            self.buf.push(m | 27);
            self.buf.extend_from_slice(&value.to_be_bytes());
        }
    }

    fn len_head(&mut self, major: u8, len: usize) {
        // usize is at most 64 bits on every supported target.
        self.head(major, u64::try_from(len).unwrap_or(u64::MAX));
    }

    pub(crate) fn uint(&mut self, v: u64) {
        self.head(MAJOR_UINT, v);
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.len_head(MAJOR_BYTES, b.len());
        self.buf.extend_from_slice(b);
    }

    pub(crate) fn text(&mut self, s: &str) {
        self.len_head(MAJOR_TEXT, s.len());
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub(crate) fn array(&mut self, len: usize) {
        self.len_head(MAJOR_ARRAY, len);
    }

    /// A map of `fields.len()` entries; the caller writes each key with
    /// [`Encoder::key`] in the order of `fields`.
    pub(crate) fn map(&mut self, fields: &[&str]) {
        self.len_head(MAJOR_MAP, fields.len());
    }

    pub(crate) fn key(&mut self, name: &str) {
        self.text(name);
    }
}

/// Reads the deterministic encoding from one frame's payload.
#[derive(Debug)]
pub(crate) struct Decoder<'a> {
    r: Reader<'a>,
}

/// An open map being read: its declared length and the fields it must
/// hold, in order.
#[derive(Debug)]
pub(crate) struct MapCursor {
    message: &'static str,
    fields: &'static [&'static str],
    len: u64,
    next: usize,
}

fn truncated(e: ReadError) -> DecodeError {
    match e {
        ReadError::Truncated {
            what,
            offset,
            need,
            have,
        } => DecodeError::Truncated {
            what,
            offset,
            need,
            have,
        },
        ReadError::Trailing { offset, count, .. } => DecodeError::TrailingBytes { offset, count },
        other => DecodeError::Read(other),
    }
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Decoder<'a> {
        Decoder {
            r: Reader::new(bytes),
        }
    }

    /// Everything must have been read.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        self.r.finish("message").map_err(truncated)
    }

    /// A head: major type and argument, shortest form only.
    fn head(&mut self, what: &'static str) -> Result<(u8, u64, usize), DecodeError> {
        let offset = self.r.offset();
        let initial = self.r.u8(what).map_err(truncated)?;
        let major = initial >> 5;
        let info = initial & 0x1f;
        if major > MAJOR_MAP {
            // Tags, simple values and floats are never expected: the caller
            // reports the type without reading further.
            return Ok((major, 0, offset));
        }
        let value = match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.r.u8(what).map_err(truncated)?),
            25 => u64::from(self.r.u16_be(what).map_err(truncated)?),
            26 => u64::from(self.r.u32_be(what).map_err(truncated)?),
            27 => self.r.u64_be(what).map_err(truncated)?,
            31 => return Err(DecodeError::Indefinite { what, offset }),
            _ => {
                return Err(DecodeError::ReservedInfo { what, offset, info });
            }
        };
        let shortest = match info {
            24 => value >= 24,
            25 => value > 0xff,
            26 => value > 0xffff,
            27 => value > 0xffff_ffff,
            _ => true,
        };
        if !shortest {
            return Err(DecodeError::NotShortest { what, offset });
        }
        Ok((major, value, offset))
    }

    fn expect(&mut self, what: &'static str, major: u8) -> Result<(u64, usize), DecodeError> {
        let (found, value, offset) = self.head(what)?;
        if found != major {
            return Err(DecodeError::WrongType {
                what,
                offset,
                expected: major_name(major),
                found: major_name(found),
            });
        }
        Ok((value, offset))
    }

    pub(crate) fn uint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.expect(what, MAJOR_UINT).map(|(v, _)| v)
    }

    /// A length no larger than `max` (checked before any content is read).
    fn len(&mut self, what: &'static str, major: u8, max: usize) -> Result<usize, DecodeError> {
        let (len, _) = self.expect(what, major)?;
        usize::try_from(len)
            .ok()
            .filter(|&l| l <= max)
            .ok_or(DecodeError::TooLong { what, len, max })
    }

    pub(crate) fn bytes(
        &mut self,
        what: &'static str,
        max: usize,
    ) -> Result<&'a [u8], DecodeError> {
        let len = self.len(what, MAJOR_BYTES, max)?;
        self.r.take(len, what).map_err(truncated)
    }

    pub(crate) fn text(&mut self, what: &'static str, max: usize) -> Result<&'a str, DecodeError> {
        let len = self.len(what, MAJOR_TEXT, max)?;
        let offset = self.r.offset();
        let b = self.r.take(len, what).map_err(truncated)?;
        std::str::from_utf8(b).map_err(|_| DecodeError::InvalidUtf8 { what, offset })
    }

    /// An array header of at most `max` elements.
    pub(crate) fn array(&mut self, what: &'static str, max: usize) -> Result<usize, DecodeError> {
        self.len(what, MAJOR_ARRAY, max)
    }

    /// An array header of any length (for the envelope, whose length is
    /// checked after its version).
    pub(crate) fn array_any(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.expect(what, MAJOR_ARRAY).map(|(v, _)| v)
    }

    /// A map that must hold exactly `fields`, in that order.
    pub(crate) fn map(
        &mut self,
        message: &'static str,
        fields: &'static [&'static str],
    ) -> Result<MapCursor, DecodeError> {
        let (len, _) = self.expect(message, MAJOR_MAP)?;
        Ok(MapCursor {
            message,
            fields,
            len,
            next: 0,
        })
    }

    /// Reads the next key of `m`, which must be `name` (the next of its
    /// fields).
    pub(crate) fn key(&mut self, m: &mut MapCursor, name: &'static str) -> Result<(), DecodeError> {
        debug_assert_eq!(
            m.fields.get(m.next),
            Some(&name),
            "fields read out of order"
        );
        if u64::try_from(m.next).map_or(true, |n| n >= m.len) {
            return Err(DecodeError::MissingField {
                message: m.message,
                field: name,
            });
        }
        let offset = self.r.offset();
        let key = self.text("map key", MAX_KEY)?;
        m.next = m.next.saturating_add(1);
        if key == name {
            Ok(())
        } else {
            Err(misplaced(m, key, offset))
        }
    }

    /// The map must end here: no entries beyond its fields.
    pub(crate) fn end(&mut self, m: MapCursor) -> Result<(), DecodeError> {
        if u64::try_from(m.next).is_ok_and(|n| n < m.len) {
            let offset = self.r.offset();
            let key = self.text("map key", MAX_KEY)?;
            return Err(misplaced(&m, key, offset));
        }
        Ok(())
    }
}

/// Longest map key accepted (every key of the protocol is shorter).
const MAX_KEY: usize = 64;

/// A key that is not the one expected: unknown, or a known field out of
/// order (a repeated key included).
fn misplaced(m: &MapCursor, key: &str, offset: usize) -> DecodeError {
    if m.fields.contains(&key) {
        DecodeError::FieldOrder {
            message: m.message,
            field: key.to_owned(),
            offset,
        }
    } else {
        DecodeError::UnknownField {
            message: m.message,
            field: key.to_owned(),
            offset,
        }
    }
}

/// Whether `fields` is in the deterministic key order (RFC 8949 4.2.1:
/// bytewise order of the encoded keys, so shorter text first).
#[cfg(test)]
pub(crate) fn in_deterministic_order(fields: &[&str]) -> bool {
    let encoded: Vec<Vec<u8>> = fields
        .iter()
        .map(|f| {
            let mut e = Encoder::default();
            e.text(f);
            e.into_bytes()
        })
        .collect();
    encoded.windows(2).all(|w| matches!(w, [a, b] if a < b))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_shortest_and_decode_back() {
        for (v, len) in [
            (0u64, 1usize),
            (23, 1),
            (24, 2),
            (255, 2),
            (256, 3),
            (65535, 3),
            (65536, 5),
            (u32::MAX.into(), 5),
            (u64::from(u32::MAX) + 1, 9),
            (u64::MAX, 9),
        ] {
            let mut e = Encoder::default();
            e.uint(v);
            let b = e.into_bytes();
            assert_eq!(b.len(), len, "{v}");
            let mut d = Decoder::new(&b);
            assert_eq!(d.uint("n").unwrap(), v);
            d.finish().unwrap();
        }
    }

    #[test]
    fn refuses_what_the_encoder_never_writes() {
        let cases: [(&[u8], &str); 8] = [
            (&[0x18, 0x05], "NotShortest"),
            (&[0x19, 0x00, 0xff], "NotShortest"),
            (&[0x1a, 0x00, 0x00, 0xff, 0xff], "NotShortest"),
            (&[0x1b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff], "NotShortest"),
            (&[0x1f], "Indefinite"),
            (&[0x1c], "ReservedInfo"),
            (&[0x20], "WrongType"),
            (&[0xf9, 0, 0], "WrongType"),
        ];
        for (bytes, class) in cases {
            let err = Decoder::new(bytes).uint("n").unwrap_err();
            assert!(format!("{err:?}").starts_with(class), "{bytes:?}: {err:?}");
        }
        let err = Decoder::new(&[0x5f, 0x41, 0, 0xff])
            .bytes("b", 10)
            .unwrap_err();
        assert!(matches!(err, DecodeError::Indefinite { .. }), "{err:?}");
        let err = Decoder::new(&[0x62, 0xc3, 0x28]).text("t", 10).unwrap_err();
        assert!(
            matches!(err, DecodeError::InvalidUtf8 { offset: 1, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn lengths_are_capped_before_content_and_bounded_by_the_frame() {
        // Declares 2^32 bytes: over the cap, refused from the head alone.
        let err = Decoder::new(&[0x5a, 0xff, 0xff, 0xff, 0xff])
            .bytes("b", 1 << 20)
            .unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::TooLong {
                    len: 0xffff_ffff,
                    max: 1_048_576,
                    ..
                }
            ),
            "{err:?}"
        );
        // Under the cap but beyond the frame: truncated, naming the field.
        let err = Decoder::new(&[0x45, 1, 2]).bytes("data", 100).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Truncated {
                    what: "data",
                    need: 5,
                    have: 2,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn deterministic_order_is_length_first() {
        assert!(in_deterministic_order(&["b", "aa", "ab"]));
        assert!(!in_deterministic_order(&["aa", "b"]));
        assert!(!in_deterministic_order(&["a", "a"]));
    }
}
