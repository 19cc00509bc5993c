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
//! Inserts: `Store::append_message` (one durable transaction per message: position, row,
//! conversation bump) against a bare autocommit `INSERT` with the same durability settings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

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

fn iso(ts: Timestamp) -> String {
    atelier_chatd::audit::iso_millis(ts)
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    (ms(samples[0]), p(0.5), p(0.99))
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

    // Durable inserts: each its own transaction, fsynced before it returns.
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
}
