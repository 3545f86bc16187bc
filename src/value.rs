//! The values that options, control keys, policy arguments and command arguments take, parsed
//! one way everywhere: sizes (`4G`, `500M`, `64k`, `1234`), seconds (`0.5`, `30`), whole numbers,
//! `on`/`off`. Every parser refuses empty, negative, fractional where a whole number is meant,
//! non-numeric, infinite and overflowing input with the reason in words (never a panic), so
//! that the caller can say "invalid value for 'KEY': 'TEXT' (REASON)".

use std::time::Duration;

/// The longest duration a value may give: 2^32 seconds (136 years). Anything longer is a
/// mistake, and would overflow what the kernel and `Duration` hold.
pub const MAX_SECONDS: f64 = 4_294_967_296.0;

/// A size in bytes: a whole number, optionally followed by `K`, `M`, `G` or `T` (either case;
/// powers of 1024).
pub fn size(text: &str) -> Result<u64, String> {
    const FORM: &str = "a size in bytes, like 4G, 500M, 64K or 0";
    let t = text.trim();
    let (digits, shift) = match t.as_bytes().last() {
        Some(b'K' | b'k') => (&t[..t.len() - 1], 10),
        Some(b'M' | b'm') => (&t[..t.len() - 1], 20),
        Some(b'G' | b'g') => (&t[..t.len() - 1], 30),
        Some(b'T' | b't') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n = whole(digits).ok_or(FORM)?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| "too large".to_string())
}

/// A size within `min..=max` bytes.
pub fn size_in(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let n = size(text)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("between {} and {}", show_size(min), show_size(max)))
    }
}

/// A number of seconds, decimal (`0.5`, `30`), from 0 to [`MAX_SECONDS`].
pub fn seconds(text: &str) -> Result<Duration, String> {
    const FORM: &str = "seconds, like 1, 0.5 or 0";
    let t = text.trim();
    // Only digits and one dot: no sign, exponent, "inf" or "NaN" that `f64::from_str` takes.
    let plain = !t.is_empty()
        && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && t.bytes().filter(|&b| b == b'.').count() <= 1
        && t.bytes().any(|b| b.is_ascii_digit());
    if !plain {
        return Err(FORM.into());
    }
    let s: f64 = t.parse().map_err(|_| FORM.to_string())?;
    if !(0.0..=MAX_SECONDS).contains(&s) {
        return Err(format!("at most {MAX_SECONDS} seconds"));
    }
    Duration::try_from_secs_f64(s).map_err(|_| FORM.to_string())
}

/// A whole number within `min..=max`.
pub fn count(text: &str, min: u64, max: u64) -> Result<u64, String> {
    match whole(text.trim()) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("a whole number from {min} to {max}")),
    }
}

/// `on` or `off`.
pub fn switch(text: &str) -> Result<bool, String> {
    match text.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("on or off".into()),
    }
}

/// Plain decimal digits that fit a u64.
fn whole(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `1234`, `4K`, `1G`: the shortest exact form of a size.
pub fn show_size(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Text that hostile-input tests feed to every parser: empty, blank, signs, fractions,
/// exponents, NaN and infinities, overflow, junk and control bytes.
pub const HOSTILE: &[&str] = &[
    "",
    " ",
    "-",
    "-1",
    "-0",
    "+1",
    "0x10",
    "1e300",
    "1e-300",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "1.5.2",
    ".",
    "1..2",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "18446744073709551615T",
    "17179869184G",
    "4294967297",
    "9999999999999",
    "1K1",
    "K",
    "G",
    "1 G",
    "one",
    "\u{0}",
    "1\u{0}",
    "\n",
    "ÿ",
    "\u{202e}1",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size("0"), Ok(0));
        assert_eq!(size("4G"), Ok(4 << 30));
        assert_eq!(size("512m"), Ok(512 << 20));
        assert_eq!(size("64k"), Ok(64 << 10));
        assert_eq!(size("1T"), Ok(1 << 40));
        assert_eq!(size("1234"), Ok(1234));
        assert_eq!(size(" 2M "), Ok(2 << 20));
        for bad in [
            "4X",
            "G",
            "-1",
            "1.5G",
            "",
            "16777216T",
            "18446744073709551616",
        ] {
            assert!(size(bad).is_err(), "{bad}");
        }
        assert_eq!(size_in("1M", 4096, 1 << 30), Ok(1 << 20));
        assert_eq!(
            size_in("2G", 4096, 1 << 30).unwrap_err(),
            "between 4K and 1G"
        );
        assert_eq!(show_size(262_144), "256K");
        assert_eq!(show_size(1000), "1000");
        assert_eq!(show_size(0), "0");
    }

    #[test]
    fn seconds_and_counts() {
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert_eq!(seconds("30"), Ok(Duration::from_secs(30)));
        for bad in [
            "1e300",
            "inf",
            "NaN",
            "-1",
            "",
            ".",
            "1.2.3",
            "4294967297",
            "+1",
        ] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(count("8", 1, 256), Ok(8));
        assert!(count("0", 1, 256).is_err());
        assert!(count("257", 1, 256).is_err());
        assert!(count("99999999999999999999", 1, u64::MAX).is_err());
        assert_eq!(switch("on"), Ok(true));
        assert!(switch("yes").is_err());
    }

    #[test]
    fn hostile_text_is_refused_or_exact_never_a_panic() {
        for h in HOSTILE {
            let _ = size(h);
            let _ = seconds(h);
            let _ = count(h, 0, u64::MAX);
            let _ = switch(h);
            assert!(seconds(h).is_err(), "{h:?}");
            assert!(switch(h).is_err(), "{h:?}");
        }
    }
}
