//! The one byte reader for the binary formats fenced-run parses: SEV-SNP reports, TDX quotes, the host's
//! certificate table, the job channel's payloads, firmware tables. Every read is bounds-checked and names its
//! field and absolute offset when it fails, and a parse that leaves bytes unread is an error ([`Reader::finish`]).

/// Why bytes could not be read as the format a [`Reader`] was reading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes end before a field (a fixed field, or one whose length the bytes announce).
    #[error("{format} truncated: {field} at offset {offset} needs {needed} bytes, only {available} left")]
    Truncated {
        /// The format being read (`quote`, `attestation report`, ...).
        format: &'static str,
        /// The field being read.
        field: &'static str,
        /// Its absolute offset.
        offset: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes that remain.
        available: usize,
    },
    /// A length field's value does not fit this platform's address space.
    #[error("{field} at offset {offset} is {value}, larger than the {format}")]
    LengthOverflow {
        /// The format being read.
        format: &'static str,
        /// The length field.
        field: &'static str,
        /// Its offset.
        offset: usize,
        /// Its value.
        value: u64,
    },
    /// A must-be-zero range holds a non-zero byte.
    #[error("{format}: must-be-zero bytes 0x{start:03X}..0x{end:03X} ({field}) are not zero (first non-zero at 0x{first:03X})")]
    NonZero {
        /// The format being read.
        format: &'static str,
        /// What the range is.
        field: &'static str,
        /// First offset of the range.
        start: usize,
        /// One past its last offset.
        end: usize,
        /// Offset of the first non-zero byte.
        first: usize,
    },
    /// Bytes are left after the last field of the format.
    #[error("{format}: {count} trailing bytes at offset {offset} after the last field")]
    Trailing {
        /// The format being read.
        format: &'static str,
        /// Offset of the first byte left.
        offset: usize,
        /// How many bytes are left.
        count: usize,
    },
}

/// A cursor over bytes that arrived from outside; its position is an absolute offset in the whole input, so
/// that an error points at the byte that is missing or wrong. Reads borrow from the input: nothing is copied
/// but the fixed-size arrays and integers the caller asks for.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    format: &'static str,
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over the whole of `bytes`, which are a `format` (named in errors).
    pub fn new(format: &'static str, bytes: &'a [u8]) -> Self {
        Reader {
            format,
            bytes,
            pos: 0,
            base: 0,
        }
    }

    /// The absolute offset of the next byte.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn truncated(&self, field: &'static str, needed: usize) -> WireError {
        WireError::Truncated {
            format: self.format,
            field,
            offset: self.offset(),
            needed,
            available: self.remaining(),
        }
    }

    /// Takes `n` bytes for `field`.
    #[inline]
    pub fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], WireError> {
        match self.bytes.get(self.pos..).and_then(|rest| rest.get(..n)) {
            Some(out) => {
                self.pos += n;
                Ok(out)
            }
            None => Err(self.truncated(field, n)),
        }
    }

    /// Takes a fixed-size array for `field`, by reference into the input.
    #[inline]
    pub fn array_ref<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<&'a [u8; N], WireError> {
        let b = self.take(field, N)?;
        // `take` returned exactly N bytes.
        b.try_into().map_err(|_| self.truncated(field, N))
    }

    /// Takes a fixed-size array for `field`, copied.
    #[inline]
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        self.array_ref(field).copied()
    }

    /// Reads one byte.
    #[inline]
    pub fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// Reads a little-endian u16.
    #[inline]
    pub fn u16_le(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// Reads a little-endian u32.
    #[inline]
    pub fn u32_le(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// Reads a little-endian u64.
    #[inline]
    pub fn u64_le(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// Reads a big-endian u32.
    #[inline]
    pub fn u32_be(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian u64.
    #[inline]
    pub fn u64_be(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    /// Takes `n` bytes of a must-be-zero range named `field`; a non-zero byte is an error naming it.
    pub fn zeros(&mut self, field: &'static str, n: usize) -> Result<(), WireError> {
        let start = self.offset();
        let b = self.take(field, n)?;
        match b.iter().position(|&x| x != 0) {
            None => Ok(()),
            Some(i) => Err(WireError::NonZero {
                format: self.format,
                field,
                start,
                end: start + n,
                first: start + i,
            }),
        }
    }

    /// Takes `len` bytes, a length read from the field at `len_offset`, as a reader of its own (whose offsets
    /// stay absolute).
    pub fn sub(
        &mut self,
        field: &'static str,
        len: u64,
        len_offset: usize,
    ) -> Result<Reader<'a>, WireError> {
        let n = usize::try_from(len).map_err(|_| WireError::LengthOverflow {
            format: self.format,
            field,
            offset: len_offset,
            value: len,
        })?;
        let base = self.offset();
        let bytes = self.take(field, n)?;
        Ok(Reader {
            format: self.format,
            bytes,
            pos: 0,
            base,
        })
    }

    /// Takes everything that is left: for formats whose last field runs to the end.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        out
    }

    /// Ends the parse: every byte must have been read.
    pub fn finish(self) -> Result<(), WireError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing {
                format: self.format,
                offset: self.offset(),
                count: self.remaining(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_checked_and_errors_name_field_and_offset() {
        let bytes = [1u8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut r = Reader::new("thing", &bytes);
        assert_eq!(r.u16_le("a"), Ok(1));
        assert_eq!(r.u16_le("b"), Ok(2));
        assert_eq!(r.offset(), 4);
        r.zeros("pad", 4).expect("zeros");
        let mut s = r.sub("sub", 3, 8).expect("sub");
        assert_eq!(s.offset(), 8);
        assert_eq!(
            s.u32_be("x"),
            Err(WireError::Truncated {
                format: "thing",
                field: "x",
                offset: 8,
                needed: 4,
                available: 3,
            })
        );
        assert_eq!(s.take("y", 3), Ok(&[0u8, 0, 0][..]));
        s.finish().expect("sub read whole");
        let e = r.clone().finish().expect_err("one byte left");
        assert_eq!(
            e,
            WireError::Trailing {
                format: "thing",
                offset: 11,
                count: 1
            }
        );
        assert_eq!(
            e.to_string(),
            "thing: 1 trailing bytes at offset 11 after the last field"
        );
        let mut z = Reader::new("thing", &bytes[8..]);
        let e = z.zeros("reserved", 4).expect_err("9 is not zero");
        assert!(e.to_string().contains("(reserved)"), "{e}");
        assert!(matches!(e, WireError::NonZero { first: 3, .. }));
        assert_eq!(r.u8("last"), Ok(9));
        assert!(r.finish().is_ok());
    }

    #[test]
    fn huge_lengths_never_panic() {
        let bytes = [0u8; 4];
        let mut r = Reader::new("thing", &bytes);
        r.take("a", 2).expect("two");
        assert!(matches!(
            r.take("b", usize::MAX),
            Err(WireError::Truncated { offset: 2, .. })
        ));
        assert!(r.sub("c", u64::MAX, 0).is_err());
        assert_eq!(r.rest(), &[0u8, 0][..]);
    }
}
