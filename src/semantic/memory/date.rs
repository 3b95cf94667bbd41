//! Civil calendar dates (proleptic Gregorian, no time zone): parsing message times and resolving
//! "tomorrow" without ever reading the clock, so extraction stays deterministic.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

impl Date {
    pub fn new(year: i32, month: u32, day: u32) -> Option<Date> {
        let ok = (1..=9999).contains(&year)
            && (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month);
        ok.then_some(Date { year, month, day })
    }

    /// `YYYY-MM-DD` exactly.
    pub fn parse_iso(s: &str) -> Option<Date> {
        let b = s.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<u32> {
            let part = &s[r];
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        Date::new(num(0..4)? as i32, num(5..7)?, num(8..10)?)
    }

    /// The date of a message time: an ISO 8601 / RFC 3339 string (its date part), or epoch
    /// seconds or milliseconds.
    pub fn from_time(s: &str) -> Option<Date> {
        let s = s.trim();
        if s.len() >= 10 && s.is_char_boundary(10) {
            if let Some(d) = Date::parse_iso(&s[..10]) {
                return Some(d);
            }
        }
        let n: f64 = s.parse().ok()?;
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        // Above 1e11 it can only be milliseconds (1e11 s is the year 5138).
        let secs = if n > 1e11 { n / 1000.0 } else { n };
        Some(Date::from_days((secs / 86_400.0).floor() as i64))
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm).
    pub fn days(self) -> i64 {
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    pub fn from_days(z: i64) -> Date {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
        Date { year, month, day }
    }

    /// Monday = 0 ... Sunday = 6 (1970-01-01 was a Thursday).
    pub fn weekday(self) -> i64 {
        (self.days() + 3).rem_euclid(7)
    }

    pub fn add_days(self, n: i64) -> Date {
        Date::from_days(self.days() + n)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_arithmetic_round_trips() {
        for (s, days) in [
            ("1970-01-01", 0),
            ("2000-02-29", 11_016),
            ("2026-11-29", 20_786),
        ] {
            let d = Date::parse_iso(s).unwrap();
            assert_eq!(d.days(), days, "{s}");
            assert_eq!(Date::from_days(days), d);
            assert_eq!(d.to_string(), s);
        }
        let d = Date::parse_iso("2026-12-31").unwrap();
        assert_eq!(d.add_days(1).to_string(), "2027-01-01");
        assert_eq!(
            Date::parse_iso("2027-03-01")
                .unwrap()
                .add_days(-1)
                .to_string(),
            "2027-02-28"
        );
        assert!(Date::parse_iso("2026-02-30").is_none());
        assert!(Date::parse_iso("2026-1-05").is_none());
        assert_eq!(
            Date::from_time("2026-11-29T23:59:59+01:00")
                .unwrap()
                .to_string(),
            "2026-11-29"
        );
        assert_eq!(
            Date::from_time("1795953600").unwrap().to_string(),
            "2026-11-29"
        );
        assert_eq!(
            Date::from_time("1795953600000").unwrap().to_string(),
            "2026-11-29"
        );
        assert!(Date::from_time("yesterday").is_none());
        assert_eq!(
            Date::parse_iso("2026-11-29").unwrap().weekday(),
            6,
            "a Sunday"
        );
        assert_eq!(
            Date::parse_iso("1970-01-01").unwrap().weekday(),
            3,
            "a Thursday"
        );
    }
}
