//! The audit rollup over 1,000,000 stored messages, and the insert rate of messages.
//!
//! The messages come as chat turns do: 40,000 conversations of five turns each, a turn being
//! five messages written within ten seconds (user, tool call, tool result, tool call, reply
//! with the turn's usage), the turns spread over 60 days.
//!
//! Rollup: `audit::report` (totals, by user, scope, model and day in a real time zone) over
//! the whole table and over its newer half, against a baseline in the same process — one SQL
//! aggregate over the messages themselves through their covering index.
//!
//! Inserts, one at a time: `Store::append_message` (one durable commit per message: position,
//! row, conversation bump, usage slot) against a bare autocommit `INSERT` with the same
//! durability settings.
//!
//! Inserts, 64 at once: 64 threads each appending to a conversation of its own, through the
//! store's group commit against a baseline in the same process — the same store opened with
//! one write per commit, so every message is its own transaction and fsync, as before group
//! commit. Rounds alternate between the two; each reports its median round.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use atelier_chatd::store::{ContentBlock, NewMessage, Role, Store};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use rusqlite::params;

const MESSAGES: usize = 1_000_000;
const CONVERSATIONS: usize = 40_000;
const TURNS: usize = 5;
const PER_TURN: usize = 5;
const USERS: usize = 50;
const DAYS: i64 = 60;
const RUNS: usize = 15;
const DURABLE_INSERTS: usize = 2_000;
const INSERTERS: usize = 64;
const PER_INSERTER: usize = 50;
const INSERT_ROUNDS: usize = 3;

fn iso(ts: Timestamp) -> String {
    atelier_chatd::audit::iso_millis(ts)
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    (ms(samples[0]), p(0.5), p(0.99))
}

/// What one round of concurrent inserts gave: its wall time and every insert's latency.
struct Round {
    took: Duration,
    latencies: Vec<Duration>,
    commits: u64,
}

