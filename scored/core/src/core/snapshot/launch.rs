//! A launch's packed bytes as the snapshot and the log write them:
//! hexadecimal text. One taken from the core holds the launch itself,
//! shared with the core's jobs, and writes its text straight into the
//! output as it is serialized, so that writing a snapshot copies no
//! launch (a user's queued jobs may keep 8 MiB of them, written as
//! 16 MiB of text); one read back holds the text it read.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::restore::unhex;
use super::RestoreError;
use crate::job::Launch;

/// A launch's packed bytes, written as lowercase hexadecimal.
#[derive(Debug, Clone)]
pub(super) enum LaunchText {
    /// Taken from the core.
    Packed(Launch),
    /// Read back: the text, checked when the bytes are asked for.
    Text(String),
}

impl LaunchText {
    /// The packed bytes; an error if the text read back is not
    /// hexadecimal.
    pub(super) fn bytes(&self) -> Result<Cow<'_, [u8]>, RestoreError> {
        match self {
            LaunchText::Packed(launch) => Ok(Cow::Borrowed(launch.as_bytes())),
            LaunchText::Text(text) => unhex(text).map(Cow::Owned),
        }
    }
}

impl Serialize for LaunchText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // A JSON writer takes the text in pieces (`serde_json`'s
            // `collect_str`), the same string `serialize_str` writes.
            LaunchText::Packed(launch) => serializer.collect_str(&Hex(launch.as_bytes())),
            LaunchText::Text(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for LaunchText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LaunchText, D::Error> {
        String::deserialize(deserializer).map(LaunchText::Text)
    }
}

/// Bytes shown as lowercase hexadecimal, two digits a byte, written a
/// piece at a time.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut piece = [0u8; 1024];
        for bytes in self.0.chunks(piece.len() / 2) {
            for (pair, byte) in piece.chunks_exact_mut(2).zip(bytes) {
                pair[0] = DIGITS[usize::from(byte >> 4)];
                pair[1] = DIGITS[usize::from(byte & 15)];
            }
            // Hexadecimal digits are ASCII.
            let text = std::str::from_utf8(&piece[..bytes.len() * 2]).map_err(|_| fmt::Error)?;
            f.write_str(text)?;
        }
        Ok(())
    }
}
