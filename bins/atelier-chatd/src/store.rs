//! Conversations and their messages in SQLite: the schema, appends that keep positions and
//! totals consistent in one transaction, and the single-writer lease per conversation.
//!
//! Every write commits on a WAL database with `synchronous=FULL`, so a message is acknowledged
//! only once it is durable: a `kill -9` right after an append loses nothing. The writes a turn
//! makes as it runs (its messages, its usage, its audit records) go through one writer thread
//! that commits every write waiting at once with a single fsync (group commit), so concurrent
//! turns share their syncs instead of queueing for one each. The reads a turn starts with
//! come from a second connection, so they never wait for a commit's fsync, and a count of the
//! writes tells a turn whether its first read is still current once it holds the lease.
//!
//! Parts:
//! - [`Store`]: open (and migrate) a database; conversations CRUD; [`Store::append_message`].
//! - `writer`: the group commit behind the appends, bookings and audit records.
//! - [`TurnRead`], [`ChangeMark`]: a conversation and its history read at one moment, and
//!   whether anything was written since.
//! - [`ContentBlock`]: the persisted `content_json` union, validated when read.
//! - [`history`]: the replay history rebuilt from rows, with interrupted tool calls healed.
//! - [`events`]: the audit log, in the CMS's `audit_events` shape.
//! - [`purge`]: hard deletion of conversations deleted over a grace period ago.
//! - [`Leases`]: at most one writer per conversation in this process.

pub mod audit;
pub mod events;
pub mod history;
mod lease;
pub mod purge;
pub mod settings;
mod writer;

pub use lease::{Lease, Leases};
pub use settings::{
    AuthMode, CredentialChange, CredentialRow, DefaultRow, NewCredential, PricingRow,
};
pub use writer::{Committed, DEFAULT_MAX_BATCH};

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

/// The columns [`message_from_row`] reads, in its order.
macro_rules! message_columns {
    () => {
        "id, position, role, content_json, tool_call_id, tool_name, created_at"
    };
}

/// The schema, applied in order; `PRAGMA user_version` records how many have run.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE ai_conversations (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    scope TEXT NOT NULL CHECK (scope IN ('site', 'content', 'data', 'plugin')),
    title TEXT NOT NULL,
    credential_id TEXT,
    model_id TEXT NOT NULL,
    prompt_tokens_total INTEGER NOT NULL DEFAULT 0,
    completion_tokens_total INTEGER NOT NULL DEFAULT 0,
    cost_usd_total REAL NOT NULL DEFAULT 0,
    cache_read_tokens_total INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens_total INTEGER NOT NULL DEFAULT 0,
    context_tokens INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    deleted_at TEXT
);
CREATE INDEX ai_conversations_live
    ON ai_conversations (user_id, scope, updated_at DESC) WHERE deleted_at IS NULL;
