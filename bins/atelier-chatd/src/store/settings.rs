//! The AI settings in SQLite: provider credentials (secrets only ever sealed), the per-scope
//! defaults, and the durable copy of the pricing catalogue.

use rusqlite::{params, ErrorCode, OptionalExtension, Row};
use serde::Serialize;

use super::{Scope, Store, StoreError, NOW};
use crate::master_key::Sealed;

/// How a provider is reached: a key, or an endpoint with an optional key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AuthMode {
    /// An API key.
    #[serde(rename = "apiKey")]
    ApiKey,
    /// A base URL, with an optional bearer key.
    #[serde(rename = "baseUrl")]
    BaseUrl,
}

impl AuthMode {
    /// As stored and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::ApiKey => "apiKey",
            AuthMode::BaseUrl => "baseUrl",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "apiKey" => Some(AuthMode::ApiKey),
            "baseUrl" => Some(AuthMode::BaseUrl),
            _ => None,
        }
    }
}

/// A stored credential: everything but the secret in clear.
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialRow {
    /// Its id.
    pub id: String,
    /// Whose it is.
    pub user_id: String,
    /// The provider id (`anthropic`, `openai`, …).
    pub provider_id: String,
    /// How it authenticates.
    pub auth_mode: AuthMode,
    /// The user's label for it.
    pub display_label: String,
    /// The sealed key, when one is stored.
    pub sealed: Option<Sealed>,
    /// The endpoint of a base-URL credential.
    pub base_url: Option<String>,
    /// The fingerprint of the master key that sealed the key.
    pub key_fingerprint: Option<String>,
    /// When it was created (ISO 8601).
    pub created_at: String,
    /// When a turn last used it.
    pub last_used_at: Option<String>,
}

/// A credential to create.
#[derive(Debug, Clone)]
pub struct NewCredential {
    /// The provider id.
    pub provider_id: String,
    /// How it authenticates.
    pub auth_mode: AuthMode,
    /// The label.
    pub display_label: String,
    /// The sealed key and the fingerprint of the key that sealed it.
    pub sealed: Option<(Sealed, String)>,
    /// The endpoint.
    pub base_url: Option<String>,
}

/// Changes to a credential.
#[derive(Debug, Clone, Default)]
pub struct CredentialChange {
    /// A new label.
    pub display_label: Option<String>,
    /// `Some(Some(..))` stores a newly sealed key, `Some(None)` clears the key.
    pub sealed: Option<Option<(Sealed, String)>>,
    /// A new endpoint.
    pub base_url: Option<String>,
}

/// A scope's default model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultRow {
    /// The scope.
    pub scope: Scope,
    /// The credential.
    pub credential_id: String,
    /// The model.
    pub model_id: String,
    /// When it was set.
    pub updated_at: String,
    /// Who set it.
    pub updated_by: Option<String>,
}

/// One priced model of the durable catalogue copy.
#[derive(Debug, Clone, PartialEq)]
pub struct PricingRow {
    /// The pricing key.
    pub pricing_key: String,
    /// What the catalogue said of it.
    pub entry: atelier_llm::CatalogueEntry,
}

const CREDENTIAL_COLUMNS: &str = "id, user_id, provider_id, auth_mode, display_label, ciphertext,
    iv, base_url, key_fingerprint, created_at, last_used_at";

fn credential_from_row(row: &Row<'_>) -> rusqlite::Result<CredentialRow> {
    let mode: String = row.get(3)?;
    let ciphertext: Option<Vec<u8>> = row.get(5)?;
    let iv: Option<Vec<u8>> = row.get(6)?;
    Ok(CredentialRow {
        id: row.get(0)?,
        user_id: row.get(1)?,
        provider_id: row.get(2)?,
        // The CHECK constraint keeps other modes out.
        auth_mode: AuthMode::parse(&mode).unwrap_or(AuthMode::ApiKey),
        display_label: row.get(4)?,
        sealed: match (ciphertext, iv) {
            (Some(ciphertext), Some(iv)) => Some(Sealed { ciphertext, iv }),
            _ => None,
        },
        base_url: row.get(7)?,
        key_fingerprint: row.get(8)?,
        created_at: row.get(9)?,
        last_used_at: row.get(10)?,
    })
}

