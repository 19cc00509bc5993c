//! `GET /audit?since=&tz=`: usage totals and rollups by user,
//! scope, model and day, the days in the viewer's IANA time zone. A zone that does not exist is
//! a 400, never a silent UTC.
//!
//! One pass over the messages since `since`, in time order through the covering usage index:
//! totals per conversation, and per local day with its distinct conversations. Day boundaries
//! are computed once per day, so each message costs a text comparison, not a time-zone lookup.
//!
//! Also the audit log: [`try_record`] and [`record`] write an event (and log it under the
//! `audit` target), and `GET /audit/events?limit=&action=` reads the newest ones.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use atelier_http::{json_response, Response};
use hyper::StatusCode;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde::Serialize;
use serde_json::json;

use crate::caller::{Caller, Capability};
use crate::error::ApiError;
use crate::state::{blocking, State};
use crate::store::audit::SlotSample;
use crate::store::events::AuditEvent;
use crate::store::{Scope, Store, StoreError, USAGE_SLOT_SECS};

/// The window when `since` is absent or unreadable: the last 30 days.
const DEFAULT_WINDOW_DAYS: i64 = 30;

/// How many events the log answers when `limit` is absent: the CMS's own page.
const EVENTS_DEFAULT_LIMIT: usize = 100;

/// The most events one answer carries.
const EVENTS_MAX_LIMIT: usize = 500;

/// One rollup row's numbers (`UsageRow`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Distinct conversations with a message in the window.
    pub chat_count: i64,
    /// Cache-read tokens.
    pub cache_read_tokens: i64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: i64,
}

impl UsageRow {
    fn add(&mut self, sample: &SlotSample<'_>) {
        self.prompt_tokens += sample.prompt_tokens;
        self.completion_tokens += sample.completion_tokens;
        self.cost_usd += sample.cost_usd;
        self.cache_read_tokens += sample.cache_read_tokens;
        self.cache_creation_tokens += sample.cache_creation_tokens;
    }

    fn merge(&mut self, other: &UsageRow) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
        self.chat_count += other.chat_count;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_creation_tokens += other.cache_creation_tokens;
    }

    fn rounded(mut self) -> Self {
        self.cost_usd = (self.cost_usd * 1e6).round() / 1e6;
        self
    }
}

/// A rollup row with its key fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Keyed<K: Serialize> {
    /// The grouping key's fields.
    #[serde(flatten)]
    pub key: K,
    /// The numbers.
    #[serde(flatten)]
    pub usage: UsageRow,
}

/// By-user key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserKey {
    /// The user.
    pub user_id: String,
    /// How to show them: what the CMS last called them (display name, else email), else the
    /// id.
    pub user_label: String,
}

/// By-scope key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeKey {
    /// The scope.
    pub scope: Scope,
}

/// By-model key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelKey {
    /// The provider of the conversation's current credential, or `unknown`.
    pub provider_id: String,
    /// The conversation's current model.
    pub model_id: String,
}

/// By-day key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayKey {
    /// `YYYY-MM-DD` in the viewer's zone.
    pub day: String,
}

/// The whole audit answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// The window's start (ISO 8601 UTC with milliseconds).
    pub since: String,
    /// Everything.
    pub totals: UsageRow,
    /// Per user, costliest first.
    pub by_user: Vec<Keyed<UserKey>>,
    /// Per scope, costliest first.
    pub by_scope: Vec<Keyed<ScopeKey>>,
    /// Per provider and model, costliest first.
    pub by_model: Vec<Keyed<ModelKey>>,
    /// Per local day with activity, oldest first.
    pub by_day: Vec<Keyed<DayKey>>,
}

/// `ts` as the stored timestamps are written: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn iso_millis(ts: Timestamp) -> String {
    let utc = ts.to_zoned(TimeZone::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        utc.year(),
        utc.month(),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second(),
        utc.millisecond()
    )
}

/// Reads `since` as the reference's `Date.parse` mostly does: an RFC 3339 instant, or a bare
/// date meaning its UTC midnight; `None` otherwise.
pub fn parse_since(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Some(ts);
    }
    let date: jiff::civil::Date = text.parse().ok()?;
    date.to_zoned(TimeZone::UTC).ok().map(|z| z.timestamp())
}