CREATE INDEX ai_conversations_deleted
    ON ai_conversations (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE TABLE ai_messages (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES ai_conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content_json TEXT NOT NULL,
    tool_call_id TEXT,
    tool_name TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (conversation_id, position)
);
"#,
    r#"
CREATE TABLE ai_provider_credentials (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    provider_id TEXT NOT NULL,
    auth_mode TEXT NOT NULL CHECK (auth_mode IN ('apiKey', 'baseUrl')),
    display_label TEXT NOT NULL,
    ciphertext BLOB,
    iv BLOB,
    base_url TEXT,
    key_fingerprint TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    last_used_at TEXT,
    CONSTRAINT ai_creds_apikey_shape_check CHECK (
        (auth_mode = 'apiKey' AND ciphertext IS NOT NULL AND iv IS NOT NULL AND base_url IS NULL)
        OR (auth_mode = 'baseUrl' AND base_url IS NOT NULL))
);
CREATE UNIQUE INDEX ai_provider_credentials_label
    ON ai_provider_credentials (user_id, provider_id, display_label);
CREATE TABLE ai_defaults (
    scope TEXT PRIMARY KEY CHECK (scope IN ('site', 'content', 'data', 'plugin')),
    credential_id TEXT NOT NULL REFERENCES ai_provider_credentials (id) ON DELETE RESTRICT,
    model_id TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_by TEXT
);
CREATE TABLE ai_model_pricing (
    pricing_key TEXT PRIMARY KEY,
    input_per_mtok REAL NOT NULL,
    output_per_mtok REAL NOT NULL,
    cache_read_per_mtok REAL,
    cache_write_per_mtok REAL,
    context_window INTEGER,
    refreshed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
-- The audit rollups read only these columns, in time order: a covering index keeps them off
-- the rows' content (which holds the images).
CREATE INDEX ai_messages_usage ON ai_messages (created_at, conversation_id, prompt_tokens,
    completion_tokens, cost_usd, cache_read_tokens, cache_creation_tokens);
"#,
    // Once a local copy of the CMS's content; the content tools now ask the CMS itself, so a
    // new database gets none of it. A database that already ran this step keeps its four
    // `content_*` tables, which nothing reads.
    r#"
DROP TABLE IF EXISTS content_documents;
DROP TABLE IF EXISTS content_collections;
DROP TABLE IF EXISTS content_users;
DROP TABLE IF EXISTS content_media;
"#,
    r#"
-- Usage per conversation per UTC quarter-hour, kept in the same transactions as the
-- messages: every time zone's midnight falls on a quarter-hour, so the audit bins these
-- instead of every message.
CREATE TABLE ai_usage_slots (
    slot INTEGER NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES ai_conversations (id) ON DELETE CASCADE,
    messages INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, conversation_id)
) WITHOUT ROWID;
CREATE INDEX ai_usage_slots_conversation ON ai_usage_slots (conversation_id);
"#,
    r#"
-- The audit log, in the CMS's own shape so its records read alike; chatd has no users
-- table, so the actor is a plain id.
CREATE TABLE audit_events (
    id TEXT PRIMARY KEY,
    actor_user_id TEXT,
    action TEXT NOT NULL,
    target_type TEXT,
    target_id TEXT,
    metadata_json TEXT NOT NULL DEFAULT '{}',
    ip_address TEXT,
    user_agent TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX audit_events_created ON audit_events (created_at DESC);
-- Pairs each chat turn's start with its end, per conversation.
CREATE INDEX audit_events_target ON audit_events (target_type, target_id);
"#,
    r#"
-- What the CMS last called each user (its display name, else its email), so the audit can
-- name them: chatd sees the CMS's users only as they sign in.
CREATE TABLE ai_user_labels (
    user_id TEXT PRIMARY KEY,
    label TEXT NOT NULL
) WITHOUT ROWID;
"#,
];

/// The seconds of one usage slot: a quarter of an hour, the granularity of every UTC offset.
pub const USAGE_SLOT_SECS: i64 = 15 * 60; // 15 minutes

/// The slot of a stored timestamp, in SQL.
const SLOT_OF: &str = "CAST(strftime('%s', ?) AS INTEGER) / 900";

/// Rebuilds every usage slot from the messages (after a migration or a bulk load).
const REBUILD_SLOTS: &str = "DELETE FROM ai_usage_slots;
INSERT INTO ai_usage_slots (slot, conversation_id, messages, prompt_tokens, completion_tokens,
    cost_usd, cache_read_tokens, cache_creation_tokens)
  SELECT CAST(strftime('%s', created_at) AS INTEGER) / 900, conversation_id, count(*),
    sum(prompt_tokens), sum(completion_tokens), sum(cost_usd), sum(cache_read_tokens),
    sum(cache_creation_tokens)
  FROM ai_messages GROUP BY 1, 2;";

/// The timestamp format of every row: ISO 8601 UTC with milliseconds.
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// Statements kept prepared on the connection: every hot statement (the turn's reads, the
/// writer's appends, bookings and audit records) stays compiled, with room to spare.
const STATEMENT_CACHE: usize = 64;

/// How long a writer waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The title a conversation gets when none (or a blank one) is given.
pub const DEFAULT_TITLE: &str = "New conversation";

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused or failed.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A value could not be encoded as JSON.
    #[error("encoding content: {0}")]
    Encode(#[from] serde_json::Error),
    /// The database was written by a newer chatd.
    #[error("database schema version {found} is newer than this chatd knows ({known})")]
    NewerSchema {
        /// The version on disk.
        found: i64,
        /// The newest this build knows.
        known: i64,
    },
    /// The conversation does not exist, is deleted, or belongs to someone else.
    #[error("conversation not found")]
    ConversationNotFound,
    /// A message breaks the shape its role requires.
    #[error("invalid message: {0}")]
    InvalidMessage(&'static str),
    /// The user has no such credential.
    #[error("credential not found")]
    CredentialNotFound,
    /// The user already has a credential with this label for the provider.
    #[error("a credential with this label already exists for the provider")]
    DuplicateLabel,
    /// A scope's default still points at the credential.
    #[error("the credential is a default")]
    CredentialIsDefault,
    /// Another thread panicked while holding the connection.
    #[error("the database connection was poisoned by a panic")]
    Poisoned,
    /// The write ran, but the group commit that held it failed: nothing of it is stored.
    #[error("the commit of this write failed: {0}")]
    Uncommitted(#[source] Arc<rusqlite::Error>),
    /// The writer thread is gone (it panicked), so nothing more can be written.
    #[error("the store's writer thread is gone")]
    WriterGone,
    /// The writer thread could not be started.
    #[error("starting the store's writer thread: {0}")]
    WriterThread(#[source] std::io::Error),
}

/// The four places in the CMS that hold conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The site builder.
    Site,
    /// The content editor.
    Content,
    /// The data editor.
    Data,
    /// Plugins.
    Plugin,
}

impl Scope {
    /// Every scope, in the reference's order.
    pub const ALL: [Scope; 4] = [Scope::Site, Scope::Content, Scope::Data, Scope::Plugin];

    /// The scope as stored and as it appears in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Site => "site",
            Scope::Content => "content",
            Scope::Data => "data",
            Scope::Plugin => "plugin",
        }
    }

    /// Parses a scope; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        Scope::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The editor.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// One block of a message's `content_json`, exactly as the original runtime stored it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image the user attached, base64-encoded.
    #[serde(rename_all = "camelCase")]
    Image {
        /// Its media type.
        mime_type: String,
        /// Base64 bytes.
        data: String,
    },
    /// A tool call the model made.
    #[serde(rename_all = "camelCase")]
    ToolCall {
        /// The provider's call id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The arguments.
        input: serde_json::Value,
    },
    /// A tool's outcome; its data is never persisted.
    ToolResult {
        /// Whether the tool succeeded.
        ok: bool,
        /// Why it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// A conversation row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    /// Its id.
    pub id: String,
    /// Where in the CMS it lives.
    pub scope: Scope,
    /// Its title.
    pub title: String,
    /// The credential it uses, if any is still set.
    pub credential_id: Option<String>,
    /// The model it uses.
    pub model_id: String,
    /// Total prompt tokens.
    pub prompt_tokens_total: i64,
    /// Total completion tokens.
    pub completion_tokens_total: i64,
    /// Total cost.
    pub cost_usd_total: f64,
    /// Total cache-read tokens.
    pub cache_read_tokens_total: i64,
    /// Total cache-creation tokens.
    pub cache_creation_tokens_total: i64,
    /// The latest context size.
    pub context_tokens: i64,
    /// When it was created (ISO 8601).
    pub created_at: String,
    /// When it last changed (ISO 8601).
    pub updated_at: String,
}

/// What a new conversation starts with.
#[derive(Debug, Clone)]
pub struct NewConversation {
    /// Where in the CMS it lives.
    pub scope: Scope,
    /// Its title; trimmed, and [`DEFAULT_TITLE`] when blank.
    pub title: Option<String>,
    /// The credential it uses.
    pub credential_id: String,
    /// The model it uses.
    pub model_id: String,
}

/// Changes to a conversation; `None` keeps the current value, and so does a blank title.
#[derive(Debug, Clone, Default)]
pub struct ConversationUpdate {
    /// A new title.
    pub title: Option<String>,
    /// A new credential.
    pub credential_id: Option<String>,
    /// A new model.
    pub model_id: Option<String>,
}

/// A message to append.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its blocks.
    pub content: Vec<ContentBlock>,
    /// The tool call it belongs to (tool-call and tool rows).
    pub tool_call: Option<ToolCallRef>,
}

/// The tool call a row belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRef {
    /// The provider's call id.
    pub id: String,
    /// The tool's name.
    pub name: String,
}