/// [`INSERTERS`] threads, each appending [`PER_INSERTER`] messages to a conversation of its
/// own (conversations from `first` on), through `store`.
fn concurrent_inserts(store: &Store, message: &NewMessage, first: usize) -> Round {
    let commits = store.group_commits();
    let began = Instant::now();
    let latencies = std::thread::scope(|scope| {
        let inserters: Vec<_> = (0..INSERTERS)
            .map(|n| {
                scope.spawn(move || {
                    let conversation = format!("c{:05}", first + n);
                    (0..PER_INSERTER)
                        .map(|_| {
                            let began = Instant::now();
                            store.append_message(&conversation, message).unwrap();
                            began.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        inserters
            .into_iter()
            .flat_map(|inserter| inserter.join().unwrap())
            .collect::<Vec<_>>()
    });
    Round {
        took: began.elapsed(),
        latencies,
        commits: store.group_commits() - commits,
    }
}

/// The median round by rate, as `(messages/s, p50 ms, p99 ms, messages per commit)`.
fn median_round(mut rounds: Vec<Round>) -> (f64, f64, f64, f64) {
    rounds.sort_by_key(|round| round.took);
    let round = rounds.swap_remove(rounds.len() / 2);
    let messages = round.latencies.len();
    let (_, p50, p99) = stats(round.latencies);
    (
        messages as f64 / round.took.as_secs_f64(),
        p50,
        p99,
        messages as f64 / round.commits.max(1) as f64,
    )
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chat.sqlite3");
    let store = Store::open(&path).unwrap();
    let start = Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(DAYS * 24))
        .unwrap();

    // Bulk load: one transaction, messages in time order across conversations.
    let loading = Instant::now();
    {
        let mut connection = rusqlite::Connection::open(&path).unwrap();
        let transaction = connection.transaction().unwrap();
        {
            let mut conversation = transaction
                .prepare(
                    "INSERT INTO ai_conversations (id, user_id, scope, title, credential_id, model_id)
                     VALUES (?1, ?2, ?3, 't', NULL, ?4)",
                )
                .unwrap();
            let scopes = ["site", "content", "data", "plugin"];
            let models = ["claude-opus-4-8", "gpt-5", "llama4"];
            for n in 0..CONVERSATIONS {
                conversation
                    .execute(params![
                        format!("c{n:05}"),
                        format!("u{}", n % USERS),
                        scopes[n % scopes.len()],
                        models[n % models.len()]
                    ])
                    .unwrap();
            }
            let mut message = transaction
                .prepare(
                    "INSERT INTO ai_messages (id, conversation_id, position, role, content_json,
                       prompt_tokens, completion_tokens, cost_usd, cache_read_tokens,
                       cache_creation_tokens, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .unwrap();
            let content = r#"[{"kind":"text","text":"Make the hero section blue and move the call to action under the headline."}]"#;
            let window_ms = DAYS * 24 * 3_600_000;
            let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
            let mut n = 0_usize;
            for conversation in 0..CONVERSATIONS {
                for turn in 0..TURNS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let turn_start = (seed % (window_ms as u64 - 60_000)) as i64;
                    for k in 0..PER_TURN {
                        let at = start
                            .checked_add(jiff::SignedDuration::from_millis(
                                turn_start + k as i64 * 2_000,
                            ))
                            .unwrap();
                        let billed = k == PER_TURN - 1;
                        message
                            .execute(params![
                                format!("m{n:07}"),
                                format!("c{conversation:05}"),
                                (turn * PER_TURN + k) as i64,
                                ["user", "assistant", "tool", "assistant", "assistant"][k],
                                content,
                                if billed { 1_200 } else { 0 },
                                if billed { 300 } else { 0 },
                                if billed { 0.0123 } else { 0.0 },
                                if billed { 400 } else { 0 },
                                if billed { 50 } else { 0 },
                                iso(at),
                            ])
                            .unwrap();
                        n += 1;
                    }
                }
            }
            assert_eq!(n, MESSAGES);
        }
        transaction.commit().unwrap();
    }
    let loaded = loading.elapsed();
    let rebuilding = Instant::now();
    store.rebuild_usage_slots().unwrap();
    let slots: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM ai_usage_slots", [], |row| row.get(0))
        .unwrap();
    println!(
        "usage slots rebuilt from the messages in {:.1} s: {slots} (conversation, quarter-hour) rows",
        rebuilding.elapsed().as_secs_f64()
    );
    println!(
        "loaded {MESSAGES} messages in {CONVERSATIONS} conversations over {DAYS} days in {:.1} s (one transaction: {:.0} rows/s)",
        loaded.as_secs_f64(),
        MESSAGES as f64 / loaded.as_secs_f64()
    );

    let zone = TimeZone::get("Europe/Bratislava").unwrap();
    let half = start
        .checked_add(jiff::SignedDuration::from_hours(DAYS * 12))
        .unwrap();
    let baseline = rusqlite::Connection::open(&path).unwrap();
    for (window, since) in [("all 1,000,000", start), ("newer half", half)] {
        let since_text = iso(since);
        let (mut rollups, mut aggregates) = (Vec::new(), Vec::new());
        let mut days = 0;
        for _ in 0..RUNS {
            let began = Instant::now();
            let report = atelier_chatd::audit::report(&store, since, zone.clone()).unwrap();
            rollups.push(began.elapsed());
            days = report.by_day.len();
            assert!(report.totals.prompt_tokens > 0);
            let began = Instant::now();
            let (count, prompt): (i64, i64) = baseline
                .query_row(
                    "SELECT count(*), sum(prompt_tokens) FROM ai_messages INDEXED BY ai_messages_usage
                     WHERE created_at >= ?1",
                    [&since_text],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .unwrap();
            aggregates.push(began.elapsed());
            assert_eq!(prompt, report.totals.prompt_tokens);
            assert!(count > 0);
        }
        let (rmin, rp50, rp99) = stats(rollups);
        let (bmin, bp50, bp99) = stats(aggregates);
        println!(
            "audit rollup, {window} messages ({days} days in Europe/Bratislava): min {rmin:.1} ms  p50 {rp50:.1} ms  p99 {rp99:.1} ms | baseline SQL aggregate p50 {bp50:.1} ms (min {bmin:.1}, p99 {bp99:.1}) | ratio p50 {:.2}x  (goal: under 200 ms)",
            rp50 / bp50
        );
    }

    // Durable inserts, one at a time: each its own commit, fsynced before it returns.
    let conversation = "c00000";
    let message = NewMessage {
        role: Role::Assistant,
        content: vec![ContentBlock::Text {
            text: "Done: the hero is blue now.".into(),
        }],
        tool_call: None,
    };
    let began = Instant::now();
    for _ in 0..DURABLE_INSERTS {
        store.append_message(conversation, &message).unwrap();
    }
    let appended = began.elapsed();
    let bare_dir = tempfile::tempdir().unwrap();
    let bare = rusqlite::Connection::open(bare_dir.path().join("bare.sqlite3")).unwrap();
    bare.pragma_update(None, "journal_mode", "WAL").unwrap();
    bare.pragma_update(None, "synchronous", "FULL").unwrap();
    bare.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        .unwrap();
    let began = Instant::now();
    for _ in 0..DURABLE_INSERTS {
        bare.execute(
            "INSERT INTO t (body) VALUES (?1)",
            [r#"[{"kind":"text","text":"Done: the hero is blue now."}]"#],
        )
        .unwrap();
    }
    let bare_time = began.elapsed();
    let rate = |d: Duration| DURABLE_INSERTS as f64 / d.as_secs_f64();
    println!(
        "durable message inserts into the 1,000,000-row table: {:.0} messages/s ({:.3} ms each) | baseline bare autocommit INSERT {:.0} rows/s ({:.3} ms each) | ratio {:.2}x the baseline's time",
        rate(appended),
        appended.as_secs_f64() * 1e3 / DURABLE_INSERTS as f64,
        rate(bare_time),
        bare_time.as_secs_f64() * 1e3 / DURABLE_INSERTS as f64,
        appended.as_secs_f64() / bare_time.as_secs_f64()
    );

    // Concurrent inserts: group commit against one commit per message, rounds alternating.
    let alone = Store::open_with(&path, NonZeroUsize::MIN).unwrap();
    let (mut grouped, mut single) = (Vec::new(), Vec::new());
    for round in 0..INSERT_ROUNDS {
        let first = 1 + round * INSERTERS;
        single.push(concurrent_inserts(&alone, &message, first));
        grouped.push(concurrent_inserts(&store, &message, first));
    }
    let (grate, gp50, gp99, per_commit) = median_round(grouped);
    let (srate, sp50, sp99, _) = median_round(single);
    println!(
        "durable message inserts, {INSERTERS} concurrent inserters x {PER_INSERTER} into the 1,000,000-row table: group commit {grate:.0} messages/s (each acknowledged after its commit: p50 {gp50:.2} ms, p99 {gp99:.2} ms; {per_commit:.1} messages per commit) | baseline one transaction per message {srate:.0} messages/s (p50 {sp50:.2} ms, p99 {sp99:.2} ms) | ratio {:.1}x the baseline's rate  (goal: at least 3,000 messages/s)",
        grate / srate
    );
}
