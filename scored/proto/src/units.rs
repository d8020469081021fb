//! Sizes, durations and CPU lists: the value syntax shared by the hosts
//! database, the console language and scrun's options.
//!
//! Sizes are `4096`, `512K`, `64M`, `4G`, `1T` (powers of 1024, suffix case
//! insensitive, an optional fraction such as `1.5G`). Durations are `250ms`,
//! `30s`, `5m`, `2h`, `1d`, and a bare number means seconds. CPU lists are
//! `0-3,8`. This module is pure: it never touches the system, and every parse
//! error names the offending text.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::Duration;

/// The largest CPU number a CPU list may name. It matches glibc's
/// `CPU_SETSIZE`, the size of the affinity mask the kernel call takes.
pub const MAX_CPU: u32 = 1023;

/// An error from parsing a value; the message names the text and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError(pub String);

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValueError {}

fn err(msg: String) -> ValueError {
    ValueError(msg)
}

/// Shows a piece of user text in a message, shortened so that a hostile
/// megabyte-long value cannot flood a log line.
pub fn quote(text: &str) -> String {
    const MAX: usize = 40;
    let mut out = String::from("'");
    for (count, ch) in text.chars().enumerate() {
        if count == MAX {
            out.push_str("...");
            break;
        }
        if ch.is_control() {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

/// Splits `12.5K` into the number part and the suffix, and parses the number
/// as an exact rational `whole + frac / 10^digits` so that no float rounding
/// changes a size.
fn split_number(text: &str) -> Option<(u64, u64, u32, &str)> {
    let bytes = text.as_bytes();
    let mut idx = 0;
    while idx < bytes.len() && bytes[idx].is_ascii_digit() {
        idx += 1;
    }
    if idx == 0 {
        return None;
    }
    let whole: u64 = text[..idx].parse().ok()?;
    let mut frac = 0u64;
    let mut frac_digits = 0u32;
    if idx < bytes.len() && bytes[idx] == b'.' {
        idx += 1;
        let start = idx;
        while idx < bytes.len() && bytes[idx].is_ascii_digit() {
            idx += 1;
        }
        if idx == start || idx - start > 9 {
            return None;
        }
        frac = text[start..idx].parse().ok()?;
        frac_digits = (idx - start) as u32;
    }
    Some((whole, frac, frac_digits, &text[idx..]))
}

/// Multiplies `whole.frac` by `unit`, rounding down, or `None` on overflow.
fn scale(whole: u64, frac: u64, frac_digits: u32, unit: u64) -> Option<u64> {
    let base = whole.checked_mul(unit)?;
    let denom = 10u128.pow(frac_digits);
    let part = (frac as u128 * unit as u128) / denom;
    base.checked_add(u64::try_from(part).ok()?)
}

/// Parses a size in bytes: `4096`, `512K`, `64M`, `4G`, `1T`, `1.5G`.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let bad = || {
        err(format!(
            "invalid size {}: expected a number with an optional K, M, G or T suffix (e.g. 512M)",
            quote(text)
        ))
    };
    let (whole, frac, digits, suffix) = split_number(text).ok_or_else(bad)?;
    let unit: u64 = match suffix {
        "" | "b" | "B" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        "t" | "T" => 1 << 40,
        _ => return Err(bad()),
    };
    if unit == 1 && digits > 0 {
        return Err(err(format!(
            "invalid size {}: a size in bytes must be a whole number",
            quote(text)
        )));
    }
    scale(whole, frac, digits, unit)
        .ok_or_else(|| err(format!("size {} is too large", quote(text))))
}

/// Parses a duration: `250ms`, `30s`, `5m`, `2h`, `1d`; a bare number means seconds.
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    let bad = || {
        err(format!(
            "invalid duration {}: expected a number with an optional ms, s, m, h or d suffix (e.g. 500ms)",
            quote(text)
        ))
    };
    let (whole, frac, digits, suffix) = split_number(text).ok_or_else(bad)?;
    let unit_ms: u64 = match suffix {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    // Durations are kept to the microsecond; more precision is refused
    // rather than silently rounded away.
    let micros = scale(whole, frac, digits, unit_ms * 1_000)
        .ok_or_else(|| err(format!("duration {} is too long", quote(text))))?;
    // A century is far beyond any slice or limit; refusing more keeps every
    // later addition to a clock free of overflow.
    const MAX_MICROS: u64 = 100 * 365 * 86_400 * 1_000_000;
    if micros > MAX_MICROS {
        return Err(err(format!("duration {} is too long", quote(text))));
    }
    Ok(Duration::from_micros(micros))
}

/// Whether a value is a number alone, without a unit (`100`, `1.5`): the
/// spelling whose meaning differs between schedulers (seconds here and in
/// PBS, minutes in Slurm's `--time`, megabytes in Slurm's `--mem`).
pub fn is_bare_number(text: &str) -> bool {
    matches!(split_number(text), Some((_, _, _, "")))
}

/// The smallest memory or disk limit a job or cluster may be given: no
/// program runs in less, so a smaller one is surely a unit forgotten
/// (`memory=10` is 10 bytes, where Slurm's `--mem=10` is 10 megabytes).
pub const MIN_LIMIT: u64 = 1 << 20;

/// The reason a memory or disk limit of `bytes` is refused, if it is under
/// [`MIN_LIMIT`] (0 has a message of its own where it is refused), as the
/// end of a sentence about the limit: `is 10 bytes, under ...`.
pub fn tiny_limit(bytes: u64) -> Option<String> {
    (bytes > 0 && bytes < MIN_LIMIT).then(|| {
        let size = if bytes < 1 << 10 {
            format!("{bytes} byte{}", if bytes == 1 { "" } else { "s" })
        } else {
            format_size(bytes)
        };
        format!(
            "is {size}, under the 1M that any job needs (a size without a unit is in bytes: \
             write 512M or 2G)"
        )
    })
}

/// Parses a percentage such as `50%` or `50` (0 to 100, whole or with a fraction).
pub fn parse_percent(text: &str) -> Result<f64, ValueError> {
    let body = text.strip_suffix('%').unwrap_or(text);
    let bad = || {
        err(format!(
            "invalid percentage {}: expected a number from 0 to 100 followed by % (e.g. 50%)",
            quote(text)
        ))
    };
    let (whole, frac, digits, rest) = split_number(body).ok_or_else(bad)?;
    if !rest.is_empty() {
        return Err(bad());
    }
    let value = whole as f64 + frac as f64 / 10f64.powi(digits as i32);
    if !(0.0..=100.0).contains(&value) {
        return Err(err(format!(
            "percentage {} is out of range: it must be between 0% and 100%",
            quote(text)
        )));
    }
    Ok(value)
}

/// Formats a byte count for people: `0`, `512`, `4.0K`, `1.5G`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (suffix, unit) in UNITS {
        if bytes >= unit {
            let value = bytes as f64 / unit as f64;
            return if value >= 100.0 || bytes % unit == 0 {
                format!("{}{suffix}", (value).round() as u64)
            } else {
                format!("{value:.1}{suffix}")
            };
        }
    }
    bytes.to_string()
}