/// Bins usage slots, which arrive in order, into local days of `zone`.
struct DayBinner {
    zone: TimeZone,
    day: String,
    /// The first slot of the next local day (every zone's midnight is on a slot boundary).
    next: i64,
    started: bool,
}

impl DayBinner {
    fn new(zone: TimeZone) -> Self {
        DayBinner {
            zone,
            day: String::new(),
            next: i64::MIN,
            started: false,
        }
    }

    /// Whether `slot` starts a new day; `day` is then that day.
    fn advance(&mut self, slot: i64) -> bool {
        if self.started && slot < self.next {
            return false;
        }
        self.started = true;
        let seconds = slot.saturating_mul(USAGE_SLOT_SECS);
        let Ok(ts) = Timestamp::from_second(seconds) else {
            self.day = "unknown".to_owned();
            self.next = i64::MAX;
            return true;
        };
        let date = ts.to_zoned(self.zone.clone()).date();
        self.day = format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day());
        self.next = date
            .checked_add(1.day())
            .ok()
            .and_then(|tomorrow| tomorrow.to_zoned(self.zone.clone()).ok())
            .map(|z| z.timestamp().as_second().div_euclid(USAGE_SLOT_SECS))
            .unwrap_or(i64::MAX);
        true
    }
}

/// The rollup's hasher for conversation ids: FxHash's multiply-and-rotate, a few cycles per
/// word where the default SipHash takes tens. The ids are chatd's own random ones, never
/// chosen by a client, so nobody can pick keys that collide.
#[derive(Debug, Clone, Copy, Default)]
struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// One conversation's numbers in the window, and the last day it was counted in.
struct Seen {
    usage: UsageRow,
    last_day: usize,
}

