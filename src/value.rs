//! The values that options, control keys, policy arguments and command arguments take, parsed
//! one way everywhere: sizes (`4G`, `1.5G`, `1.5 GiB`, `64k`, `1234`), seconds (`0.5`, `30`),
//! whole numbers, `on`/`off`. Every parser refuses empty, negative, fractional where a whole
//! number is meant, non-numeric, infinite and overflowing input with the reason in words (never
//! a panic), so that the caller can say "invalid value for 'KEY': 'TEXT' (REASON)". Sizes are
//! also written for people here, one way ([`show_size`]), in a form [`size`] reads back.

use std::time::Duration;

/// The longest duration a value may give: 2^32 seconds (136 years). Anything longer is a
/// mistake, and would overflow what the kernel and `Duration` hold.
pub const MAX_SECONDS: f64 = 4_294_967_296.0;

/// The units a size may carry, powers of 1024, as [`show_size`] writes them; each may also
/// be spelt with `iB` (`KiB`, `GiB`) and in either case.
const UNITS: [(&str, u32); 7] = [
    ("B", 0),
    ("K", 10),
    ("M", 20),
    ("G", 30),
    ("T", 40),
    ("P", 50),
    ("E", 60),
];

/// A size in bytes: a whole number (`2048`), or a decimal number followed by a unit, `B`, `K`,
/// `M`, `G`, `T`, `P` or `E` (powers of 1024; either case; also spelt `KiB`, `MiB`...; a space
/// may come before it): `4G`, `1.5G`, `1.5 GiB`, `512K`, `0`. A fraction of a unit is rounded
/// to the nearest byte. This is what [`show_size`] writes, so a size shown can be given back.
pub fn size(text: &str) -> Result<u64, String> {
    const FORM: &str = "a size in bytes, like 4G, 1.5G, 1.5GiB, 512K or 0 (powers of 1024)";
    let t = text.trim();
    let end = t
        .bytes()
        .position(|b| !(b.is_ascii_digit() || b == b'.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(end);
    let unit = unit.strip_prefix(' ').unwrap_or(unit);
    let shift = if unit.is_empty() {
        None
    } else {
        let u = unit.to_ascii_uppercase();
        let u = u
            .strip_suffix("IB")
            .filter(|l| *l != "B" && !l.is_empty())
            .unwrap_or(&u);
        Some(UNITS.iter().find(|(name, _)| *name == u).ok_or(FORM)?.1)
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (number, None),
    };
    let int = whole(int).ok_or(FORM)?;
    let Some(frac) = frac else {
        return int
            .checked_mul(1u64 << shift.unwrap_or(0))
            .ok_or_else(|| "too large".to_string());
    };
    // A fraction needs a unit larger than a byte, and digits (at most 18: exact in u128).
    let shift = match shift {
        Some(s) if s > 0 => s,
        _ => return Err(FORM.into()),
    };
    if frac.is_empty() || frac.len() > 18 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FORM.into());
    }
    let scale = 10u128.pow(frac.len() as u32);
    let frac: u128 = frac.parse().map_err(|_| FORM.to_string())?;
    let units = u128::from(int) * scale + frac;
    // units / scale * 2^shift, rounded to the nearest byte; at most 2^64 * 10^18 * 2^60 would
    // overflow u128, so check the whole part first.
    if int >= 1u64 << (64 - shift) {
        return Err("too large".into());
    }
    let bytes = ((units << shift) + scale / 2) / scale;
    u64::try_from(bytes).map_err(|_| "too large".to_string())
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

/// A size for people, in the form [`size`] reads back: three significant figures at most, in
/// the largest unit it reaches (powers of 1024), trailing zeros left out: `0B`, `512B`,
/// `1.5K`, `300M`, `4G`, `1.18G`. Exact for round sizes (`4G`, `1.5G`, `256K`), within half a
/// unit of the last figure otherwise (0.5%); `size(show_size(n))` shows as `show_size(n)`
/// again. The one way sizes are written for people (`mirrorfs status`, `get`, `list`,
/// `iostat`, progress, messages); machine formats (the statistics document, Prometheus) keep
/// exact byte counts.
pub fn show_size(n: u64) -> String {
    if n < 1024 {
        return format!("{n}B");
    }
    let mut u = 0;
    let mut v = n as f64;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    // Three significant figures; a value that rounds up to 1024 goes to the next unit.
    let decimals = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    let mut text = format!("{v:.decimals$}");
    if text == "1024" && u + 1 < UNITS.len() {
        u += 1;
        text = "1".into();
    }
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let shown = format!("{text}{}", UNITS[u].0);
    // Near the top of u64 the rounded figure may not fit back: then the exact count.
    if size(&shown).is_ok() {
        shown
    } else {
        format!("{n}B")
    }
}

/// [`show_size`] when it reads back as exactly `n` (`256K`, `1.5M`), else the byte count
/// (`1234567B`): for a size that names a setting (`round-robin:SIZE` in a policy's name), which
/// must be given back as it was.
pub fn show_size_exact(n: u64) -> String {
    let shown = show_size(n);
    if size(&shown) == Ok(n) {
        shown
    } else {
        format!("{n}B")
    }
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
        assert_eq!(size("0B"), Ok(0));
        assert_eq!(size("4G"), Ok(4 << 30));
        assert_eq!(size("512m"), Ok(512 << 20));
        assert_eq!(size("64k"), Ok(64 << 10));
        assert_eq!(size("1T"), Ok(1 << 40));
        assert_eq!(size("1234"), Ok(1234));
        assert_eq!(size("1234B"), Ok(1234));
        assert_eq!(size(" 2M "), Ok(2 << 20));
        assert_eq!(size("1.5G"), Ok(3 << 29));
        assert_eq!(size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(size("1.5gib"), Ok(3 << 29));
        assert_eq!(size("512KiB"), Ok(512 << 10));
        assert_eq!(size("2 K"), Ok(2048));
        assert_eq!(size("0.5K"), Ok(512));
        assert_eq!(size("1.18G"), Ok(1_267_015_352)); // 1.18 * 2^30 = 1267015352.32
        assert_eq!(size("15E"), Ok(15 << 60));
        assert_eq!(size("15.9E"), Ok(18_331_451_923_248_866_918));
        for bad in [
            "4X",
            "G",
            "GiB",
            "iB",
            "-1",
            "1.5",
            "1.5B",
            "1.G",
            ".5G",
            "1..5G",
            "1.5.2",
            "1GB",
            "1KK",
            "1  G",
            "1 \tG",
            "",
            "16E",
            "16777216T",
            "18446744073709551616",
            "0.0000000000000000001G",
        ] {
            assert!(size(bad).is_err(), "{bad}");
        }
        assert_eq!(size_in("1M", 4096, 1 << 30), Ok(1 << 20));
        assert_eq!(
            size_in("2G", 4096, 1 << 30).unwrap_err(),
            "between 4K and 1G"
        );
    }

    #[test]
    fn sizes_shown() {
        for (n, text) in [
            (0, "0B"),
            (1000, "1000B"),
            (1023, "1023B"),
            (1024, "1K"),
            (1536, "1.5K"),
            (262_144, "256K"),
            (300 << 20, "300M"),
            (4 << 30, "4G"),
            (3 << 29, "1.5G"),
            (1_267_015_352, "1.18G"),
            (12_345_678, "11.8M"),
            ((1 << 30) - (1 << 19), "1G"), // 1023.5M rounds to 1024M: one unit up
            (1 << 40, "1T"),
            (u64::MAX, "18446744073709551615B"),
        ] {
            assert_eq!(show_size(n), text, "{n}");
        }
    }

    /// What is shown reads back as the same size (exactly for round sizes, within 0.5%
    /// otherwise), and shows the same again: `mirrorfs get` fed to `mirrorfs set` or `-o`
    /// means what it said.
    #[test]
    fn shown_sizes_read_back() {
        let mut n: u64 = 1;
        let mut samples = vec![0, 1, 1023, 1024, 4095, u64::MAX, u64::MAX - 1, 15 << 60];
        while n < u64::MAX / 3 {
            samples.extend([n, n - 1, n + 1, n / 10 * 7, n * 3, n / 1000 * 999]);
            n = n * 3 / 2 + 1;
        }
        for n in samples {
            let shown = show_size(n);
            let back = size(&shown).unwrap_or_else(|e| panic!("{n} shown as {shown}: {e}"));
            assert_eq!(show_size(back), shown, "{n}");
            let err = back.abs_diff(n) as f64;
            assert!(
                err <= n as f64 * 0.005 + 0.5,
                "{n} shown as {shown} = {back}"
            );
        }
        for k in [1u64, 4, 15, 100, 256, 999] {
            for shift in [10, 20, 30, 40, 50] {
                assert_eq!(size(&show_size(k << shift)), Ok(k << shift));
            }
        }
        assert_eq!(size(&show_size(3 << 29)), Ok(3 << 29));
        assert_eq!(show_size_exact(3 << 29), "1.5G");
        assert_eq!(show_size_exact(1_234_567), "1234567B");
        assert_eq!(size(&show_size_exact(1_234_567)), Ok(1_234_567));
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