/// What one turn used, booked by [`Store::record_usage`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnUsage {
    /// Prompt tokens, summed over the turn's rounds.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Cache-read tokens.
    pub cache_read_tokens: i64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: i64,
    /// The context size of the turn's last round; replaces the conversation's.
    pub context_tokens: i64,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its id.
    pub id: String,
    /// Its place in the conversation, from 0 without gaps.
    pub position: i64,
    /// Who wrote it.
    pub role: Role,
    /// Its blocks; empty when the stored JSON no longer validates.
    pub content: Vec<ContentBlock>,
    /// The tool call it belongs to.
    pub tool_call: Option<ToolCallRef>,
    /// When it was written (ISO 8601).
    pub created_at: String,
}

/// A stored user message that starts a turn, with what the turn's audit records say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct UserTurn {
    /// The stored message.
    pub message: Message,
    /// The turn as its start was recorded; its end is recorded with the same facts.
    pub turn: events::ChatTurn,
}

/// A conversation read for a turn: its row and messages, and when (in the store's count of
/// writes) they were read, so the turn can tell whether a later read could differ.
#[derive(Debug, Clone)]
pub struct TurnRead {
    /// The conversation.
    pub conversation: Conversation,
    /// Its messages in position order.
    pub messages: Vec<Message>,
    /// The store's count of writes at the read.
    pub mark: ChangeMark,
}

/// How many times the database may have been written through this store at some moment; see
/// [`Store::unchanged_since`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMark(u64);

