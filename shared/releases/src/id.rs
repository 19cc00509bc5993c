//! Release ids: the UTC time to the millisecond with `-`, `:` and `.` removed,
//! `-`, and a 6-digit process-local counter, e.g. `20260715T102030123Z-000000`. Ids sort
//! lexically in the order they were made; build ids come from the same generator.

use std::fmt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

use crate::error::ReleaseError;

/// Length of every id: 8 date digits, `T`, 9 time digits, `Z`, `-`, 6 counter digits.
const ID_LEN: usize = 26;

/// The counter wraps at a million (`mod 1,000,000`, six digits).
const COUNTER_MODULUS: u32 = 1_000_000;

/// A validated release id. It is also a safe single path component: only digits, `T`, `Z`
/// and one `-`, never a dot, so it can name neither a staging leftover nor a way out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleaseId(String);

/// The process-wide generator's state: the last time used and the counter.
struct Generator {
    last_ms: u64,
    counter: u32,
}

static GENERATOR: Mutex<Generator> = Mutex::new(Generator {
    last_ms: 0,
    counter: 0,
});

// === impl ReleaseId ===

impl ReleaseId {
    /// A new id from the process-wide generator: now (never earlier than the last id made, so
    /// a clock stepped back does not reorder ids) and the next counter value.
    pub fn generate() -> ReleaseId {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        // A poisoned lock only means another thread panicked mid-increment; the state is two
        // integers and still usable.
        let mut state = GENERATOR
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ms = now_ms.max(state.last_ms);
        let counter = state.counter;
        state.last_ms = ms;
        state.counter = (counter + 1) % COUNTER_MODULUS;
        ReleaseId::at(ms, counter)
    }

