//! A bounds-checked cursor over quote bytes: every read names its field, and a short read says where.
//! Offsets are absolute in the quote so that errors point at the byte that is missing.

use super::QuoteError;

/// A cursor over a byte slice whose position is an absolute offset in the quote.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, which start at absolute offset `base` in the quote.
    pub(crate) fn new(bytes: &'a [u8], base: usize) -> Self {
        Reader {
            bytes,
            pos: 0,
            base,
        }
    }

    /// The absolute offset of the next byte.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Takes `n` bytes for `field`.
    pub(crate) fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], QuoteError> {
        if self.remaining() < n {
            return Err(QuoteError::Truncated {
                field,
                offset: self.offset(),
                needed: n,
                available: self.remaining(),
            });
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Takes a fixed-size array for `field`.
    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], QuoteError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    /// Reads a little-endian u16.
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, QuoteError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// Reads a little-endian u32.
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, QuoteError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// Takes everything that is left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        out
    }

    /// Takes a length announced by a u32 field read at `len_offset`, as a sub-reader.
    pub(crate) fn sub(
        &mut self,
        field: &'static str,
        len: u32,
        len_offset: usize,
    ) -> Result<Reader<'a>, QuoteError> {
        let n = usize::try_from(len).map_err(|_| QuoteError::LengthOverflow {
            field,
            offset: len_offset,
            value: u64::from(len),
        })?;
        let base = self.offset();
        let bytes = self.take(field, n)?;
        Ok(Reader::new(bytes, base))
    }
}
