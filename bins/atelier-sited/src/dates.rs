//! Timestamps as sited writes them into every record that carries one (site manifests and
//! their publications, session metas and events, build records, audit lines): the format the
//! original daemon wrote with JavaScript's `toISOString`.

use std::time::{SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as JavaScript's `toISOString` writes it. A time before the
/// epoch is written as the epoch, one past the year 9999 as one late in that year.
pub fn iso8601(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let at = i64::try_from(since.as_millis())
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    format!("{at:.3}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn iso8601_matches_javascript() {
        let cases = [
            (0, 0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, 5, "2000-02-29T00:00:00.005Z"),
            (1_798_761_599, 999, "2026-12-31T23:59:59.999Z"),
        ];
        for (secs, millis, want) in cases {
            let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis);
            assert_eq!(iso8601(t), want);
        }
    }
}
