//! What the audit rollups read: the usage slots (per conversation and UTC quarter-hour) in
//! time order, the messages of a partial first slot through the covering usage index (never
//! touching message content), the conversations' owners, scopes and models, and what the CMS
//! calls each owner.

use std::collections::HashMap;

use rusqlite::params;
use rusqlite::types::ValueRef;

use super::{Scope, Store, StoreError};

/// One message's usage columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSample<'a> {
    /// When it was written (ISO 8601 UTC, so text order is time order).
    pub created_at: &'a str,
    /// Its conversation.
    pub conversation_id: &'a str,
    /// Prompt tokens booked on it.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Cache-read tokens.
    pub cache_read_tokens: i64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: i64,
}

/// One conversation's usage in one quarter-hour slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotSample<'a> {
    /// The slot: Unix seconds of its start divided by 900.
    pub slot: i64,
    /// Its conversation.
    pub conversation_id: &'a str,
    /// Prompt tokens booked on its messages.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Cache-read tokens.
    pub cache_read_tokens: i64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: i64,
}

/// Who and what a conversation is, for grouping; borrowed from the row being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationFacts<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its owner.
    pub user_id: &'a str,
    /// Its scope.
    pub scope: Scope,
    /// Its current model.
    pub model_id: &'a str,
    /// The provider of its current credential; `None` when it has none.
    pub provider_id: Option<&'a str>,
}

impl Store {
    /// What the CMS last called each user it signed in, by user id.
    pub fn user_labels(&self) -> Result<HashMap<String, String>, StoreError> {
        let connection = self.reading()?;
        let mut statement =
            connection.prepare_cached("SELECT user_id, label FROM ai_user_labels")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Calls `visit` for every message written at or after `since` and before `until` (ISO
    /// 8601 UTC), oldest first. Deleted conversations count, as in the reference.
    pub fn scan_usage(
        &self,
        since: &str,
        until: &str,
        mut visit: impl FnMut(UsageSample<'_>),
    ) -> Result<(), StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare_cached(
            "SELECT created_at, conversation_id, prompt_tokens, completion_tokens, cost_usd,
                    cache_read_tokens, cache_creation_tokens
             FROM ai_messages INDEXED BY ai_messages_usage
             WHERE created_at >= ?1 AND created_at < ?2 ORDER BY created_at",
        )?;
        let mut rows = statement.query(params![since, until])?;
        while let Some(row) = rows.next()? {
            visit(UsageSample {
                created_at: row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?,
                conversation_id: row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?,
                prompt_tokens: row.get(2)?,
                completion_tokens: row.get(3)?,
                cost_usd: row.get(4)?,
                cache_read_tokens: row.get(5)?,
                cache_creation_tokens: row.get(6)?,
            });
        }
        Ok(())
    }

    /// Calls `visit` for every usage slot from `from_slot` on, in slot order.
    pub fn scan_usage_slots(
        &self,
        from_slot: i64,
        mut visit: impl FnMut(SlotSample<'_>),
    ) -> Result<(), StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare_cached(
            "SELECT slot, conversation_id, prompt_tokens, completion_tokens, cost_usd,
                    cache_read_tokens, cache_creation_tokens
             FROM ai_usage_slots WHERE slot >= ?1 ORDER BY slot",
        )?;
        let mut rows = statement.query(params![from_slot])?;
        while let Some(row) = rows.next()? {
            visit(SlotSample {
                slot: row.get(0)?,
                conversation_id: row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?,
                prompt_tokens: row.get(2)?,
                completion_tokens: row.get(3)?,
                cost_usd: row.get(4)?,
                cache_read_tokens: row.get(5)?,
                cache_creation_tokens: row.get(6)?,
            });
        }
        Ok(())
    }

    /// Calls `visit` with every conversation's owner, scope, model and current provider,
    /// deleted ones included.
    pub fn scan_conversation_facts(
        &self,
        mut visit: impl FnMut(ConversationFacts<'_>),
    ) -> Result<(), StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare_cached(
            "SELECT c.id, c.user_id, c.scope, c.model_id, cred.provider_id
             FROM ai_conversations c
             LEFT JOIN ai_provider_credentials cred ON cred.id = c.credential_id",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            visit(ConversationFacts {
                id: text(row.get_ref(0)?)?,
                user_id: text(row.get_ref(1)?)?,
                // The CHECK constraint keeps other scopes out.
                scope: Scope::parse(text(row.get_ref(2)?)?).unwrap_or(Scope::Site),
                model_id: text(row.get_ref(3)?)?,
                provider_id: row
                    .get_ref(4)?
                    .as_str_or_null()
                    .map_err(rusqlite::Error::from)?,
            });
        }
        Ok(())
    }
}

/// A text column, borrowed from its row.
fn text(value: ValueRef<'_>) -> rusqlite::Result<&str> {
    value.as_str().map_err(rusqlite::Error::from)
}