/// Formats a duration for people: `0s`, `250ms`, `1.25s`, `5m02s`, `2h05m`, `3d04h`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1_000 {
        let micros = duration.as_micros();
        return if micros == 0 {
            "0s".to_string()
        } else if micros < 1_000 {
            format!("{:.2}ms", micros as f64 / 1_000.0)
        } else {
            format!("{millis}ms")
        };
    }
    let secs = duration.as_secs();
    if secs < 60 {
        return format!("{:.2}s", duration.as_secs_f64());
    }
    if secs < 3_600 {
        return format!("{}m{:02}s", secs / 60, secs % 60);
    }
    if secs < 86_400 {
        return format!("{}h{:02}m", secs / 3_600, (secs % 3_600) / 60);
    }
    format!("{}d{:02}h", secs / 86_400, (secs % 86_400) / 3_600)
}

/// Formats a duration so that `parse_duration` reads it back exactly.
pub fn format_duration_exact(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros % 1_000 != 0 {
        return format!("{}.{:03}ms", micros / 1_000, micros % 1_000);
    }
    let millis = micros / 1_000;
    const UNITS: [(&str, u128); 4] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ];
    for (suffix, unit) in UNITS {
        if millis != 0 && millis % unit == 0 {
            return format!("{}{suffix}", millis / unit);
        }
    }
    format!("{millis}ms")
}