/// The database of one chatd.
pub struct Store {
    /// Every write goes through this connection: the writer thread's group commits and the
    /// settings and conversation routes' own statements.
    connection: Arc<Mutex<Connection>>,
    /// A second connection for the reads a turn starts with, so they never queue behind a
    /// commit's fsync on the writing one (WAL lets a reader see every commit without waiting).
    reader: Mutex<Connection>,
    writer: writer::Writer,
    /// Counts every use of the writing connection that may have changed a conversation or
    /// its messages, each counted once it ended (its commit returned), so a read that starts
    /// after taking the count sees every write counted in it.
    changes: Arc<AtomicU64>,
    /// The user labels this process has written, so a request writes one only when it changed.
    labels: Mutex<HashMap<String, String>>,
}

/// The writing connection, held for a use that may change a conversation: the use is
/// counted when the guard is dropped, after it ended.
struct Counted<'a> {
    connection: MutexGuard<'a, Connection>,
    changes: &'a AtomicU64,
}

impl std::ops::Deref for Counted<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.connection
    }
}

impl std::ops::DerefMut for Counted<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.connection
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }
}

impl Store {
    /// Opens (creating if needed) and migrates the database at `path`; concurrent appends
    /// commit together, up to [`DEFAULT_MAX_BATCH`] at a time.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, DEFAULT_MAX_BATCH)
    }

    /// [`Store::open`] with at most `max_batch` writes per commit; 1 commits every append,
    /// booking and audit record alone (one transaction and one fsync each).
    pub fn open_with(path: &Path, max_batch: NonZeroUsize) -> Result<Self, StoreError> {
        let mut connection = Connection::open(path)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        // WAL keeps readers off the writer's back; FULL makes every commit durable before it
        // returns, which is what "acknowledged" means here.
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.pragma_update(None, "foreign_keys", true)?;
        // Another process (the purge) may write between a transaction's first read and its
        // first write, which a deferred transaction answers with an error the busy timeout
        // never retries; taking the write lock at BEGIN waits for it instead.
        connection.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&mut connection)?;
        // Opened after the migration, on the schema it left; it can only read.
        let reader = Connection::open(path)?;
        reader.busy_timeout(BUSY_TIMEOUT)?;
        reader.pragma_update(None, "query_only", true)?;
        reader.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let connection = Arc::new(Mutex::new(connection));
        let changes = Arc::new(AtomicU64::new(0));
        let writer =
            writer::Writer::start(Arc::clone(&connection), max_batch, Arc::clone(&changes))?;
        Ok(Self {
            connection,
            reader: Mutex::new(reader),
            writer,
            changes,
            labels: Mutex::default(),
        })
    }

    /// The writing connection, for any use; counted as a change when the guard is dropped.
    fn connection(&self) -> Result<Counted<'_>, StoreError> {
        Ok(Counted {
            connection: self.connection.lock().map_err(|_| StoreError::Poisoned)?,
            changes: &self.changes,
        })
    }

    /// The reading connection: it sees every commit that returned before each of its
    /// statements starts, and waits for no commit in progress.
    fn reading(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.reader.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Returns true if and only if nothing was written through this store since `mark` was
    /// taken, so a read made then is still what a read now would return. (Only chatd writes
    /// live conversations; the purge process removes only conversations deleted long ago.)
    pub fn unchanged_since(&self, mark: ChangeMark) -> bool {
        self.changes.load(Ordering::SeqCst) == mark.0
    }

    /// How many group commits the writer has made since the store was opened (each holds one
    /// or more appends, bookings or audit records).
    pub fn group_commits(&self) -> u64 {
        self.writer.commits()
    }

    /// Creates a conversation for `user_id`.
    pub fn create_conversation(
        &self,
        user_id: &str,
        new: &NewConversation,
    ) -> Result<Conversation, StoreError> {
        let title = clean_title(new.title.as_deref()).unwrap_or(DEFAULT_TITLE);
        let connection = self.connection()?;
        let id: String = connection.query_row(
            "INSERT INTO ai_conversations (id, user_id, scope, title, credential_id, model_id)
             VALUES (lower(hex(randomblob(16))), ?1, ?2, ?3, ?4, ?5) RETURNING id",
            params![
                user_id,
                new.scope.as_str(),
                title,
                new.credential_id,
                new.model_id
            ],
            |row| row.get(0),
        )?;
        fetch_conversation(&connection, user_id, &id)?.ok_or(StoreError::ConversationNotFound)
    }

    /// The user's live conversations in `scope`, most recently updated first.
    pub fn list_conversations(
        &self,
        user_id: &str,
        scope: Scope,
    ) -> Result<Vec<Conversation>, StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare(&format!(
            "SELECT {CONVERSATION_COLUMNS} FROM ai_conversations
             WHERE user_id = ?1 AND scope = ?2 AND deleted_at IS NULL
             ORDER BY updated_at DESC, rowid DESC"
        ))?;
        let rows = statement.query_map(params![user_id, scope.as_str()], conversation_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The user's live conversation `id`.
    pub fn conversation(
        &self,
        user_id: &str,
        id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        fetch_conversation(&*self.reading()?, user_id, id)
    }

    /// The user's live conversation `id` with its messages, read at one moment, and that
    /// moment's [`ChangeMark`].
    pub fn read_for_turn(&self, user_id: &str, id: &str) -> Result<Option<TurnRead>, StoreError> {
        let connection = self.reading()?;
        // Taken before the read starts: a write counted after this may or may not be seen,
        // and changes the count; every write counted before it had committed, and is seen.
        let mark = ChangeMark(self.changes.load(Ordering::SeqCst));
        // One snapshot for the row and its messages.
        let read = connection.unchecked_transaction()?;
        let Some(conversation) = fetch_conversation(&read, user_id, id)? else {
            return Ok(None);
        };
        let messages = read_messages(&read, id)?;
        read.finish()?;
        Ok(Some(TurnRead {
            conversation,
            messages,
            mark,
        }))
    }

    /// Applies `update` to the user's live conversation `id`.
    pub fn update_conversation(
        &self,
        user_id: &str,
        id: &str,
        update: &ConversationUpdate,
    ) -> Result<Conversation, StoreError> {
        let connection = self.connection()?;
        let changed = connection.execute(
            &format!(
                "UPDATE ai_conversations SET
                   title = coalesce(?3, title),
                   credential_id = coalesce(?4, credential_id),
                   model_id = coalesce(?5, model_id),
                   updated_at = {NOW}
                 WHERE id = ?1 AND user_id = ?2 AND deleted_at IS NULL"
            ),
            params![
                id,
                user_id,
                clean_title(update.title.as_deref()),
                update.credential_id,
                update.model_id
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::ConversationNotFound);
        }
        fetch_conversation(&connection, user_id, id)?.ok_or(StoreError::ConversationNotFound)
    }

    /// Soft-deletes the user's conversation `id`. Deleting it again succeeds again, as the
    /// original did; only an id the user never had is `false`.
    pub fn delete_conversation(&self, user_id: &str, id: &str) -> Result<bool, StoreError> {
        let changed = self.connection()?.execute(
            &format!(
                "UPDATE ai_conversations SET deleted_at = {NOW}, updated_at = {NOW}
                 WHERE id = ?1 AND user_id = ?2"
            ),
            params![id, user_id],
        )?;
        Ok(changed > 0)
    }

    /// Books a turn's usage in one commit: the token and cost columns of the turn's last
    /// assistant row `message_id`, the conversation's totals, and its latest context size.
    pub fn record_usage(
        &self,
        conversation_id: &str,
        message_id: &str,
        usage: &TurnUsage,
    ) -> Result<(), StoreError> {
        let (conversation_id, message_id, usage) =
            (conversation_id.to_owned(), message_id.to_owned(), *usage);
        self.writer
            .write(move |connection| book_usage(connection, &conversation_id, &message_id, &usage))
    }

    /// Appends a message at the next position and bumps the conversation, in one commit.
    pub fn append_message(
        &self,
        conversation_id: &str,
        message: &NewMessage,
    ) -> Result<Message, StoreError> {
        self.append(conversation_id, message, None)
    }

    /// Appends the user's message of a new turn by `actor` and, while the conversation still
    /// has [`DEFAULT_TITLE`] (a rename meanwhile wins), gives it `auto_title`, and records the
    /// turn's start in the audit log — in the same commit, so the turn pays for one durable
    /// commit before it streams, and a stored turn always has its start recorded.
    pub fn append_user_turn(
        &self,
        conversation_id: &str,
        message: &NewMessage,
        auto_title: &str,
        actor: &str,
    ) -> Result<UserTurn, StoreError> {
        let write = user_turn(conversation_id, message.clone(), auto_title, actor)?;
        self.writer.write(write)
    }

    /// [`Store::append_user_turn`] for a task: the write is queued before this returns, so
    /// every write queued after it commits with it or later, and what is returned resolves
    /// once its commit returned.
    pub fn submit_user_turn(
        &self,
        conversation_id: &str,
        message: NewMessage,
        auto_title: &str,
        actor: &str,
    ) -> Committed<UserTurn> {
        match user_turn(conversation_id, message, auto_title, actor) {
            Ok(write) => self.writer.submit(write),
            Err(error) => Committed::refused(error),
        }
    }

    fn append(
        &self,
        conversation_id: &str,
        message: &NewMessage,
        auto_title: Option<&str>,
    ) -> Result<Message, StoreError> {
        let row = MessageRow::of(conversation_id, message, auto_title)?;
        let stored = self
            .writer
            .write(move |connection| row.insert(connection))?;
        Ok(stored.message(message))
    }

    /// Closes, as interrupted, every tool call that a turn announced after the conversation's
    /// last user message and never answered — what a chatd killed mid-turn leaves. Run at
    /// boot, before any turn can hold a lease, so every such call is a dead turn's. Returns
    /// how many calls it closed.
    pub fn finalize_interrupted_calls(&self) -> Result<usize, StoreError> {
        let open: Vec<(String, String, String)> = {
            let connection = self.connection()?;
            let mut statement = connection.prepare(
                "SELECT m.conversation_id, m.tool_call_id, m.tool_name FROM ai_messages m
                 JOIN ai_conversations c ON c.id = m.conversation_id AND c.deleted_at IS NULL
                 WHERE m.role = 'assistant' AND m.tool_call_id IS NOT NULL
                   AND m.position > coalesce((SELECT max(u.position) FROM ai_messages u
                       WHERE u.conversation_id = m.conversation_id AND u.role = 'user'), -1)
                   AND NOT EXISTS (SELECT 1 FROM ai_messages t
                       WHERE t.conversation_id = m.conversation_id AND t.role = 'tool'
                         AND t.tool_call_id = m.tool_call_id)
                 ORDER BY m.conversation_id, m.position",
            )?;
            let rows =
                statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (conversation_id, tool_call_id, tool_name) in &open {
            let row = NewMessage {
                role: Role::Tool,
                content: vec![ContentBlock::ToolResult {
                    ok: false,
                    error: Some(history::INTERRUPTED_TOOL_RESULT_ERROR.to_owned()),
                }],
                tool_call: Some(ToolCallRef {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                }),
            };
            self.append(conversation_id, &row, None)?;
        }
        Ok(open.len())
    }

    /// Recomputes every usage slot from the messages, in one transaction (for a bulk load,
    /// or after rewriting message timestamps).
    pub fn rebuild_usage_slots(&self) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        let transaction = connection.transaction()?;
        transaction.execute_batch(REBUILD_SLOTS)?;
        transaction.commit()?;
        Ok(())
    }

    /// Runs SQLite's own consistency check; `Ok(true)` when it reports `ok`.
    pub fn integrity_ok(&self) -> Result<bool, StoreError> {
        let result: String = self
            .connection()?
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
        Ok(result == "ok")
    }

    /// The conversation's messages in position order. A row whose JSON no longer validates is
    /// logged and read as empty content, so one bad row cannot make a conversation unreadable.
    pub fn messages(&self, conversation_id: &str) -> Result<Vec<Message>, StoreError> {
        read_messages(&*self.reading()?, conversation_id)
    }

    /// Message `message_id` of the conversation, read alone (an image of it is served without
    /// reading the rest of a conversation that may hold hundreds of megabytes of images),
    /// as [`Store::messages`] reads it. `None` when the conversation has no such message.
    pub fn message(
        &self,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<Option<Message>, StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare_cached(concat!(
            "SELECT ",
            message_columns!(),
            " FROM ai_messages WHERE conversation_id = ?1 AND id = ?2"
        ))?;
        Ok(statement
            .query_row([conversation_id, message_id], message_from_row)
            .optional()?)
    }
}

/// The messages of `conversation_id` in position order (see [`Store::messages`]).
fn read_messages(
    connection: &Connection,
    conversation_id: &str,
) -> Result<Vec<Message>, StoreError> {
    let mut statement = connection.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM ai_messages WHERE conversation_id = ?1 ORDER BY position"
    ))?;
    let rows = statement.query_map([conversation_id], message_from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A message from a row of [`message_columns`]. A row whose JSON no longer validates is read
/// as empty content (see [`Store::messages`]).
fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    let id: String = row.get(0)?;
    let role_text: String = row.get(2)?;
    let content_json: String = row.get(3)?;
    let content = serde_json::from_str(&content_json).unwrap_or_else(|error| {
        tracing::warn!(message_id = %id, %error, "stored content does not validate; read as empty");
        Vec::new()
    });
    let tool_call = match (
        row.get::<_, Option<String>>(4)?,
        row.get::<_, Option<String>>(5)?,
    ) {
        (Some(id), Some(name)) => Some(ToolCallRef { id, name }),
        _ => None,
    };
    Ok(Message {
        position: row.get(1)?,
        // The CHECK constraint keeps other roles out of the table.
        role: Role::parse(&role_text).unwrap_or(Role::User),
        content,
        tool_call,
        created_at: row.get(6)?,
        id,
    })
}