    /// The id for `unix_ms` (milliseconds since the epoch, UTC) and `counter` (taken mod a
    /// million). A time past the year 9999 is written as one late in that year.
    pub fn at(unix_ms: u64, counter: u32) -> ReleaseId {
        let at = i64::try_from(unix_ms)
            .ok()
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
            .unwrap_or(Timestamp::MAX);
        let t = TimeZone::UTC.to_datetime(at);
        ReleaseId(format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}{:03}Z-{:06}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond(),
            counter % COUNTER_MODULUS
        ))
    }

    /// Parses `given`, refusing anything that is not exactly an id's shape (this is what keeps
    /// `../x`, `a/b`, `.staging-…` and the empty string out of every path).
    pub fn parse(given: &str) -> Result<ReleaseId, ReleaseError> {
        let bytes = given.as_bytes();
        let shaped = bytes.len() == ID_LEN
            && bytes.iter().enumerate().all(|(i, &b)| match i {
                8 => b == b'T',
                18 => b == b'Z',
                19 => b == b'-',
                _ => b.is_ascii_digit(),
            });
        if shaped {
            Ok(ReleaseId(given.to_owned()))
        } else {
            Err(ReleaseError::InvalidReleaseId {
                given: given.chars().take(64).collect(),
            })
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The smallest id after this one: the same time with the next counter, or the next
    /// millisecond's first id when the counter is at its end.
    pub fn successor(&self) -> ReleaseId {
        let counter: u32 = self.0[20..].parse().unwrap_or(0);
        if counter + 1 < COUNTER_MODULUS {
            ReleaseId(format!("{}{:06}", &self.0[..20], counter + 1))
        } else {
            ReleaseId::at(self.unix_ms().saturating_add(1), 0)
        }
    }

    /// The id's time, in milliseconds since the epoch (a date before it counts as its first day).
    /// The shape does not promise a real date: a month or day past its end rolls over into the
    /// next ones, so every id still maps to a time.
    pub fn unix_ms(&self) -> u64 {
        let digits = |range: std::ops::Range<usize>| self.0[range].parse::<i64>().unwrap_or(0);
        let midnight = midnight_ms(digits(0..4), digits(4..6), digits(6..8)).unwrap_or(0);
        let seconds = digits(9..11) * 3600 + digits(11..13) * 60 + digits(13..15);
        u64::try_from(midnight).unwrap_or(0)
            + u64::try_from(seconds * 1000 + digits(15..18)).unwrap_or(0)
    }
}

/// Milliseconds since the epoch of the start of `year`-`month`-`day` UTC, counting months
/// from January 1 and days from the month's first, so that out-of-range fields roll over.
fn midnight_ms(year: i64, month: i64, day: i64) -> Option<i64> {
    let jan1 = Date::new(i16::try_from(year).ok()?, 1, 1).ok()?;
    let date = jan1
        .checked_add(Span::new().try_months(month - 1).ok()?)
        .ok()?
        .checked_add(Span::new().try_days(day - 1).ok()?)
        .ok()?;
    Some(
        date.to_zoned(TimeZone::UTC)
            .ok()?
            .timestamp()
            .as_millisecond(),
    )
}

impl fmt::Display for ReleaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ReleaseId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_contract_shape() {
        // 2026-07-15T10:20:30.123Z
        let ms = 1_784_110_830_123;
        assert_eq!(ReleaseId::at(ms, 0).as_str(), "20260715T102030123Z-000000");
        assert_eq!(ReleaseId::at(0, 42).as_str(), "19700101T000000000Z-000042");
        assert_eq!(
            ReleaseId::at(951_782_400_000, 1_000_001).as_str(),
            "20000229T000000000Z-000001"
        );
        for ms in [0, 951_782_400_000, ms, 4_102_444_799_999] {
            assert_eq!(ReleaseId::at(ms, 7).unix_ms(), ms);
        }
    }

    #[test]
    fn an_impossible_date_rolls_over_into_the_next_days() {
        let rolled = ReleaseId::parse("20260231T000000000Z-000000").unwrap();
        let real = ReleaseId::parse("20260303T000000000Z-000000").unwrap();
        assert_eq!(rolled.unix_ms(), real.unix_ms());
        let month_13 = ReleaseId::parse("20261301T010203004Z-000000").unwrap();
        let january = ReleaseId::parse("20270101T010203004Z-000000").unwrap();
        assert_eq!(month_13.unix_ms(), january.unix_ms());
    }

    #[test]
    fn a_time_past_the_year_9999_still_gives_a_well_shaped_id() {
        let id = ReleaseId::at(u64::MAX, 0);
        assert!(id.as_str().starts_with("9999"), "{id}");
        assert_eq!(ReleaseId::parse(id.as_str()).unwrap(), id);
    }

    #[test]
    fn generated_ids_sort_in_the_order_they_were_made() {
        let ids: Vec<ReleaseId> = (0..2000).map(|_| ReleaseId::generate()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} !< {}", pair[0], pair[1]);
            assert!(pair[0].as_str() < pair[1].as_str());
        }
        for id in &ids {
            assert_eq!(ReleaseId::parse(id.as_str()).unwrap(), *id);
        }
    }

    #[test]
    fn successor_is_the_next_id() {
        let id = ReleaseId::parse("20260715T102030123Z-000041").unwrap();
        assert_eq!(id.successor().as_str(), "20260715T102030123Z-000042");
        let last = ReleaseId::parse("20261231T235959999Z-999999").unwrap();
        assert_eq!(last.successor().as_str(), "20270101T000000000Z-000000");
        assert!(last < last.successor());
    }

    #[test]
    fn parse_refuses_everything_but_the_shape() {
        let cases = [
            ("empty", ""),
            ("parent", ".."),
            ("escape", "../20260715T102030123Z-000000"),
            ("nested", "20260715T102030123Z-000000/x"),
            ("staging leftover", ".staging-20260715T102030123Z-000000"),
            ("short counter", "20260715T102030123Z-00000"),
            ("long", "20260715T102030123Z-0000000"),
            ("lower t", "20260715t102030123Z-000000"),
            ("letter in date", "2026071AT102030123Z-000000"),
            ("slash", "20260715T102030123Z/000000"),
            ("nul", "20260715T102030123Z-00000\0"),
            ("unicode digit", "2026071５T102030123Z-00000"),
        ];
        for (name, given) in cases {
            let err = ReleaseId::parse(given).unwrap_err();
            assert_eq!(err.reason(), "invalid_release_id", "case {name}");
        }
    }
}