/// A set of CPU numbers of this machine, such as `0-3,8`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct CpuSet {
    cpus: Vec<u32>,
}

impl CpuSet {
    /// Builds a set from CPU numbers; duplicates are removed.
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut cpus: Vec<u32> = cpus.into_iter().collect();
        cpus.sort_unstable();
        cpus.dedup();
        CpuSet { cpus }
    }

    /// Parses a CPU list: comma-separated numbers and `A-B` ranges.
    pub fn parse(text: &str) -> Result<CpuSet, ValueError> {
        let mut cpus = Vec::new();
        if text.is_empty() {
            return Err(err(
                "empty CPU list: expected numbers and ranges such as 0-3,8".into(),
            ));
        }
        for part in text.split(',') {
            let bad = || {
                err(format!(
                    "invalid CPU list {}: {} is not a CPU number or a range A-B",
                    quote(text),
                    quote(part)
                ))
            };
            let number = |s: &str| -> Result<u32, ValueError> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let cpu: u32 = s.parse().map_err(|_| bad())?;
                if cpu > MAX_CPU {
                    return Err(err(format!(
                        "CPU {cpu} in {} is above the limit of {MAX_CPU}",
                        quote(text)
                    )));
                }
                Ok(cpu)
            };
            match part.split_once('-') {
                Some((low, high)) => {
                    let (low, high) = (number(low)?, number(high)?);
                    if low > high {
                        return Err(err(format!(
                            "invalid CPU range {} in {}: the first CPU is above the last",
                            quote(part),
                            quote(text)
                        )));
                    }
                    cpus.extend(low..=high);
                }
                None => cpus.push(number(part)?),
            }
        }
        Ok(CpuSet::from_cpus(cpus))
    }

    /// The CPU numbers in increasing order.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// How many CPUs the set holds.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }
}

impl fmt::Display for CpuSet {
    /// Prints the set in its shortest list form, e.g. `0-3,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut idx = 0;
        let mut first = true;
        while idx < self.cpus.len() {
            let start = self.cpus[idx];
            let mut end = start;
            while idx + 1 < self.cpus.len() && self.cpus[idx + 1] == end + 1 {
                idx += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            idx += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        for bad in [
            "",
            "K",
            "12Q",
            "-1",
            "1.5",
            "1..5G",
            " 1G",
            "1G ",
            "99999999999999999999",
            "16777216T",
        ] {
            let error = parse_size(bad).unwrap_err();
            assert!(error.0.contains("size"), "{bad}: {error}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        for bad in ["", "ms", "5x", "1e3", "-5s", "5 s", "999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn duration_exact_round_trips() {
        for text in ["250ms", "30s", "5m", "2h", "1d", "1.500ms", "90s"] {
            let value = parse_duration(text).unwrap();
            assert_eq!(
                parse_duration(&format_duration_exact(value)),
                Ok(value),
                "{text}"
            );
        }
    }

    #[test]
    fn human_formats() {
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(1536), "1.5K");
        assert_eq!(format_size(4 << 30), "4G");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1250)), "1.25s");
        assert_eq!(format_duration(Duration::from_secs(302)), "5m02s");
        assert_eq!(format_duration(Duration::from_secs(7500)), "2h05m");
    }

    #[test]
    fn percents() {
        assert_eq!(parse_percent("50%"), Ok(50.0));
        assert_eq!(parse_percent("12.5%"), Ok(12.5));
        assert_eq!(parse_percent("100"), Ok(100.0));
        for bad in ["", "%", "101%", "-1%", "5%%", "abc"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpu_lists() {
        let set = CpuSet::parse("0-3,8,2").unwrap();
        assert_eq!(set.cpus(), &[0, 1, 2, 3, 8]);
        assert_eq!(set.to_string(), "0-3,8");
        for bad in [
            "",
            ",",
            "1-",
            "-1",
            "3-1",
            "a",
            "1,,2",
            "1024",
            "0-99999999999",
        ] {
            assert!(CpuSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quote_shortens_and_escapes() {
        let long = "x".repeat(1000);
        assert!(quote(&long).len() < 60);
        assert_eq!(quote("a\nb"), "'a\\nb'");
    }
}