/// The columns [`conversation_from_row`] reads, in its order.
macro_rules! conversation_columns {
    () => {
        "id, scope, title, credential_id, model_id,
    prompt_tokens_total, completion_tokens_total, cost_usd_total, cache_read_tokens_total,
    cache_creation_tokens_total, context_tokens, created_at, updated_at"
    };
}

const CONVERSATION_COLUMNS: &str = conversation_columns!();

/// The write of a turn's user message (see [`Store::append_user_turn`]), checked and encoded.
fn user_turn(
    conversation_id: &str,
    message: NewMessage,
    auto_title: &str,
    actor: &str,
) -> Result<impl FnOnce(&Connection) -> Result<UserTurn, StoreError> + Send + 'static, StoreError> {
    let row = MessageRow::of(conversation_id, &message, Some(auto_title))?;
    let actor = actor.to_owned();
    Ok(move |connection: &Connection| {
        let stored = row.insert(connection)?;
        let turn = events::chat_turn(connection, &row.conversation_id)?;
        events::insert(
            connection,
            Some(&actor),
            &events::AuditEvent::ChatStarted(turn.clone()),
        )?;
        Ok(UserTurn {
            message: stored.message(&message),
            turn,
        })
    })
}

/// One live conversation of one user, the statement every turn starts with.
const FETCH_CONVERSATION: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    " FROM ai_conversations WHERE id = ?1 AND user_id = ?2 AND deleted_at IS NULL"
);

