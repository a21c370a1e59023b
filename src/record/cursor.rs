//! The bounds-checked reader every decoder of the record layout uses
//! (`record.rs`, the compact form, the inbox section): each read says how
//! long it is, and running off the end is [`DecodeError::Truncated`],
//! never a panic.

use bytes::Bytes;

use super::DecodeError;

/// A bounds-checked reader over a record's tail.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a Bytes,
    pub(super) at: usize,
}

impl Cursor<'_> {
    pub(super) fn take(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        let end = self.at.checked_add(len).ok_or(DecodeError::Truncated)?;
        if end > self.bytes.len() {
            return Err(DecodeError::Truncated);
        }
        let slice = self.bytes.slice(self.at..end);
        self.at = end;
        Ok(slice)
    }

    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(b[..].try_into().expect("8 bytes")))
    }

    /// A u32 length, then that many bytes.
    pub(super) fn block(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u32()?;
        self.take(len as usize)
    }

    pub(super) fn headers(&mut self) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
        let count = self.u16()?;
        let mut headers = Vec::with_capacity(usize::from(count).min(64));
        for _ in 0..count {
            let name_len = self.u16()?;
            let name = self.take(usize::from(name_len))?;
            headers.push((name, self.block()?));
        }
        Ok(headers)
    }

    /// Bytes not read yet.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Fails unless every byte was read.
    pub(super) fn finish(&self) -> Result<(), DecodeError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(DecodeError::Trailing)
        }
    }
}
