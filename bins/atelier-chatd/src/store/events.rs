//! The audit log: who changed the AI settings and who ran which chat turn, stored in the shape
//! of the CMS's own `audit_events` table (the same action names, target types and metadata
//! keys; no IP address or user agent, as the CMS's AI handlers record none), so an operator
//! reads chatd's records exactly as the CMS's.
//!
//! Parts:
//! - [`AuditEvent`]: every event chatd records, each with its [`Action`], its target and
//!   typed metadata; the action, target and metadata names are spelled only here.
//! - [`Store::record_event`]: one event, in the next group commit. The start of a chat turn is
//!   written with the user's message instead (see [`Store::append_user_turn`]).
//! - [`Store::audit_events`]: the newest events, optionally of one action family.
//! - [`Store::close_interrupted_turns`]: a failure recorded for every turn that started and
//!   never ended (a process killed mid-turn), so every start has its end.

use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{AuthMode, CredentialRow, Scope, Store, StoreError};

/// The most characters of an error text a record keeps: provider errors can run long, and the
/// CMS bounds its metadata the same way.
pub const MAX_ERROR_CHARS: usize = 200;

/// The error recorded, at the next start, for a turn whose process stopped mid-turn.
pub const TURN_INTERRUPTED_ERROR: &str = "chatd stopped before the turn ended.";

/// What a chat turn's records say about it: the conversation (their target), its scope, and
/// the provider and model it ran on. Read back from a start's metadata to record its end.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatTurn {
    /// The conversation: the records' target, not part of their metadata.
    #[serde(skip)]
    pub conversation_id: String,
    /// Where in the CMS the conversation lives.
    pub scope: Scope,
    /// The provider of the conversation's credential; `None` when the credential is gone.
    pub provider_id: Option<String>,
    /// The model the turn ran on.
    pub model_id: String,
}

/// What one turn booked.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnTotals {
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Cost in USD.
    pub cost_usd: f64,
}

/// The credential a settings record is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialFacts {
    /// Its id: the records' target.
    pub id: String,
    /// Its provider.
    pub provider_id: String,
    /// Its label.
    pub display_label: String,
}

impl From<&CredentialRow> for CredentialFacts {
    fn from(row: &CredentialRow) -> Self {
        CredentialFacts {
            id: row.id.clone(),
            provider_id: row.provider_id.clone(),
            display_label: row.display_label.clone(),
        }
    }
}

/// A field a credential update named (never its value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialField {
    /// The label.
    DisplayLabel,
    /// The key (set or cleared).
    ApiKey,
    /// The endpoint.
    BaseUrl,
}

impl CredentialField {
    /// The field's name on the wire and in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialField::DisplayLabel => "displayLabel",
            CredentialField::ApiKey => "apiKey",
            CredentialField::BaseUrl => "baseUrl",
        }
    }
}

/// How testing a credential went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestOutcome {
    /// The provider listed this many live models.
    Listed(usize),
    /// The test failed; the message says why.
    Failed(String),
}

/// Everything chatd records in the audit log.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditEvent {
    /// A chat turn began: its user message is stored.
    ChatStarted(ChatTurn),
    /// A chat turn ended normally, or was stopped by its client.
    ChatCompleted {
        /// The turn.
        turn: ChatTurn,
        /// What it booked.
        totals: TurnTotals,
    },
    /// A chat turn ended with an error, or its process stopped mid-turn.
    ChatFailed {
        /// The turn.
        turn: ChatTurn,
        /// What it booked.
        totals: TurnTotals,
        /// Why it failed (kept to [`MAX_ERROR_CHARS`]).
        error: String,
    },
    /// A credential was created.
    CredentialCreated {
        /// The credential.
        credential: CredentialFacts,
        /// How it authenticates.
        auth_mode: AuthMode,
    },
    /// A credential was changed.
    CredentialUpdated {
        /// The credential, as it is now.
        credential: CredentialFacts,
        /// The fields the update named.
        fields_touched: Vec<CredentialField>,
    },
    /// A credential was deleted.
    CredentialDeleted(CredentialFacts),
    /// A credential was tested against its provider.
    CredentialTested {
        /// The credential.
        credential: CredentialFacts,
        /// How it went.
        outcome: TestOutcome,
    },
    /// A scope's default was set, by an editor or (`auto`) by a new credential.
    DefaultUpdated {
        /// The scope: the record's target.
        scope: Scope,
        /// The credential.
        credential_id: String,
        /// The model.
        model_id: String,
        /// Whether a new credential filled an empty default.
        auto: bool,
    },
    /// A scope's default was cleared.
    DefaultCleared {
        /// The scope.
        scope: Scope,
    },
}