fn conversation_from_row(row: &Row<'_>) -> rusqlite::Result<Conversation> {
    let scope_text: String = row.get(1)?;
    Ok(Conversation {
        id: row.get(0)?,
        // The CHECK constraint keeps other scopes out of the table.
        scope: Scope::parse(&scope_text).unwrap_or(Scope::Site),
        title: row.get(2)?,
        credential_id: row.get(3)?,
        model_id: row.get(4)?,
        prompt_tokens_total: row.get(5)?,
        completion_tokens_total: row.get(6)?,
        cost_usd_total: row.get(7)?,
        cache_read_tokens_total: row.get(8)?,
        cache_creation_tokens_total: row.get(9)?,
        context_tokens: row.get(10)?,
        created_at: row.get(11)?,
        updated_at: row.get(12)?,
    })
}

fn fetch_conversation(
    connection: &Connection,
    user_id: &str,
    id: &str,
) -> Result<Option<Conversation>, StoreError> {
    Ok(connection
        .prepare_cached(FETCH_CONVERSATION)?
        .query_row(params![id, user_id], conversation_from_row)
        .optional()?)
}

fn require_live(connection: &Connection, conversation_id: &str) -> Result<(), StoreError> {
    let live: Option<i64> = connection
        .prepare_cached("SELECT 1 FROM ai_conversations WHERE id = ?1 AND deleted_at IS NULL")?
        .query_row([conversation_id], |row| row.get(0))
        .optional()?;
    live.map(|_| ()).ok_or(StoreError::ConversationNotFound)
}

