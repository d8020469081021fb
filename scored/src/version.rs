//! The version scored reports (`status`, `--version`): the crate's version,
//! plus the build stamp when the installed binary carries one.
//!
//! The stamp is a fixed-size field in the binary's read-only data, after
//! [`STAMP_MARKER`], empty (NUL bytes) in an ordinary build. Packaging may
//! write a tag there (a build number, a commit) so that two builds of one
//! version can be told apart, which is what an operator needs to see after
//! an in-place restart onto a new binary. It is read through
//! `black_box` so that the compiler never folds it into a constant.
#![forbid(unsafe_code)]

/// The bytes that precede the stamp in the binary.
pub const STAMP_MARKER: &[u8] = b"@@scored-build-stamp@@";
/// Room for the tag after the marker.
pub const STAMP_LEN: usize = 32;

#[used]
static STAMP: [u8; STAMP_MARKER.len() + STAMP_LEN] = stamp_field();

const fn stamp_field() -> [u8; STAMP_MARKER.len() + STAMP_LEN] {
    let mut field = [0u8; STAMP_MARKER.len() + STAMP_LEN];
    let mut idx = 0;
    while idx < STAMP_MARKER.len() {
        field[idx] = STAMP_MARKER[idx];
        idx += 1;
    }
    field
}

/// `0.1.0`, or `0.1.0+TAG` for a stamped binary.
pub fn version() -> String {
    let field: &[u8] = std::hint::black_box(&STAMP[..]);
    let tag: Vec<u8> = field[STAMP_MARKER.len()..]
        .iter()
        .copied()
        .take_while(|byte| *byte != 0)
        .filter(|byte| byte.is_ascii_graphic())
        .collect();
    if tag.is_empty() {
        env!("CARGO_PKG_VERSION").to_string()
    } else {
        format!(
            "{}+{}",
            env!("CARGO_PKG_VERSION"),
            String::from_utf8_lossy(&tag)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unstamped_build_reports_the_crate_version() {
        assert_eq!(version(), env!("CARGO_PKG_VERSION"));
    }
}