/// The actions, as the CMS spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `ai.chat.started`.
    ChatStarted,
    /// `ai.chat.completed`.
    ChatCompleted,
    /// `ai.chat.failed`.
    ChatFailed,
    /// `ai.credential.created`.
    CredentialCreated,
    /// `ai.credential.updated`.
    CredentialUpdated,
    /// `ai.credential.deleted`.
    CredentialDeleted,
    /// `ai.credential.tested`.
    CredentialTested,
    /// `ai.default.updated`.
    DefaultUpdated,
    /// `ai.default.cleared`.
    DefaultCleared,
}

impl Action {
    /// The prefix every chat turn action shares.
    pub const CHAT_PREFIX: &'static str = "ai.chat.";

    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::ChatStarted => "ai.chat.started",
            Action::ChatCompleted => "ai.chat.completed",
            Action::ChatFailed => "ai.chat.failed",
            Action::CredentialCreated => "ai.credential.created",
            Action::CredentialUpdated => "ai.credential.updated",
            Action::CredentialDeleted => "ai.credential.deleted",
            Action::CredentialTested => "ai.credential.tested",
            Action::DefaultUpdated => "ai.default.updated",
            Action::DefaultCleared => "ai.default.cleared",
        }
    }
}

impl AuditEvent {
    /// The event's action.
    pub fn action(&self) -> Action {
        match self {
            AuditEvent::ChatStarted(_) => Action::ChatStarted,
            AuditEvent::ChatCompleted { .. } => Action::ChatCompleted,
            AuditEvent::ChatFailed { .. } => Action::ChatFailed,
            AuditEvent::CredentialCreated { .. } => Action::CredentialCreated,
            AuditEvent::CredentialUpdated { .. } => Action::CredentialUpdated,
            AuditEvent::CredentialDeleted(_) => Action::CredentialDeleted,
            AuditEvent::CredentialTested { .. } => Action::CredentialTested,
            AuditEvent::DefaultUpdated { .. } => Action::DefaultUpdated,
            AuditEvent::DefaultCleared { .. } => Action::DefaultCleared,
        }
    }

    /// The target's type and id.
    pub fn target(&self) -> (&'static str, &str) {
        match self {
            AuditEvent::ChatStarted(turn)
            | AuditEvent::ChatCompleted { turn, .. }
            | AuditEvent::ChatFailed { turn, .. } => ("ai_conversation", &turn.conversation_id),
            AuditEvent::CredentialCreated { credential, .. }
            | AuditEvent::CredentialUpdated { credential, .. }
            | AuditEvent::CredentialDeleted(credential)
            | AuditEvent::CredentialTested { credential, .. } => ("ai_credential", &credential.id),
            AuditEvent::DefaultUpdated { scope, .. } | AuditEvent::DefaultCleared { scope } => {
                ("ai_default", scope.as_str())
            }
        }
    }

    /// The metadata object, with the CMS's keys.
    pub fn metadata(&self) -> Value {
        match self {
            AuditEvent::ChatStarted(turn) => chat_metadata(turn, None, None),
            AuditEvent::ChatCompleted { turn, totals } => chat_metadata(turn, Some(totals), None),
            AuditEvent::ChatFailed {
                turn,
                totals,
                error,
            } => chat_metadata(turn, Some(totals), Some(error)),
            AuditEvent::CredentialCreated {
                credential,
                auth_mode,
            } => json!({
                "providerId": credential.provider_id,
                "authMode": auth_mode.as_str(),
                "displayLabel": credential.display_label,
            }),
            AuditEvent::CredentialUpdated {
                credential,
                fields_touched,
            } => json!({
                "providerId": credential.provider_id,
                "displayLabel": credential.display_label,
                "fieldsTouched": fields_touched.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
            }),
            AuditEvent::CredentialDeleted(credential) => json!({
                "providerId": credential.provider_id,
                "displayLabel": credential.display_label,
            }),
            AuditEvent::CredentialTested {
                credential,
                outcome,
            } => {
                let mut metadata = json!({
                    "providerId": credential.provider_id,
                    "displayLabel": credential.display_label,
                    "ok": matches!(outcome, TestOutcome::Listed(_)),
                });
                match outcome {
                    TestOutcome::Listed(count) => metadata["modelCount"] = json!(count),
                    TestOutcome::Failed(error) => metadata["error"] = json!(bounded(error)),
                }
                metadata
            }
            AuditEvent::DefaultUpdated {
                scope,
                credential_id,
                model_id,
                auto,
            } => {
                let mut metadata = json!({
                    "scope": scope.as_str(),
                    "credentialId": credential_id,
                    "modelId": model_id,
                });
                if *auto {
                    metadata["auto"] = json!(true);
                }
                metadata
            }
            AuditEvent::DefaultCleared { scope } => json!({ "scope": scope.as_str() }),
        }
    }
}

