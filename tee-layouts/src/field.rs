//! [`Field`]: where one field of a fixed-size structure lies, and how it is
//! read and written without a panic.

use core::fmt;
use core::ops::Range;

/// One field of an `S`-byte structure: `N` bytes at `offset`.
///
/// Fields are made only by this crate, in `const` items of the structure's
/// module, so the check that a field fits its structure runs at compile
/// time: every accessor on a `&[u8; S]` is in range by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<const N: usize, const S: usize> {
    name: &'static str,
    offset: usize,
}

impl<const N: usize, const S: usize> Field<N, S> {
    /// The field's length.
    pub const LEN: usize = N;

    /// A field of `N` bytes at `offset`. Only called in `const` items, so a
    /// field that does not fit its structure is a compile error, never a
    /// panic at run time.
    pub(crate) const fn new(name: &'static str, offset: usize) -> Field<N, S> {
        assert!(
            offset <= S && N <= S.saturating_sub(offset),
            "field outside its structure"
        );
        Field { name, offset }
    }

    /// The specification's name of the field.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Its offset from the start of the structure.
    pub const fn offset(&self) -> usize {
        self.offset
    }

    /// Its length in bytes.
    pub const fn size(&self) -> usize {
        N
    }

    /// The offset just past it (`offset + N <= S`, checked when it was made).
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(N)
    }

    /// `offset..end`.
    pub const fn range(&self) -> Range<usize> {
        self.offset..self.end()
    }

    /// Name, offset and length, for tables.
    pub const fn info(&self) -> FieldInfo {
        FieldInfo {
            name: self.name,
            offset: self.offset,
            len: N,
        }
    }

    /// The field's bytes in `s`.
    pub fn get(&self, s: &[u8; S]) -> [u8; N] {
        let mut out = [0u8; N];
        // offset + N <= S: every byte of `out` is copied.
        for (dst, src) in out.iter_mut().zip(s.iter().skip(self.offset)) {
            *dst = *src;
        }
        out
    }

    /// Writes `value` into the field in `s`.
    pub fn set(&self, s: &mut [u8; S], value: &[u8; N]) {
        for (dst, src) in s.iter_mut().skip(self.offset).zip(value) {
            *dst = *src;
        }
    }

    /// The field's bytes in `s` are all zero.
    pub fn is_zero(&self, s: &[u8; S]) -> bool {
        self.first_nonzero(s).is_none()
    }

    /// The structure offset of the field's first non-zero byte in `s`
    /// (reserved fields must be zero).
    pub fn first_nonzero(&self, s: &[u8; S]) -> Option<usize> {
        s.iter()
            .skip(self.offset)
            .take(N)
            .position(|b| *b != 0)
            .map(|i| self.offset.saturating_add(i))
    }

    /// The field's bytes in `bytes`, a structure (or its first part) that
    /// starts at `bytes[0]`; [`LayoutError::Truncated`] if `bytes` ends
    /// before the field does.
    pub fn read(&self, bytes: &[u8]) -> Result<[u8; N], LayoutError> {
        bytes
            .get(self.range())
            .and_then(|b| <[u8; N]>::try_from(b).ok())
            .ok_or(self.truncated(bytes.len()))
    }

    /// Writes `value` into the field of the structure at `bytes[0]`.
    pub fn write(&self, bytes: &mut [u8], value: &[u8; N]) -> Result<(), LayoutError> {
        let found = bytes.len();
        let dst = bytes.get_mut(self.range()).ok_or(self.truncated(found))?;
        dst.copy_from_slice(value);
        Ok(())
    }

    fn truncated(&self, found: usize) -> LayoutError {
        LayoutError::Truncated {
            field: self.name,
            end: self.end(),
            found,
        }
    }
}

/// Little-endian integer accessors for the fields of an integer's width.
macro_rules! integer_accessors {
    ($($n:literal => $t:ident: $get:ident, $set:ident, $read:ident;)*) => {$(
        impl<const S: usize> Field<$n, S> {
            #[doc = concat!("The little-endian `", stringify!($t), "` in `s`.")]
            pub fn $get(&self, s: &[u8; S]) -> $t {
                $t::from_le_bytes(self.get(s))
            }
            /// Writes `v` little-endian.
            pub fn $set(&self, s: &mut [u8; S], v: $t) {
                self.set(s, &v.to_le_bytes());
            }
            #[doc = concat!("[`Field::read`] as a little-endian `", stringify!($t), "`.")]
            pub fn $read(&self, bytes: &[u8]) -> Result<$t, LayoutError> {
                self.read(bytes).map($t::from_le_bytes)
            }
        }
    )*};
}

integer_accessors! {
    2 => u16: u16_le, set_u16_le, read_u16_le;
    4 => u32: u32_le, set_u32_le, read_u32_le;
    8 => u64: u64_le, set_u64_le, read_u64_le;
}

/// A field's name, offset and length, untyped: one row of a structure's
/// `FIELDS` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    pub name: &'static str,
    pub offset: usize,
    pub len: usize,
}

impl FieldInfo {
    /// The offset just past the field.
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(self.len)
    }
}

