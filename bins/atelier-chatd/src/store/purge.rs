//! Hard deletion of conversations deleted long enough ago. A deleted conversation stays
//! (hidden) for a grace period; then it goes with its messages, its usage slots and the images
//! its users attached (which live inside the messages' content, not in files).
//!
//! Times are compared as instants: `deleted_at` is read into Unix milliseconds by SQLite's own
//! date parser, so the cutoff is exact to the millisecond whatever the column's spelling.
//!
//! Parts: [`Store::purge_deleted`] (the clock is the caller's), [`purge_database`] (what the
//! `purge` subcommand runs), [`Purged`].

use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp};
use rusqlite::TransactionBehavior::Immediate;
use rusqlite::{params, Transaction};
use serde::Serialize;

use super::{Store, StoreError};

/// How long a deleted conversation is kept before it is purged, in days: the CMS's own grace
/// period, which its users already expect.
pub const DEFAULT_RETENTION_DAYS: u32 = 30;

/// `deleted_at` as Unix milliseconds (NULL when it is not a time). SQLite keeps a parsed time
/// as whole milliseconds, so rounding the Julian day back recovers them exactly.
const DELETED_AT_MS: &str =
    "CAST(round((julianday(deleted_at) - 2440587.5) * 86400000.0) AS INTEGER)";

/// What a purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Purged {
    /// Conversations.
    pub conversations: usize,
    /// Their messages (images included).
    pub messages: usize,
}

/// Why the `purge` subcommand removed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    /// There is no database at the path: purging one would only create it.
    #[error("no database at {0}")]
    NoDatabase(PathBuf),
    /// The database refused.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The most messages one purge transaction deletes.
const BATCH_ROWS: usize = 256;

/// The most message content one purge transaction deletes, in bytes (a batch stops after the
/// message that reaches it). Each transaction holds the database's write lock while it zeroes
/// what it deletes; chatd's writer waits for that lock at most its busy timeout (5 s) before a
/// whole group of turns' writes fails, and zeroing this much takes a small part of that on any
/// disk. One transaction for everything held the lock for as long as gigabytes of images took.
const BATCH_BYTES: i64 = 8 * 1024 * 1024;

impl Store {
    /// Hard-deletes every conversation deleted more than `retention` before `now`, with its
    /// messages and usage slots. One deleted exactly `retention` ago is kept. The purged rows'
    /// pages are overwritten with zeros, so the images do not linger in the file's free space.
    ///
    /// The messages go in transactions of at most [`BATCH_ROWS`] rows and about
    /// [`BATCH_BYTES`] of content, then the conversations in one more. A purge cut short
    /// leaves deleted conversations with some of their messages, which no one reads and the
    /// next purge finishes.
    pub fn purge_deleted(
        &self,
        now: Timestamp,
        retention: SignedDuration,
    ) -> Result<Purged, StoreError> {
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff_ms = now.as_millisecond().saturating_sub(retention_ms);
        let expired = expired_conversations();
        let mut connection = self.connection()?;
        let secure: bool = connection.pragma_query_value(None, "secure_delete", |r| r.get(0))?;
        connection.pragma_update(None, "secure_delete", true)?;
        let purged = (|| {
            let mut messages = 0;
            loop {
                // Immediate: the write lock is taken before the batch is read, so no other
                // writer can come between the read and the deletes.
                let transaction = connection.transaction_with_behavior(Immediate)?;
                let batch = expired_messages(&transaction, &expired, cutoff_ms)?;
                for rowid in &batch {
                    messages +=
                        transaction.execute("DELETE FROM ai_messages WHERE rowid = ?1", [rowid])?;
                }
                transaction.commit()?;
                if batch.is_empty() {
                    break;
                }
            }
            // The usage slots go by their foreign key's cascade.
            let transaction = connection.transaction_with_behavior(Immediate)?;
            let conversations = transaction.execute(
                &format!("DELETE FROM ai_conversations WHERE id IN ({expired})"),
                params![cutoff_ms],
            )?;
            transaction.commit()?;
            Ok::<_, StoreError>(Purged {
                conversations,
                messages,
            })
        })();
        connection.pragma_update(None, "secure_delete", secure)?;
        purged
    }
}