fn chat_metadata(turn: &ChatTurn, totals: Option<&TurnTotals>, error: Option<&str>) -> Value {
    let mut metadata = json!({
        "scope": turn.scope.as_str(),
        "providerId": turn.provider_id,
        "modelId": turn.model_id,
    });
    if let Some(totals) = totals {
        metadata["promptTokens"] = json!(totals.prompt_tokens);
        metadata["completionTokens"] = json!(totals.completion_tokens);
        // Micro-dollars: sums of float prices carry noise below that.
        metadata["costUsd"] = json!((totals.cost_usd * 1e6).round() / 1e6);
    }
    if let Some(error) = error {
        metadata["error"] = json!(bounded(error));
    }
    metadata
}

/// `text` cut to [`MAX_ERROR_CHARS`] characters.
fn bounded(text: &str) -> String {
    text.chars().take(MAX_ERROR_CHARS).collect()
}

/// One record as read back.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvent {
    /// Its id.
    pub id: String,
    /// Who acted.
    pub actor_user_id: Option<String>,
    /// The action.
    pub action: String,
    /// The target's type.
    pub target_type: Option<String>,
    /// The target's id.
    pub target_id: Option<String>,
    /// The metadata; `{}` when the stored value is not a flat object of strings, numbers,
    /// booleans, nulls and string lists (what the CMS accepts).
    pub metadata: Value,
    /// Always `None` for chatd's records.
    pub ip_address: Option<String>,
    /// Always `None` for chatd's records.
    pub user_agent: Option<String>,
    /// When it was recorded (ISO 8601 UTC with milliseconds).
    pub created_at: String,
}

/// The stored metadata as the CMS reads it: a flat object of permitted values, else `{}`.
fn read_metadata(text: &str) -> Value {
    let permitted = |value: &Value| match value {
        Value::Array(items) => items.iter().all(Value::is_string),
        Value::Object(_) => false,
        _ => true,
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) if map.values().all(permitted) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

/// Writes `event` by `actor` through `connection` (inside the caller's transaction, if any).
pub(super) fn insert(
    connection: &Connection,
    actor: Option<&str>,
    event: &AuditEvent,
) -> Result<(), StoreError> {
    EventRow::of(actor, event)?.insert(connection)
}

/// A record ready to insert: its metadata already JSON, so the writer thread runs SQL only.
struct EventRow {
    actor: Option<String>,
    action: &'static str,
    target_type: &'static str,
    target_id: String,
    metadata_json: String,
}

impl EventRow {
    fn of(actor: Option<&str>, event: &AuditEvent) -> Result<Self, StoreError> {
        let (target_type, target_id) = event.target();
        Ok(Self {
            actor: actor.map(str::to_owned),
            action: event.action().as_str(),
            target_type,
            target_id: target_id.to_owned(),
            metadata_json: serde_json::to_string(&event.metadata())?,
        })
    }

    fn insert(&self, connection: &Connection) -> Result<(), StoreError> {
        connection
            .prepare_cached(
                "INSERT INTO audit_events (id, actor_user_id, action, target_type, target_id,
                   metadata_json)
                 VALUES (lower(hex(randomblob(16))), ?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                self.actor,
                self.action,
                self.target_type,
                self.target_id,
                self.metadata_json
            ])?;
        Ok(())
    }
}

/// The turn facts of `conversation_id` as they stand: its scope, model, and its credential's
/// provider.
pub(super) fn chat_turn(
    connection: &Connection,
    conversation_id: &str,
) -> Result<ChatTurn, StoreError> {
    Ok(connection.query_row(
        "SELECT c.scope, c.model_id, cred.provider_id FROM ai_conversations c
         LEFT JOIN ai_provider_credentials cred ON cred.id = c.credential_id
         WHERE c.id = ?1",
        [conversation_id],
        |row| {
            let scope: String = row.get(0)?;
            Ok(ChatTurn {
                conversation_id: conversation_id.to_owned(),
                // The CHECK constraint keeps other scopes out of the table.
                scope: Scope::parse(&scope).unwrap_or(Scope::Site),
                model_id: row.get(1)?,
                provider_id: row.get(2)?,
            })
        },
    )?)
}

