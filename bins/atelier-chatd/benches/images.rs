//! Two reads and a write of a conversation full of images, each against the shape it replaced,
//! in the same process.
//!
//! Image: `GET …/images/:i` reads one message (`Store::message`), against reading the whole
//! conversation and picking the message out (`Store::messages`, what the route did before),
//! over a conversation of 120 messages each holding a 1 MiB image (base64), the size a user
//! reaches with a few dozen turns of screenshots. Median of 15 reads of random messages.
//!
//! Purge: the longest a durable write of another conversation waits while a purge deletes two
//! such conversations, the purge in batches (`Store::purge_deleted` on a store of its own, as
//! the purge timer's process has) against the one transaction it used to be (the same deletes,
//! with `secure_delete`, through a connection of the bench's own). A writer appends a message every 5 ms throughout; its longest wait is
//! what a group commit of turns' writes waits, and past chatd's 5 s busy timeout it fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use atelier_chatd::store::{ContentBlock, NewConversation, NewMessage, Role, Scope, Store};
use jiff::{SignedDuration, Timestamp};

const MESSAGES: usize = 120;
const IMAGE_BYTES: usize = 1024 * 1024;
const READS: usize = 15;

fn conversation(store: &Store, user: &str) -> String {
    store
        .create_conversation(
            user,
            &NewConversation {
                scope: Scope::Site,
                title: None,
                credential_id: "cred".into(),
                model_id: "model".into(),
            },
        )
        .unwrap()
        .id
}

/// A conversation of [`MESSAGES`] messages of one image each; their ids.
fn with_images(store: &Store, user: &str) -> (String, Vec<String>) {
    let id = conversation(store, user);
    let image = NewMessage {
        role: Role::User,
        content: vec![ContentBlock::Image {
            mime_type: "image/jpeg".into(),
            data: "A".repeat(IMAGE_BYTES),
        }],
        tool_call: None,
    };
    let ids = (0..MESSAGES)
        .map(|_| store.append_message(&id, &image).unwrap().id)
        .collect();
    (id, ids)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn images(store: &Store) {
    let (conversation, ids) = with_images(store, "alice");
    let picks: Vec<&String> = (0..READS).map(|i| &ids[(i * 37) % ids.len()]).collect();
    let time = |read: &dyn Fn(&str) -> usize| {
        median(
            picks
                .iter()
                .map(|id| {
                    let began = Instant::now();
                    assert!(read(id) > 0);
                    began.elapsed()
                })
                .collect(),
        )
    };
    let one = time(&|id| {
        let message = store.message(&conversation, id).unwrap().unwrap();
        message.content.len()
    });
    let whole = time(&|id| {
        let messages = store.messages(&conversation).unwrap();
        let message = messages.into_iter().find(|m| m.id == id).unwrap();
        message.content.len()
    });
    println!(
        "image of one message, {MESSAGES} messages of {} KiB: {:.2} ms (one row) against \
         {:.2} ms (the whole conversation, as before): {:.3}x; bytes read {} KiB against {} KiB",
        IMAGE_BYTES / 1024,
        ms(one),
        ms(whole),
        ms(one) / ms(whole),
        IMAGE_BYTES / 1024,
        MESSAGES * IMAGE_BYTES / 1024,
    );
}

/// Appends a message to a live conversation every 5 ms while `work` runs; the longest append
/// and how many failed (a write that waited past the busy timeout).
fn longest_wait_during(store: &Store, live: &str, work: impl FnOnce()) -> (Duration, usize) {
    let done = AtomicBool::new(false);
    let message = NewMessage {
        role: Role::User,
        content: vec![ContentBlock::Text { text: "hi".into() }],
        tool_call: None,
    };
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let (mut longest, mut failed) = (Duration::ZERO, 0);
            while !done.load(Ordering::Relaxed) {
                let began = Instant::now();
                failed += usize::from(store.append_message(live, &message).is_err());
                longest = longest.max(began.elapsed());
                std::thread::sleep(Duration::from_millis(5));
            }
            (longest, failed)
        });
        work();
        done.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    })
}

fn deleted_long_ago(database: &Path, ids: &[&str]) {
    let connection = rusqlite::Connection::open(database).unwrap();
    for id in ids {
        connection
            .execute(
                "UPDATE ai_conversations SET deleted_at = '2026-01-01T00:00:00Z' WHERE id = ?1",
                [id],
            )
            .unwrap();
    }
}

fn purge(dir: &Path) {
    let now: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
    let retention = SignedDuration::from_hours(24);
    let run = |name: &str, batched: bool| {
        let database = dir.join(format!("{name}.sqlite3"));
        let store = Store::open(&database).unwrap();
        let (a, _) = with_images(&store, "alice");
        let (b, _) = with_images(&store, "bob");
        let live = conversation(&store, "carol");
        deleted_long_ago(&database, &[&a, &b]);
        let began = Instant::now();
        let longest = longest_wait_during(&store, &live, || {
            if batched {
                // As the purge timer runs it: a process of its own, a store of its own.
                let purging = Store::open(&database).unwrap();
                let purged = purging.purge_deleted(now, retention).unwrap();
                assert_eq!(purged.conversations, 2);
            } else {
                // What the purge was: every expired message and conversation in one
                // transaction, their pages zeroed.
                let mut connection = rusqlite::Connection::open(&database).unwrap();
                connection.busy_timeout(Duration::from_secs(60)).unwrap();
                connection
                    .pragma_update(None, "secure_delete", true)
                    .unwrap();
                let transaction = connection
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .unwrap();
                let expired = "SELECT id FROM ai_conversations WHERE deleted_at IS NOT NULL";
                transaction
                    .execute(
                        &format!("DELETE FROM ai_messages WHERE conversation_id IN ({expired})"),
                        [],
                    )
                    .unwrap();
                transaction
                    .execute(
                        &format!("DELETE FROM ai_conversations WHERE id IN ({expired})"),
                        [],
                    )
                    .unwrap();
                transaction.commit().unwrap();
            }
        });
        (began.elapsed(), longest)
    };
    let (one_took, (one_wait, one_failed)) = run("one", false);
    let (batched_took, (batched_wait, batched_failed)) = run("batched", true);
    println!(
        "purge of {} MiB of images: a concurrent write waited at most {:.1} ms (batched) \
         against {:.1} ms (one transaction, as before): {:.3}x; writes failed {batched_failed} \
         against {one_failed}; the purge took {:.0} ms against {:.0} ms: {:.2}x",
        2 * MESSAGES * IMAGE_BYTES / (1024 * 1024),
        ms(batched_wait),
        ms(one_wait),
        ms(batched_wait) / ms(one_wait),
        ms(batched_took),
        ms(one_took),
        ms(batched_took) / ms(one_took),
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("images.sqlite3")).unwrap();
    images(&store);
    purge(dir.path());
}