/// `fields`, in order, cover `0..size` exactly: each starts where the one
/// before ended, none is empty, and the last ends at `size`. Every
/// structure module asserts this of its table at compile time.
pub const fn tiles(fields: &[FieldInfo], size: usize) -> bool {
    let mut at = 0usize;
    let mut rest = fields;
    while let [f, tail @ ..] = rest {
        if f.offset != at || f.len == 0 {
            return false;
        }
        at = match at.checked_add(f.len) {
            Some(end) => end,
            None => return false,
        };
        rest = tail;
    }
    at == size
}

/// The field of `fields` that holds byte `offset`, if any (for naming a
/// byte in a diagnostic).
pub fn field_at(fields: &[FieldInfo], offset: usize) -> Option<&FieldInfo> {
    fields
        .iter()
        .find(|f| f.offset <= offset && offset < f.end())
}

/// Bytes that do not hold a structure or a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The bytes are not exactly one structure long.
    Size {
        structure: &'static str,
        expected: usize,
        found: usize,
    },
    /// The bytes end before a field does.
    Truncated {
        field: &'static str,
        /// The offset just past the field.
        end: usize,
        /// How many bytes there are.
        found: usize,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Size {
                structure,
                expected,
                found,
            } => write!(
                f,
                "{structure} is {found} bytes; expected exactly {expected}"
            ),
            LayoutError::Truncated { field, end, found } => write!(
                f,
                "{field} ends at byte {end}, but there are only {found} bytes"
            ),
        }
    }
}

impl core::error::Error for LayoutError {}

/// `bytes` as exactly one `S`-byte structure named `structure`.
pub(crate) fn exact<'a, const S: usize>(
    structure: &'static str,
    bytes: &'a [u8],
) -> Result<&'a [u8; S], LayoutError> {
    bytes.try_into().map_err(|_| LayoutError::Size {
        structure,
        expected: S,
        found: bytes.len(),
    })
}

/// Defines one structure: `SIZE`, `NAME`, one [`Field`] constant per field,
/// `FIELDS` in offset order, the compile-time assertion that they tile the
/// structure, and `exact` (a slice as the structure, its length checked).
macro_rules! layout {
    (
        name: $sname:literal,
        size: $size:expr,
        fields: {
            $( $(#[$fm:meta])* $id:ident: [$n:expr] @ $off:expr => $fname:literal, )*
        }
    ) => {
        /// Size of the structure in bytes.
        pub const SIZE: usize = $size;
        /// The structure's name, for errors.
        pub const NAME: &str = $sname;
        $(
            $(#[$fm])*
            pub const $id: $crate::Field<{ $n }, SIZE> = $crate::Field::new($fname, $off);
        )*
        /// Every field, in offset order; together they cover the structure
        /// exactly (checked at compile time).
        pub const FIELDS: &[$crate::FieldInfo] = &[ $( $id.info(), )* ];
        const _: () = assert!(
            $crate::tiles(FIELDS, SIZE),
            concat!($sname, ": the fields do not tile the structure")
        );
        /// `bytes` as exactly one structure ([`LayoutError::Size`](crate::LayoutError::Size) otherwise).
        pub fn exact(bytes: &[u8]) -> Result<&[u8; SIZE], $crate::LayoutError> {
            $crate::field::exact(NAME, bytes)
        }
    };
}
pub(crate) use layout;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    const F: Field<4, 8> = Field::new("F", 2);
    const W: Field<2, 8> = Field::new("W", 6);

    #[test]
    fn get_set_and_integers() {
        let mut s = [0u8; 8];
        F.set_u32_le(&mut s, 0x0403_0201);
        assert_eq!(s, [0, 0, 1, 2, 3, 4, 0, 0]);
        assert_eq!(F.get(&s), [1, 2, 3, 4]);
        assert_eq!(F.u32_le(&s), 0x0403_0201);
        W.set_u16_le(&mut s, 0xBBAA);
        assert_eq!(s[6..], [0xAA, 0xBB]);
        assert_eq!(F.first_nonzero(&s), Some(2));
        assert!(!W.is_zero(&s));
        assert_eq!((F.offset(), F.size(), F.end(), F.range()), (2, 4, 6, 2..6));
    }

    #[test]
    fn slices_are_checked() {
        assert_eq!(F.read(&[9, 9, 1, 2, 3, 4]), Ok([1, 2, 3, 4]));
        assert_eq!(F.read_u32_le(&[0, 0, 1, 0, 0, 0, 7]), Ok(1));
        let e = F.read(&[0; 5]).unwrap_err();
        assert_eq!(
            e,
            LayoutError::Truncated {
                field: "F",
                end: 6,
                found: 5
            }
        );
        let mut short = [0u8; 3];
        assert!(F.write(&mut short, &[1; 4]).is_err());
        assert_eq!(short, [0; 3]);
        assert!(exact::<8>("S", &[0; 7]).is_err());
        assert!(exact::<8>("S", &[0; 8]).is_ok());
    }

    #[test]
    fn tiling() {
        let a = FieldInfo {
            name: "a",
            offset: 0,
            len: 2,
        };
        let b = FieldInfo {
            name: "b",
            offset: 2,
            len: 3,
        };
        assert!(tiles(&[a, b], 5));
        assert!(!tiles(&[a, b], 6), "gap at the end");
        assert!(!tiles(&[b, a], 5), "out of order");
        assert!(!tiles(&[a, a], 4), "overlap");
        assert!(tiles(&[], 0));
        assert_eq!(field_at(&[a, b], 4).map(|f| f.name), Some("b"));
        assert_eq!(field_at(&[a, b], 5), None);
    }
}