/// Every rollup over `store`'s usage since `since`, days in `zone`. The quarter-hour that
/// holds `since` is read message by message (only its messages from `since` on count); every
/// later one from the usage slots.
pub fn report(store: &Store, since: Timestamp, zone: TimeZone) -> Result<AuditReport, StoreError> {
    let since_text = iso_millis(since);
    let since_second = since.as_second();
    let first_slot = since_second.div_euclid(USAGE_SLOT_SECS);
    let partial = since_second.rem_euclid(USAGE_SLOT_SECS) != 0 || since.subsec_nanosecond() != 0;
    let full_from = if partial { first_slot + 1 } else { first_slot };
    let mut per_conversation: HashMap<String, Seen, BuildHasherDefault<IdHasher>> =
        HashMap::default();
    let mut days: Vec<Keyed<DayKey>> = Vec::new();
    let mut binner = DayBinner::new(zone);
    let mut add = |sample: SlotSample<'_>| {
        if binner.advance(sample.slot) {
            days.push(Keyed {
                key: DayKey {
                    day: binner.day.clone(),
                },
                usage: UsageRow::default(),
            });
        }
        let today = days.len() - 1;
        let counted_today = match per_conversation.get_mut(sample.conversation_id) {
            Some(seen) => {
                seen.usage.add(&sample);
                std::mem::replace(&mut seen.last_day, today) == today
            }
            None => {
                let mut usage = UsageRow {
                    chat_count: 1,
                    ..UsageRow::default()
                };
                usage.add(&sample);
                per_conversation.insert(
                    sample.conversation_id.to_owned(),
                    Seen {
                        usage,
                        last_day: today,
                    },
                );
                false
            }
        };
        let day = &mut days[today].usage;
        day.add(&sample);
        if !counted_today {
            day.chat_count += 1;
        }
    };
    if partial {
        let until = Timestamp::from_second(full_from.saturating_mul(USAGE_SLOT_SECS))
            .map(iso_millis)
            .unwrap_or_default();
        store.scan_usage(&since_text, &until, |message| {
            add(SlotSample {
                slot: first_slot,
                conversation_id: message.conversation_id,
                prompt_tokens: message.prompt_tokens,
                completion_tokens: message.completion_tokens,
                cost_usd: message.cost_usd,
                cache_read_tokens: message.cache_read_tokens,
                cache_creation_tokens: message.cache_creation_tokens,
            })
        })?;
    }
    store.scan_usage_slots(full_from, &mut add)?;

    let mut totals = UsageRow::default();
    let mut by_user: HashMap<String, UsageRow> = HashMap::new();
    let mut by_scope: HashMap<Scope, UsageRow> = HashMap::new();
    let mut by_model: HashMap<(String, String), UsageRow> = HashMap::new();
    if !per_conversation.is_empty() {
        store.scan_conversation_facts(|fact| {
            let Some(Seen { usage: row, .. }) = per_conversation.get(fact.id) else {
                return;
            };
            totals.merge(row);
            match by_user.get_mut(fact.user_id) {
                Some(user) => user.merge(row),
                None => {
                    by_user.insert(fact.user_id.to_owned(), *row);
                }
            }
            by_scope.entry(fact.scope).or_default().merge(row);
            let provider = fact.provider_id.unwrap_or("unknown");
            by_model
                .entry((provider.to_owned(), fact.model_id.to_owned()))
                .or_default()
                .merge(row);
        })?;
    }
    let by_cost = |a: &UsageRow, b: &UsageRow| {
        b.cost_usd
            .total_cmp(&a.cost_usd)
            .then(b.prompt_tokens.cmp(&a.prompt_tokens))
    };
    let mut labels = store.user_labels()?;
    let mut by_user: Vec<Keyed<UserKey>> = by_user
        .into_iter()
        .map(|(user_id, usage)| Keyed {
            key: UserKey {
                user_label: labels.remove(&user_id).unwrap_or_else(|| user_id.clone()),
                user_id,
            },
            usage: usage.rounded(),
        })
        .collect();
    by_user.sort_by(|a, b| by_cost(&a.usage, &b.usage).then(a.key.user_id.cmp(&b.key.user_id)));
    let mut by_scope: Vec<Keyed<ScopeKey>> = by_scope
        .into_iter()
        .map(|(scope, usage)| Keyed {
            key: ScopeKey { scope },
            usage: usage.rounded(),
        })
        .collect();
    by_scope.sort_by(|a, b| {
        b.usage
            .cost_usd
            .total_cmp(&a.usage.cost_usd)
            .then(a.key.scope.as_str().cmp(b.key.scope.as_str()))
    });
    let mut by_model: Vec<Keyed<ModelKey>> = by_model
        .into_iter()
        .map(|((provider_id, model_id), usage)| Keyed {
            key: ModelKey {
                provider_id,
                model_id,
            },
            usage: usage.rounded(),
        })
        .collect();
    by_model.sort_by(|a, b| {
        by_cost(&a.usage, &b.usage)
            .then(a.key.provider_id.cmp(&b.key.provider_id))
            .then(a.key.model_id.cmp(&b.key.model_id))
    });
    for day in &mut days {
        day.usage = day.usage.rounded();
    }
    Ok(AuditReport {
        since: since_text,
        totals: totals.rounded(),
        by_user,
        by_scope,
        by_model,
        by_day: days,
    })
}

fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| percent_decode(value))
    })
}

/// Decodes `%XX` escapes and `+` (a query's space); invalid escapes stay as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /audit`.
pub(crate) async fn handle(
    state: &State,
    caller: &Caller,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    caller.require(Capability::AuditRead)?;
    // As the original: a zone this host does not know (a browser's `Etc/Unknown`, a name newer
    // than the time zone database) bins the days in UTC rather than failing the Audit tab.
    let zone = query_param(query, "tz")
        .and_then(|name| TimeZone::get(&name).ok())
        .unwrap_or(TimeZone::UTC);
    let since = query_param(query, "since")
        .as_deref()
        .and_then(parse_since)
        .unwrap_or_else(|| {
            Timestamp::now()
                .checked_sub((DEFAULT_WINDOW_DAYS * 24).hours())
                .unwrap_or(Timestamp::UNIX_EPOCH)
        });
    let report = blocking(&state.store, move |store| report(store, since, zone)).await?;
    Ok(json_response(StatusCode::OK, &json!(report)))
}

/// Records `event` by `actor` in the audit log, and logs it under the `audit` target.
pub(crate) async fn try_record(
    store: &Arc<Store>,
    actor: &str,
    event: AuditEvent,
) -> Result<(), ApiError> {
    let (target_type, target_id) = event.target();
    tracing::info!(
        target: "audit",
        action = event.action().as_str(),
        user_id = %actor,
        target_type,
        target_id,
        metadata = %event.metadata(),
        "audit event"
    );
    let actor = actor.to_owned();
    blocking(store, move |store| store.record_event(&actor, &event)).await
}