fn is_constraint(error: &rusqlite::Error, needle: &str) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, Some(message))
        if e.code == ErrorCode::ConstraintViolation && message.contains(needle))
}

impl Store {
    /// Creates a credential for `user_id`; a label already used for the provider is
    /// [`StoreError::DuplicateLabel`].
    pub fn create_credential(
        &self,
        user_id: &str,
        new: &NewCredential,
    ) -> Result<CredentialRow, StoreError> {
        let connection = self.connection()?;
        let (ciphertext, iv, fingerprint) = match &new.sealed {
            Some((sealed, fingerprint)) => (
                Some(sealed.ciphertext.as_slice()),
                Some(sealed.iv.as_slice()),
                Some(fingerprint.as_str()),
            ),
            None => (None, None, None),
        };
        let id: String = connection
            .query_row(
                "INSERT INTO ai_provider_credentials
                   (id, user_id, provider_id, auth_mode, display_label, ciphertext, iv, base_url,
                    key_fingerprint)
                 VALUES (lower(hex(randomblob(16))), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
                params![
                    user_id,
                    new.provider_id,
                    new.auth_mode.as_str(),
                    new.display_label,
                    ciphertext,
                    iv,
                    new.base_url,
                    fingerprint
                ],
                |row| row.get(0),
            )
            .map_err(|error| {
                if is_constraint(&error, "UNIQUE") {
                    StoreError::DuplicateLabel
                } else {
                    StoreError::from(error)
                }
            })?;
        fetch_credential(&connection, user_id, &id)?.ok_or(StoreError::CredentialNotFound)
    }

    /// The user's credentials, newest first.
    pub fn list_credentials(&self, user_id: &str) -> Result<Vec<CredentialRow>, StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare(&format!(
            "SELECT {CREDENTIAL_COLUMNS} FROM ai_provider_credentials
             WHERE user_id = ?1 AND auth_mode IN ('apiKey', 'baseUrl')
             ORDER BY created_at DESC, rowid DESC"
        ))?;
        let rows = statement.query_map([user_id], credential_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The user's credential `id`.
    pub fn credential(&self, user_id: &str, id: &str) -> Result<Option<CredentialRow>, StoreError> {
        fetch_credential(&*self.reading()?, user_id, id)
    }

    /// Applies `change` to the user's credential `id`.
    pub fn update_credential(
        &self,
        user_id: &str,
        id: &str,
        change: &CredentialChange,
    ) -> Result<CredentialRow, StoreError> {
        let connection = self.connection()?;
        let (set_key, ciphertext, iv, fingerprint) = match &change.sealed {
            None => (false, None, None, None),
            Some(None) => (true, None, None, None),
            Some(Some((sealed, fingerprint))) => (
                true,
                Some(sealed.ciphertext.clone()),
                Some(sealed.iv.clone()),
                Some(fingerprint.clone()),
            ),
        };
        let changed = connection
            .execute(
                &format!(
                    "UPDATE ai_provider_credentials SET
                       display_label = coalesce(?3, display_label),
                       base_url = coalesce(?4, base_url),
                       ciphertext = CASE WHEN ?5 THEN ?6 ELSE ciphertext END,
                       iv = CASE WHEN ?5 THEN ?7 ELSE iv END,
                       key_fingerprint = CASE WHEN ?5 THEN ?8 ELSE key_fingerprint END,
                       updated_at = {NOW}
                     WHERE id = ?1 AND user_id = ?2"
                ),
                params![
                    id,
                    user_id,
                    change.display_label,
                    change.base_url,
                    set_key,
                    ciphertext,
                    iv,
                    fingerprint
                ],
            )
            .map_err(|error| {
                if is_constraint(&error, "UNIQUE") {
                    StoreError::DuplicateLabel
                } else {
                    StoreError::from(error)
                }
            })?;
        if changed == 0 {
            return Err(StoreError::CredentialNotFound);
        }
        fetch_credential(&connection, user_id, id)?.ok_or(StoreError::CredentialNotFound)
    }

    /// Deletes the user's credential `id`, detaching the conversations that use it, in one
    /// transaction. A default still pointing at it is [`StoreError::CredentialIsDefault`].
    pub fn delete_credential(&self, user_id: &str, id: &str) -> Result<bool, StoreError> {
        let mut connection = self.connection()?;
        let transaction = connection.transaction()?;
        let exists: Option<i64> = transaction
            .query_row(
                "SELECT 1 FROM ai_provider_credentials WHERE id = ?1 AND user_id = ?2",
                params![id, user_id],
                |row| row.get(0),
            )
            .optional()?;
        if exists.is_none() {
            return Ok(false);
        }
        transaction.execute(
            "UPDATE ai_conversations SET credential_id = NULL WHERE credential_id = ?1",
            [id],
        )?;
        transaction
            .execute("DELETE FROM ai_provider_credentials WHERE id = ?1", [id])
            .map_err(|error| {
                if is_constraint(&error, "FOREIGN KEY") {
                    StoreError::CredentialIsDefault
                } else {
                    StoreError::from(error)
                }
            })?;
        transaction.commit()?;
        Ok(true)
    }

    /// Remembers `label` as what the CMS calls `user_id`, in the writer's next group commit,
    /// without waiting for it; nothing is queued when this process already wrote that label.
    pub fn note_user_label(&self, user_id: &str, label: &str) -> Result<(), StoreError> {
        {
            let mut labels = self.labels.lock().map_err(|_| StoreError::Poisoned)?;
            if labels.get(user_id).is_some_and(|known| known == label) {
                return Ok(());
            }
            labels.insert(user_id.to_owned(), label.to_owned());
        }
        let (user_id, label) = (user_id.to_owned(), label.to_owned());
        self.writer.write_later(move |connection| {
            let noted = connection
                .prepare_cached(
                    "INSERT INTO ai_user_labels (user_id, label) VALUES (?1, ?2) \
                     ON CONFLICT (user_id) DO UPDATE SET label = excluded.label",
                )
                .and_then(|mut statement| statement.execute([&user_id, &label]));
            if let Err(error) = &noted {
                tracing::warn!(%error, user_id = %user_id, "remembering a user's name failed");
            }
            noted.map(drop).map_err(StoreError::from)
        })
    }

    /// Marks credential `id` as used now, in the writer's next group commit, without waiting
    /// for it: the end of a turn does not wait on this bookkeeping, and the writes queued
    /// after it commit with it or after it.
    pub fn touch_credential(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.writer.write_later(move |connection| {
            let touched = connection
                .prepare_cached(&format!(
                    "UPDATE ai_provider_credentials SET last_used_at = {NOW} WHERE id = ?1"
                ))
                .and_then(|mut statement| statement.execute([&id]));
            if let Err(error) = &touched {
                tracing::warn!(%error, credential_id = %id, "marking a credential used failed");
            }
            touched.map(drop).map_err(StoreError::from)
        })
    }

    /// Every scope's default, in scope order.
    pub fn defaults(&self) -> Result<Vec<DefaultRow>, StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare(
            "SELECT scope, credential_id, model_id, updated_at, updated_by FROM ai_defaults",
        )?;
        let rows = statement.query_map([], |row| {
            let scope: String = row.get(0)?;
            Ok(DefaultRow {
                // The CHECK constraint keeps other scopes out.
                scope: Scope::parse(&scope).unwrap_or(Scope::Site),
                credential_id: row.get(1)?,
                model_id: row.get(2)?,
                updated_at: row.get(3)?,
                updated_by: row.get(4)?,
            })
        })?;
        let mut rows: Vec<DefaultRow> = rows.collect::<Result<_, _>>()?;
        rows.sort_by_key(|row| Scope::ALL.iter().position(|s| *s == row.scope));
        Ok(rows)
    }

    /// Sets `scope`'s default; an unknown credential is [`StoreError::CredentialNotFound`].
    pub fn set_default(
        &self,
        scope: Scope,
        credential_id: &str,
        model_id: &str,
        updated_by: &str,
    ) -> Result<DefaultRow, StoreError> {
        let connection = self.connection()?;
        connection
            .query_row(
                &format!(
                    "INSERT INTO ai_defaults (scope, credential_id, model_id, updated_by)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (scope) DO UPDATE SET credential_id = excluded.credential_id,
                       model_id = excluded.model_id, updated_by = excluded.updated_by,
                       updated_at = {NOW}
                     RETURNING updated_at"
                ),
                params![scope.as_str(), credential_id, model_id, updated_by],
                |row| row.get::<_, String>(0),
            )
            .map(|updated_at| DefaultRow {
                scope,
                credential_id: credential_id.to_owned(),
                model_id: model_id.to_owned(),
                updated_at,
                updated_by: Some(updated_by.to_owned()),
            })
            .map_err(|error| {
                if is_constraint(&error, "FOREIGN KEY") {
                    StoreError::CredentialNotFound
                } else {
                    StoreError::from(error)
                }
            })
    }

    /// Sets `model_id` of `credential_id` as the default of every scope that has none, in one
    /// transaction; returns the scopes it filled.
    pub fn fill_empty_defaults(
        &self,
        credential_id: &str,
        model_id: &str,
        updated_by: &str,
    ) -> Result<Vec<Scope>, StoreError> {
        let mut connection = self.connection()?;
        let transaction = connection.transaction()?;
        let mut filled = Vec::new();
        for scope in Scope::ALL {
            let inserted = transaction.execute(
                "INSERT INTO ai_defaults (scope, credential_id, model_id, updated_by)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (scope) DO NOTHING",
                params![scope.as_str(), credential_id, model_id, updated_by],
            )?;
            if inserted > 0 {
                filled.push(scope);
            }
        }
        transaction.commit()?;
        Ok(filled)
    }

    /// The scopes that have no default.
    pub fn scopes_without_default(&self) -> Result<Vec<Scope>, StoreError> {
        let set: Vec<Scope> = self.defaults()?.into_iter().map(|row| row.scope).collect();
        Ok(Scope::ALL
            .into_iter()
            .filter(|scope| !set.contains(scope))
            .collect())
    }

    /// Clears `scope`'s default; `false` when it had none.
    pub fn clear_default(&self, scope: Scope) -> Result<bool, StoreError> {
        let changed = self
            .connection()?
            .execute("DELETE FROM ai_defaults WHERE scope = ?1", [scope.as_str()])?;
        Ok(changed > 0)
    }

    /// The durable copy of the pricing catalogue.
    pub fn pricing(&self) -> Result<Vec<PricingRow>, StoreError> {
        let connection = self.reading()?;
        let mut statement = connection.prepare(
            "SELECT pricing_key, input_per_mtok, output_per_mtok, cache_read_per_mtok,
                    cache_write_per_mtok, context_window FROM ai_model_pricing",
        )?;
        let rows = statement.query_map([], |row| {
            Ok(PricingRow {
                pricing_key: row.get(0)?,
                entry: atelier_llm::CatalogueEntry {
                    prices: atelier_llm::ModelPrice {
                        input_per_mtok: row.get(1)?,
                        output_per_mtok: row.get(2)?,
                        cache_read_per_mtok: row.get(3)?,
                        cache_write_per_mtok: row.get(4)?,
                    },
                    context_window: row
                        .get::<_, Option<i64>>(5)?
                        .and_then(|n| u64::try_from(n).ok()),
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Replaces the durable pricing copy wholesale, in one transaction.
    pub fn replace_pricing(
        &self,
        catalogue: &atelier_llm::PricingCatalogue,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        let transaction = connection.transaction()?;
        transaction.execute("DELETE FROM ai_model_pricing", [])?;
        {
            let mut insert = transaction.prepare(
                "INSERT INTO ai_model_pricing (pricing_key, input_per_mtok, output_per_mtok,
                   cache_read_per_mtok, cache_write_per_mtok, context_window)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for (key, entry) in catalogue {
                insert.execute(params![
                    key,
                    entry.prices.input_per_mtok,
                    entry.prices.output_per_mtok,
                    entry.prices.cache_read_per_mtok,
                    entry.prices.cache_write_per_mtok,
                    entry.context_window.and_then(|n| i64::try_from(n).ok()),
                ])?;
            }
        }
        transaction.commit()?;
        Ok(())
    }
}

fn fetch_credential(
    connection: &rusqlite::Connection,
    user_id: &str,
    id: &str,
) -> Result<Option<CredentialRow>, StoreError> {
    Ok(connection
        .query_row(
            &format!(
                "SELECT {CREDENTIAL_COLUMNS} FROM ai_provider_credentials
                 WHERE id = ?1 AND user_id = ?2"
            ),
            params![id, user_id],
            credential_from_row,
        )
        .optional()?)
}
