//! Civil calendar dates (proleptic Gregorian, no time zone): parsing message times and resolving
//! "tomorrow" without ever reading the clock, so extraction stays deterministic. The calendar
//! arithmetic is jiff's.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

/// 1970-01-01, day 0 of [`Date::days`].
const EPOCH: jiff::civil::Date = jiff::civil::date(1970, 1, 1);

impl Date {
    pub fn new(year: i32, month: u32, day: u32) -> Option<Date> {
        if !(1..=9999).contains(&year) {
            return None;
        }
        let d = jiff::civil::Date::new(
            i16::try_from(year).ok()?,
            i8::try_from(month).ok()?,
            i8::try_from(day).ok()?,
        )
        .ok()?;
        Some(Date::of(d))
    }

    fn of(d: jiff::civil::Date) -> Date {
        Date {
            year: i32::from(d.year()),
            month: d.month().unsigned_abs().into(),
            day: d.day().unsigned_abs().into(),
        }
    }

    fn civil(self) -> jiff::civil::Date {
        // Every `Date` is made by `new` or `of`: a valid civil date.
        jiff::civil::Date::new(self.year as i16, self.month as i8, self.day as i8)
            .expect("a Date is a valid civil date")
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
        Date::from_days((secs / 86_400.0).floor() as i64)
    }

    /// Days since 1970-01-01.
    pub fn days(self) -> i64 {
        self.civil()
            .since(EPOCH)
            .map_or(0, |span| i64::from(span.get_days()))
    }

    /// The date `z` days after 1970-01-01; `None` outside the years 1 to 9999.
    pub fn from_days(z: i64) -> Option<Date> {
        let span = jiff::Span::new().try_days(z).ok()?;
        EPOCH
            .checked_add(span)
            .ok()
            .map(Date::of)
            .filter(|d| d.year >= 1)
    }

    /// Monday = 0 ... Sunday = 6.
    pub fn weekday(self) -> i64 {
        i64::from(self.civil().weekday().to_monday_zero_offset())
    }

    /// The date `n` days later (earlier when negative); `None` outside the years 1 to 9999.
    pub fn add_days(self, n: i64) -> Option<Date> {
        Date::from_days(self.days() + n)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
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
            assert_eq!(Date::from_days(days), Some(d));
            assert_eq!(d.to_string(), s);
        }
        let d = Date::parse_iso("2026-12-31").unwrap();
        assert_eq!(d.add_days(1).unwrap().to_string(), "2027-01-01");
        assert_eq!(
            Date::parse_iso("2027-03-01")
                .unwrap()
                .add_days(-1)
                .unwrap()
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