impl Store {
    /// Records `event` by `actor`, in the next group commit.
    pub fn record_event(&self, actor: &str, event: &AuditEvent) -> Result<(), StoreError> {
        let row = EventRow::of(Some(actor), event)?;
        self.writer.write(move |connection| row.insert(connection))
    }

    /// The newest `limit` records, newest first; with `action_prefix`, only the actions that
    /// start with it (`ai.chat.` for the chat turns).
    pub fn audit_events(
        &self,
        limit: usize,
        action_prefix: Option<&str>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare_cached(
            "SELECT id, actor_user_id, action, target_type, target_id, metadata_json,
                    ip_address, user_agent, created_at
             FROM audit_events
             WHERE ?1 IS NULL OR substr(action, 1, length(?1)) = ?1
             ORDER BY created_at DESC, rowid DESC LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = statement.query_map(params![action_prefix, limit], |row| {
            let metadata: String = row.get(5)?;
            Ok(StoredEvent {
                id: row.get(0)?,
                actor_user_id: row.get(1)?,
                action: row.get(2)?,
                target_type: row.get(3)?,
                target_id: row.get(4)?,
                metadata: read_metadata(&metadata),
                ip_address: row.get(6)?,
                user_agent: row.get(7)?,
                created_at: row.get(8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records a failure for every chat turn that started and never ended. Turns of one
    /// conversation run one at a time, so a start followed by another start (or by nothing)
    /// lost its end; a conversation's starts outnumber its ends by how many of those are
    /// still unrecorded, and they are its latest such starts (earlier runs closed the older
    /// ones). Run at boot, before any turn can start. Returns how many it closed.
    pub fn close_interrupted_turns(&self) -> Result<usize, StoreError> {
        let mut connection = self.connection()?;
        let transaction = connection.transaction()?;
        let started = Action::ChatStarted.as_str();
        let short: Vec<(String, i64)> = {
            let mut statement = transaction.prepare(
                "SELECT target_id, sum(action = ?1) - sum(action <> ?1) AS missing
                 FROM audit_events
                 WHERE target_type = 'ai_conversation' AND target_id IS NOT NULL
                   AND substr(action, 1, length(?2)) = ?2
                 GROUP BY target_id HAVING missing > 0",
            )?;
            let rows = statement.query_map(params![started, Action::CHAT_PREFIX], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
            rows.collect::<Result<_, _>>()?
        };
        let mut closed = 0;
        for (conversation_id, missing) in short {
            let records: Vec<(Option<String>, String, String)> = {
                let mut statement = transaction.prepare_cached(
                    "SELECT actor_user_id, action, metadata_json FROM audit_events
                     WHERE target_type = 'ai_conversation' AND target_id = ?1
                       AND substr(action, 1, length(?2)) = ?2
                     ORDER BY rowid",
                )?;
                let rows = statement
                    .query_map(params![conversation_id, Action::CHAT_PREFIX], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })?;
                rows.collect::<Result<_, _>>()?
            };
            let ended = |index: usize| {
                records
                    .get(index + 1)
                    .is_some_and(|(_, action, _)| action != started)
            };
            let lost: Vec<&(Option<String>, String, String)> = records
                .iter()
                .enumerate()
                .filter(|(index, (_, action, _))| action == started && !ended(*index))
                .map(|(_, record)| record)
                .collect();
            let missing = usize::try_from(missing).unwrap_or(0).min(lost.len());
            for (actor, _, metadata) in &lost[lost.len() - missing..] {
                let mut turn: ChatTurn = match serde_json::from_str(metadata) {
                    Ok(turn) => turn,
                    Err(error) => {
                        tracing::warn!(%conversation_id, %error, "a turn's start record does not read back; its end is not recorded");
                        continue;
                    }
                };
                turn.conversation_id.clone_from(&conversation_id);
                let failed = AuditEvent::ChatFailed {
                    turn,
                    totals: TurnTotals::default(),
                    error: TURN_INTERRUPTED_ERROR.to_owned(),
                };
                insert(&transaction, actor.as_deref(), &failed)?;
                closed += 1;
            }
        }
        transaction.commit()?;
        Ok(closed)
    }
}

#[cfg(test)]
mod tests;