/// [`try_record`] for a change that has already happened: a failed write is logged, and the
/// request still succeeds.
pub(crate) async fn record(store: &Arc<Store>, caller: &Caller, event: AuditEvent) {
    let action = event.action().as_str();
    if let Err(error) = try_record(store, &caller.user_id, event).await {
        tracing::error!(%error, action, "an audit event could not be stored");
    }
}

/// A `limit` from 1 to [`EVENTS_MAX_LIMIT`].
fn parse_limit(text: &str) -> Option<usize> {
    text.parse::<usize>()
        .ok()
        .filter(|limit| (1..=EVENTS_MAX_LIMIT).contains(limit))
}

/// `GET /audit/events`: `{events: [...]}`, newest first; `limit` (default 100, at most 500)
/// and an `action` prefix (`ai.chat.`) narrow it.
pub(crate) async fn events(
    state: &State,
    caller: &Caller,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    caller.require(Capability::AuditRead)?;
    let limit = match query_param(query, "limit") {
        None => EVENTS_DEFAULT_LIMIT,
        Some(text) => parse_limit(&text).ok_or(ApiError::BadLimit(text))?,
    };
    let prefix = query_param(query, "action").filter(|prefix| !prefix.is_empty());
    let events = blocking(&state.store, move |store| {
        store.audit_events(limit, prefix.as_deref())
    })
    .await?;
    Ok(json_response(StatusCode::OK, &json!({ "events": events })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_whole_numbers_from_1_to_500() {
        let cases = [
            ("1", Some(1)),
            ("100", Some(100)),
            ("500", Some(500)),
            ("0", None),
            ("501", None),
            ("-1", None),
            ("ten", None),
            ("", None),
            ("2.5", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_limit(text), expected, "{text:?}");
        }
    }

    #[test]
    fn since_reads_instants_and_dates() {
        let ts = parse_since("2026-03-29T00:30:00+02:00").unwrap();
        assert_eq!(iso_millis(ts), "2026-03-28T22:30:00.000Z");
        assert_eq!(
            iso_millis(parse_since("2026-12-01").unwrap()),
            "2026-12-01T00:00:00.000Z"
        );
        assert_eq!(parse_since("last tuesday"), None);
    }

    #[test]
    fn days_bin_in_the_zone_across_midnight_and_dst() {
        let slot = |text: &str| text.parse::<Timestamp>().unwrap().as_second() / USAGE_SLOT_SECS;
        let zone = TimeZone::get("Europe/Bratislava").unwrap();
        let mut binner = DayBinner::new(zone);
        // 22:30 UTC on 28 March 2026 is 23:30 there (CET, UTC+1).
        assert!(binner.advance(slot("2026-03-28T22:30:00Z")));
        assert_eq!(binner.day, "2026-03-28");
        assert!(!binner.advance(slot("2026-03-28T22:45:00Z")));
        assert!(binner.advance(slot("2026-03-28T23:00:00Z")));
        assert_eq!(binner.day, "2026-03-29");
        // Summer time starts that night: the next midnight is 22:00 UTC.
        assert!(!binner.advance(slot("2026-03-29T21:45:00Z")));
        assert!(binner.advance(slot("2026-03-29T22:00:00Z")));
        assert_eq!(binner.day, "2026-03-30");
        // Kathmandu is UTC+5:45: its midnight is still on a quarter-hour.
        let mut nepal = DayBinner::new(TimeZone::get("Asia/Kathmandu").unwrap());
        assert!(nepal.advance(slot("2026-03-01T18:00:00Z")));
        assert_eq!(nepal.day, "2026-03-01");
        assert!(nepal.advance(slot("2026-03-01T18:15:00Z")));
        assert_eq!(nepal.day, "2026-03-02");
    }

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(
            query_param(Some("since=x&tz=America%2FNew_York"), "tz").as_deref(),
            Some("America/New_York")
        );
        assert_eq!(percent_decode("a%zzb+c%41"), "a%zzb cA");
        assert_eq!(query_param(Some("tz"), "tz"), None);
    }
}
