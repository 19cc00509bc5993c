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
use rusqlite::params;
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

impl Store {
    /// Hard-deletes, in one transaction, every conversation deleted more than `retention`
    /// before `now`, with its messages and usage slots. One deleted exactly `retention` ago
    /// is kept. The purged rows' pages are overwritten with zeros, so the images do not
    /// linger in the file's free space.
    pub fn purge_deleted(
        &self,
        now: Timestamp,
        retention: SignedDuration,
    ) -> Result<Purged, StoreError> {
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff_ms = now.as_millisecond().saturating_sub(retention_ms);
        let expired = format!(
            "SELECT id FROM ai_conversations WHERE deleted_at IS NOT NULL AND {DELETED_AT_MS} < ?1"
        );
        let mut connection = self.connection()?;
        let secure: bool = connection.pragma_query_value(None, "secure_delete", |r| r.get(0))?;
        connection.pragma_update(None, "secure_delete", true)?;
        let purged = (|| {
            let transaction = connection.transaction()?;
            let messages = transaction.execute(
                &format!("DELETE FROM ai_messages WHERE conversation_id IN ({expired})"),
                params![cutoff_ms],
            )?;
            // The usage slots go by their foreign key's cascade.
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
