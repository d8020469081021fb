//! What one user may keep in the core, and what any finished job keeps:
//! reasons and messages cut to [`MAX_REASON`] bytes, with a marker, before
//! they are logged, journalled or kept.
#![forbid(unsafe_code)]

/// The most bytes of a reason or message (a launch error, a limit) that a
/// job's end keeps, logs and journals; the rest is cut, with a marker.
pub const MAX_REASON: usize = 1024;

/// `text` cut to at most [`MAX_REASON`] bytes (at a character boundary),
/// ending with a marker that says how much was cut.
pub fn cap_reason(text: String) -> String {
    cap_text(text, MAX_REASON)
}

/// `text` cut to at most `max` bytes, marker included, at a character
/// boundary; unchanged if it fits.
pub fn cap_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    // The marker's length depends on the number it shows: reserve room for
    // the widest one.
    let marker_room = " ... [ bytes cut]".len() + total.to_string().len();
    let mut keep = max.saturating_sub(marker_room);
    while keep > 0 && !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep);
    text.push_str(&format!(" ... [{} bytes cut]", total - keep));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut_with_a_marker_within_the_budget() {
        assert_eq!(cap_reason("short".into()), "short");
        let long = format!("cannot run 'x' in /{}: No such file", "é".repeat(600_000));
        let cut = cap_reason(long.clone());
        assert!(cut.len() <= MAX_REASON, "{}", cut.len());
        assert!(cut.starts_with("cannot run 'x' in /é"), "{cut}");
        let kept = cut.find(" ... [").expect("a marker");
        assert!(
            cut.ends_with(&format!(" ... [{} bytes cut]", long.len() - kept)),
            "{}",
            &cut[kept..]
        );
        let exact = "a".repeat(MAX_REASON);
        assert_eq!(cap_reason(exact.clone()), exact);
    }
}