/// Books `usage` on `message_id` of `conversation_id`, its usage slot and the conversation's
/// totals, in `connection`'s transaction.
fn book_usage(
    connection: &Connection,
    conversation_id: &str,
    message_id: &str,
    usage: &TurnUsage,
) -> Result<(), StoreError> {
    require_live(connection, conversation_id)?;
    // The slot takes the difference, so booking a row twice cannot count it twice.
    let before: Option<(String, i64, i64, f64, i64, i64)> = connection
        .query_row(
            "SELECT created_at, prompt_tokens, completion_tokens, cost_usd, cache_read_tokens,
                    cache_creation_tokens
             FROM ai_messages WHERE id = ?1 AND conversation_id = ?2",
            params![message_id, conversation_id],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )
        .optional()?;
    if let Some((created_at, prompt, completion, cost, read, creation)) = before {
        connection.execute(
            &format!(
                "UPDATE ai_usage_slots SET prompt_tokens = prompt_tokens + ?3,
                   completion_tokens = completion_tokens + ?4, cost_usd = cost_usd + ?5,
                   cache_read_tokens = cache_read_tokens + ?6,
                   cache_creation_tokens = cache_creation_tokens + ?7
                 WHERE slot = {} AND conversation_id = ?2",
                SLOT_OF.replace('?', "?1")
            ),
            params![
                created_at,
                conversation_id,
                usage.prompt_tokens - prompt,
                usage.completion_tokens - completion,
                usage.cost_usd - cost,
                usage.cache_read_tokens - read,
                usage.cache_creation_tokens - creation
            ],
        )?;
    }
    connection.execute(
        "UPDATE ai_messages SET prompt_tokens = ?3, completion_tokens = ?4, cost_usd = ?5,
           cache_read_tokens = ?6, cache_creation_tokens = ?7
         WHERE id = ?1 AND conversation_id = ?2",
        params![
            message_id,
            conversation_id,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cost_usd,
            usage.cache_read_tokens,
            usage.cache_creation_tokens
        ],
    )?;
    connection.execute(
        &format!(
            "UPDATE ai_conversations SET
               prompt_tokens_total = prompt_tokens_total + ?2,
               completion_tokens_total = completion_tokens_total + ?3,
               cost_usd_total = cost_usd_total + ?4,
               cache_read_tokens_total = cache_read_tokens_total + ?5,
               cache_creation_tokens_total = cache_creation_tokens_total + ?6,
               context_tokens = ?7,
               updated_at = {NOW}
             WHERE id = ?1"
        ),
        params![
            conversation_id,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cost_usd,
            usage.cache_read_tokens,
            usage.cache_creation_tokens,
            usage.context_tokens
        ],
    )?;
    Ok(())
}

