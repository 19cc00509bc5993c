//! Release ids (contract §8.3): the UTC time to the millisecond with `-`, `:` and `.` removed,
//! `-`, and a 6-digit process-local counter, e.g. `20260715T102030123Z-000000`. Ids sort
//! lexically in the order they were made; build ids come from the same generator.

use std::fmt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

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
    /// million).
    pub fn at(unix_ms: u64, counter: u32) -> ReleaseId {
        let (year, month, day, hour, minute, second, milli) = civil(unix_ms);
        ReleaseId(format!(
            "{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}{milli:03}Z-{:06}",
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

    /// The id's time, in milliseconds since the epoch.
    pub fn unix_ms(&self) -> u64 {
        let digits = |range: std::ops::Range<usize>| self.0[range].parse::<u64>().unwrap_or(0);
        let days = days_from_civil(
            i64::try_from(digits(0..4)).unwrap_or(0),
            digits(4..6),
            digits(6..8),
        );
        let seconds = digits(9..11) * 3600 + digits(11..13) * 60 + digits(13..15);
        u64::try_from(days).unwrap_or(0) * 86_400_000 + seconds * 1000 + digits(15..18)
    }
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

/// The UTC calendar fields of `unix_ms`: year, month, day, hour, minute, second, millisecond.
fn civil(unix_ms: u64) -> (i64, u64, u64, u64, u64, u64, u64) {
    let milli = unix_ms % 1000;
    let secs = unix_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days, on days since 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    (
        year,
        unsigned(month),
        unsigned(day),
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        milli,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of [`civil`]).
fn days_from_civil(year: i64, month: u64, day: u64) -> i64 {
    let month = i64::try_from(month).unwrap_or(1);
    let day = i64::try_from(day).unwrap_or(1);
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