/// The ids of the conversations deleted before the cutoff `?1`, in Unix milliseconds.
fn expired_conversations() -> String {
    format!("SELECT id FROM ai_conversations WHERE deleted_at IS NOT NULL AND {DELETED_AT_MS} < ?1")
}

/// The next batch of messages of expired conversations to delete, by rowid: at most
/// [`BATCH_ROWS`], stopping after the one that brings their content to [`BATCH_BYTES`].
fn expired_messages(
    transaction: &Transaction<'_>,
    expired: &str,
    cutoff_ms: i64,
) -> Result<Vec<i64>, StoreError> {
    let mut statement = transaction.prepare(&format!(
        "SELECT rowid, length(content_json) FROM ai_messages WHERE conversation_id IN \
         ({expired}) LIMIT {BATCH_ROWS}"
    ))?;
    let mut rows = statement.query(params![cutoff_ms])?;
    let mut batch = Vec::new();
    let mut bytes = 0_i64;
    while let Some(row) = rows.next()? {
        batch.push(row.get(0)?);
        bytes = bytes.saturating_add(row.get(1)?);
        if bytes >= BATCH_BYTES {
            break;
        }
    }
    Ok(batch)
}

/// Purges the database at `database` of conversations deleted more than `retention_days`
/// days ago, by the system clock. Safe while chatd serves the same database: each waits for
/// the other's write lock.
pub fn purge_database(database: &Path, retention_days: u32) -> Result<Purged, PurgeError> {
    if !database.exists() {
        return Err(PurgeError::NoDatabase(database.to_path_buf()));
    }
    let store = Store::open(database)?;
    let retention = SignedDuration::from_hours(i64::from(retention_days) * 24);
    Ok(store.purge_deleted(Timestamp::now(), retention)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ContentBlock, NewConversation, NewMessage, Role, Scope};

    const NOW: &str = "2026-07-13T12:00:00.250Z";

    /// A live conversation with one message; its id.
    fn conversation(store: &Store) -> String {
        let conversation = store
            .create_conversation(
                "alice",
                &NewConversation {
                    scope: Scope::Site,
                    title: None,
                    credential_id: "cred-1".into(),
                    model_id: "model-1".into(),
                },
            )
            .unwrap();
        store
            .append_message(
                &conversation.id,
                &NewMessage {
                    role: Role::User,
                    content: vec![ContentBlock::Text { text: "hi".into() }],
                    tool_call: None,
                },
            )
            .unwrap();
        conversation.id
    }

    /// A conversation with one message, deleted at `deleted_at` (as written, any spelling).
    fn deleted_at(store: &Store, deleted_at: &str) -> String {
        let id = conversation(store);
        store
            .connection()
            .unwrap()
            .execute(
                "UPDATE ai_conversations SET deleted_at = ?2 WHERE id = ?1",
                params![id, deleted_at],
            )
            .unwrap();
        id
    }

    fn count(store: &Store, sql: &str, id: &str) -> i64 {
        store
            .connection()
            .unwrap()
            .query_row(sql, [id], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn conversations_deleted_before_the_cutoff_go_and_later_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("chat.sqlite3")).unwrap();
        let now: Timestamp = NOW.parse().unwrap();
        // The cutoff is 2026-06-13T12:00:00.250Z.
        let cases = [
            ("31 days ago", "2026-06-12T12:00:00.250Z", true),
            ("29 days ago", "2026-06-14T12:00:00.250Z", false),
            (
                "one second before the cutoff",
                "2026-06-13T11:59:59.250Z",
                true,
            ),
            (
                "one millisecond before the cutoff",
                "2026-06-13T12:00:00.249Z",
                true,
            ),
            ("exactly at the cutoff", "2026-06-13T12:00:00.250Z", false),
            (
                "one second after the cutoff",
                "2026-06-13T12:00:01.250Z",
                false,
            ),
            // Text order would call this older (a space sorts before `T`); as an instant it
            // is 8 hours after the cutoff.
            (
                "same day, SQL spelling, after",
                "2026-06-13 20:00:00",
                false,
            ),
            ("a day before, SQL spelling", "2026-06-12 20:00:00", true),
            (
                "an offset spelling, before",
                "2026-06-13T13:59:59+02:00",
                true,
            ),
            ("not a time", "yesterday", false),
        ];
        let ids: Vec<(&str, String, bool)> = cases
            .iter()
            .map(|(name, at, gone)| (*name, deleted_at(&store, at), *gone))
            .collect();
        let live = conversation(&store);

        let purged = store
            .purge_deleted(now, SignedDuration::from_hours(30 * 24))
            .unwrap();

        let expected = cases.iter().filter(|(_, _, gone)| *gone).count();
        assert_eq!(
            purged,
            Purged {
                conversations: expected,
                messages: expected
            }
        );
        for (name, id, gone) in &ids {
            let rows = count(
                &store,
                "SELECT count(*) FROM ai_conversations WHERE id = ?1",
                id,
            );
            let messages = count(
                &store,
                "SELECT count(*) FROM ai_messages WHERE conversation_id = ?1",
                id,
            );
            let slots = count(
                &store,
                "SELECT count(*) FROM ai_usage_slots WHERE conversation_id = ?1",
                id,
            );
            let kept = i64::from(!gone);
            assert_eq!((rows, messages, slots), (kept, kept, kept), "{name}");
        }
        assert!(store.conversation("alice", &live).unwrap().is_some());
        // Purging again finds nothing more.
        assert_eq!(
            store
                .purge_deleted(now, SignedDuration::from_hours(30 * 24))
                .unwrap(),
            Purged::default()
        );
    }

    /// A conversation with one short message then `count` of `text`, deleted long ago.
    fn deleted_with(store: &Store, count: usize, text: &str) -> String {
        let id = conversation(store);
        for _ in 0..count {
            store
                .append_message(
                    &id,
                    &NewMessage {
                        role: Role::User,
                        content: vec![ContentBlock::Text { text: text.into() }],
                        tool_call: None,
                    },
                )
                .unwrap();
        }
        store
            .connection()
            .unwrap()
            .execute(
                "UPDATE ai_conversations SET deleted_at = '2026-01-01T00:00:00Z' WHERE id = ?1",
                [&id],
            )
            .unwrap();
        id
    }

    /// The size of the next batch a purge would delete.
    fn next_batch(store: &Store) -> usize {
        let mut connection = store.connection().unwrap();
        let transaction = connection.transaction().unwrap();
        expired_messages(&transaction, &expired_conversations(), i64::MAX)
            .unwrap()
            .len()
    }

    #[test]
    fn a_batch_stops_at_its_rows_or_after_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("chat.sqlite3")).unwrap();
        let many = deleted_with(&store, BATCH_ROWS, "a");
        assert_eq!(next_batch(&store), BATCH_ROWS);
        store
            .connection()
            .unwrap()
            .execute("DELETE FROM ai_conversations WHERE id = ?1", [&many])
            .unwrap();
        // The first message is short; the next two, of half a batch's bytes each, bring the
        // batch to its bytes.
        let half = "x".repeat(usize::try_from(BATCH_BYTES).unwrap() / 2);
        deleted_with(&store, 5, &half);
        assert_eq!(next_batch(&store), 3);
    }

    #[test]
    fn a_purge_goes_batch_after_batch_to_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("chat.sqlite3")).unwrap();
        let now: Timestamp = NOW.parse().unwrap();
        let half = "x".repeat(usize::try_from(BATCH_BYTES).unwrap() / 2);
        let many = deleted_with(&store, BATCH_ROWS + 10, "a");
        let big = deleted_with(&store, 5, &half);
        let live = conversation(&store);
        let purged = store
            .purge_deleted(now, SignedDuration::from_hours(30 * 24))
            .unwrap();
        assert_eq!(
            purged,
            Purged {
                conversations: 2,
                messages: (1 + BATCH_ROWS + 10) + (1 + 5),
            }
        );
        for id in [&many, &big] {
            let sql = "SELECT count(*) FROM ai_messages WHERE conversation_id = ?1";
            assert_eq!(count(&store, sql, id), 0);
        }
        assert!(store.conversation("alice", &live).unwrap().is_some());
    }

    #[test]
    fn a_missing_database_is_refused_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.sqlite3");
        assert!(matches!(
            purge_database(&path, DEFAULT_RETENTION_DAYS),
            Err(PurgeError::NoDatabase(_))
        ));
        assert!(!path.exists());
    }
}