/// A message ready for the writer: checked, and its content already JSON, so the writer
/// thread spends its time on SQL only.
struct MessageRow {
    conversation_id: String,
    role: Role,
    content_json: String,
    tool_call: Option<ToolCallRef>,
    auto_title: Option<String>,
}

/// What the database gave a stored message.
struct StoredRow {
    id: String,
    position: i64,
    created_at: String,
}

impl MessageRow {
    /// Checks `message` and encodes its content, for `conversation_id` (and, with
    /// `auto_title`, to title a conversation that still has [`DEFAULT_TITLE`]).
    fn of(
        conversation_id: &str,
        message: &NewMessage,
        auto_title: Option<&str>,
    ) -> Result<Self, StoreError> {
        validate_message(message)?;
        Ok(Self {
            conversation_id: conversation_id.to_owned(),
            role: message.role,
            content_json: serde_json::to_string(&message.content)?,
            tool_call: message.tool_call.clone(),
            auto_title: auto_title.map(str::to_owned),
        })
    }

    /// Appends the row at the next position, bumps (and maybe titles) the conversation, and
    /// counts it in its usage slot, in `connection`'s transaction.
    fn insert(&self, connection: &Connection) -> Result<StoredRow, StoreError> {
        let conversation_id = self.conversation_id.as_str();
        require_live(connection, conversation_id)?;
        let (id, position, created_at): (String, i64, String) = connection
            .prepare_cached(
                "INSERT INTO ai_messages
                   (id, conversation_id, position, role, content_json, tool_call_id, tool_name)
                 VALUES (lower(hex(randomblob(16))), ?1,
                   (SELECT coalesce(max(position), -1) + 1 FROM ai_messages
                    WHERE conversation_id = ?1),
                   ?2, ?3, ?4, ?5)
                 RETURNING id, position, created_at",
            )?
            .query_row(
                params![
                    conversation_id,
                    self.role.as_str(),
                    self.content_json,
                    self.tool_call.as_ref().map(|c| &c.id),
                    self.tool_call.as_ref().map(|c| &c.name),
                ],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?;
        connection
            .prepare_cached(&format!(
                "UPDATE ai_conversations SET updated_at = {NOW},
                   title = CASE WHEN ?2 IS NOT NULL AND title = ?3 THEN ?2 ELSE title END
                 WHERE id = ?1"
            ))?
            .execute(params![conversation_id, self.auto_title, DEFAULT_TITLE])?;
        connection
            .prepare_cached(&format!(
                "INSERT INTO ai_usage_slots (slot, conversation_id, messages)
                 VALUES ({}, ?2, 1)
                 ON CONFLICT (slot, conversation_id) DO UPDATE SET messages = messages + 1",
                SLOT_OF.replace('?', "?1")
            ))?
            .execute(params![created_at, conversation_id])?;
        Ok(StoredRow {
            id,
            position,
            created_at,
        })
    }
}

impl StoredRow {
    /// The stored `message` as read back.
    fn message(self, message: &NewMessage) -> Message {
        Message {
            id: self.id,
            position: self.position,
            role: message.role,
            content: message.content.clone(),
            tool_call: message.tool_call.clone(),
            created_at: self.created_at,
        }
    }
}

/// A title trimmed, or `None` when blank.
fn clean_title(title: Option<&str>) -> Option<&str> {
    title.map(str::trim).filter(|t| !t.is_empty())
}

/// Tool-call and tool rows name their call; other rows do not.
fn validate_message(message: &NewMessage) -> Result<(), StoreError> {
    let carries_call = message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall { .. }));
    match (message.role, &message.tool_call) {
        (Role::Tool, None) => Err(StoreError::InvalidMessage("a tool row names its tool call")),
        (Role::User, Some(_)) => Err(StoreError::InvalidMessage("a user row names no tool call")),
        (Role::Assistant, None) if carries_call => Err(StoreError::InvalidMessage(
            "an assistant tool-call row names its tool call",
        )),
        _ => Ok(()),
    }
}

fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    let known = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let found: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > known {
        return Err(StoreError::NewerSchema { found, known });
    }
    let transaction = connection.transaction()?;
    for (index, migration) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        transaction.execute_batch(migration)?;
        if migration.contains("CREATE TABLE ai_usage_slots") {
            transaction.execute_batch(REBUILD_SLOTS)?;
        }
        transaction.pragma_update(None, "user_version", index + 1)?;
    }
    transaction.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests;
