//! Provider credentials, per user and gated by `ai.providers.manage`:
//! the auth shape follows from the provider, secrets are sealed under the master key before
//! they reach SQLite, and no answer ever carries one. A new credential seeds the defaults of
//! every scope that has none from its live catalogue, best-effort.

use std::sync::Arc;

use atelier_http::{json_response, Request, Response};
use atelier_llm::{provider_label, ModelListError, ProviderModel};
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::record;
use crate::caller::{Caller, Capability};
use crate::conversations::read_json;
use crate::error::ApiError;
use crate::provider_ids::provider_kind;
use crate::providers::{auth_mode_of, Credentials, ResolvedCredential, Services};
use crate::state::{blocking, State};
use crate::store::events::{AuditEvent, CredentialFacts, CredentialField, TestOutcome};
use crate::store::{AuthMode, CredentialChange, CredentialRow, NewCredential};

/// Credential bodies are small.
const BODY_LIMIT: usize = 64 * 1024;

/// The longest label, key or URL accepted.
const MAX_FIELD_LEN: usize = 4096;

/// A credential as the settings screen sees it (`CredentialView`): never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialView {
    /// Its id.
    pub id: String,
    /// The provider.
    pub provider_id: String,
    /// How it authenticates.
    pub auth_mode: AuthMode,
    /// The label.
    pub display_label: String,
    /// The endpoint of a base-URL credential.
    pub base_url: Option<String>,
    /// Whether the stored secret opens under the current master key.
    pub key_fingerprint_current: bool,
    /// When it was created.
    pub created_at: String,
    /// When a turn last used it.
    pub last_used_at: Option<String>,
}

impl CredentialView {
    /// The view of `row` under `credentials`' master key.
    pub fn new(row: CredentialRow, credentials: &Credentials) -> Self {
        CredentialView {
            key_fingerprint_current: credentials
                .fingerprint_current(row.key_fingerprint.as_deref()),
            id: row.id,
            provider_id: row.provider_id,
            auth_mode: row.auth_mode,
            display_label: row.display_label,
            base_url: row.base_url,
            created_at: row.created_at,
            last_used_at: row.last_used_at,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody {
    provider_id: String,
    auth_mode: String,
    display_label: String,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    base_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateBody {
    #[serde(default)]
    display_label: Option<String>,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    base_url: Option<String>,
}

/// An `http`/`https` URL with a host, without credentials in it.
fn check_base_url(url: &str) -> Result<(), ApiError> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").ok_or(ApiError::BadBaseUrl)?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let ok = matches!(scheme, "http" | "https")
        && !host.is_empty()
        && !host.contains('@')
        && !url.chars().any(char::is_whitespace);
    ok.then_some(()).ok_or(ApiError::BadBaseUrl)
}

fn field_ok(value: &str) -> bool {
    !value.is_empty() && value.len() <= MAX_FIELD_LEN
}

/// `GET /credentials`.
pub(crate) async fn list(state: &State, caller: &Caller) -> Result<Response, ApiError> {
    caller.require(Capability::ProvidersManage)?;
    let user = caller.user_id.clone();
    let rows = blocking(&state.store, move |store| store.list_credentials(&user)).await?;
    let credentials: Vec<CredentialView> = rows
        .into_iter()
        .map(|row| CredentialView::new(row, &state.services.credentials))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "credentials": credentials }),
    ))
}

/// `POST /credentials`.
pub(crate) async fn create(
    state: &State,
    caller: &Caller,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Capability::ProvidersManage)?;
    let body: CreateBody = read_json(request, BODY_LIMIT).await?;
    let kind = provider_kind(&body.provider_id).ok_or(ApiError::InvalidBody)?;
    let expected = auth_mode_of(kind);
    let mode = match body.auth_mode.as_str() {
        "apiKey" => AuthMode::ApiKey,
        "baseUrl" => AuthMode::BaseUrl,
        _ => return Err(ApiError::InvalidBody),
    };
    if mode != expected {
        return Err(ApiError::WrongAuthMode {
            provider: provider_label(kind),
            expected: expected.as_str(),
        });
    }
    if !field_ok(&body.display_label) {
        return Err(ApiError::InvalidBody);
    }
    let api_key = body.api_key.filter(|key| !key.is_empty());
    let base_url = match mode {
        AuthMode::ApiKey => {
            if body.base_url.is_some() {
                return Err(ApiError::InvalidBody);
            }
            if !api_key.as_deref().is_some_and(field_ok) {
                return Err(ApiError::InvalidBody);
            }
            None
        }
        AuthMode::BaseUrl => {
            let url = body
                .base_url
                .filter(|u| field_ok(u))
                .ok_or(ApiError::InvalidBody)?;
            check_base_url(&url)?;
            if api_key.as_deref().is_some_and(|key| !field_ok(key)) {
                return Err(ApiError::InvalidBody);
            }
            Some(url.trim().to_owned())
        }
    };
    let sealed = match api_key {
        None => None,
        Some(key) => {
            let master = state
                .services
                .credentials
                .master_key()
                .ok_or(ApiError::EncryptionNotConfigured)?;
            let sealed = master
                .seal(&key)
                .map_err(|_| ApiError::CredentialCreateFailed)?;
            Some((sealed, master.fingerprint().to_owned()))
        }
    };
    let new = NewCredential {
        provider_id: body.provider_id.clone(),
        auth_mode: mode,
        display_label: body.display_label.clone(),
        sealed,
        base_url,
    };
    let user = caller.user_id.clone();
    let row = blocking(&state.store, move |store| {
        store.create_credential(&user, &new)
    })
    .await
    .map_err(|error| match error {
        ApiError::DuplicateCredential(_) => {
            ApiError::DuplicateCredential(body.display_label.clone())
        }
        ApiError::Internal(detail) => {
            tracing::error!(%detail, "creating a credential failed");
            ApiError::CredentialCreateFailed
        }
        other => other,
    })?;
    let created = AuditEvent::CredentialCreated {
        credential: CredentialFacts::from(&row),
        auth_mode: row.auth_mode,
    };
    record(&state.store, caller, created).await;
    seed_empty_defaults(&state.services, caller, &row).await;
    let view = CredentialView::new(row, &state.services.credentials);
    Ok(json_response(
        StatusCode::CREATED,
        &json!({ "credential": view }),
    ))
}

/// Picks the auto-default of a catalogue: the first live model of the smartest tier, else the
/// first live model; built-in fallback suggestions are never picked.
pub fn auto_default_model(models: &[ProviderModel]) -> Option<&ProviderModel> {
    let live: Vec<&ProviderModel> = models.iter().filter(|m| m.is_live()).collect();
    live.iter()
        .find(|m| m.tier == Some(atelier_llm::ModelTier::Smartest))
        .or(live.first())
        .copied()
}

/// Sets a fresh credential as the default of every scope that has none, with the smartest
/// model its live catalogue lists. Silent on any failure: the credential stays created.
async fn seed_empty_defaults(services: &Services, caller: &Caller, row: &CredentialRow) {
    let empty = match blocking(&services.store, |store| store.scopes_without_default()).await {
        Ok(empty) if !empty.is_empty() => empty,
        Ok(_) => return,
        Err(error) => {
            tracing::warn!(%error, "auto-defaults skipped: defaults unreadable");
            return;
        }
    };
    let resolved = match services.credentials.resolve(row) {
        Ok(resolved) => resolved,
        Err(error) => {
            tracing::warn!(%error, "auto-defaults skipped");
            return;
        }
    };
    let models = match live_models(services, &resolved).await {
        Ok(models) => models,
        Err(error) => {
            tracing::info!(%error, "auto-defaults skipped: the catalogue could not be read");
            return;
        }
    };
    let Some(model) = auto_default_model(&models) else {
        tracing::info!(credential_id = %row.id, "auto-defaults skipped: no live model");
        return;
    };
    let (credential_id, model_id, user) =
        (row.id.clone(), model.id.clone(), caller.user_id.clone());
    match blocking(&services.store, move |store| {
        store.fill_empty_defaults(&credential_id, &model_id, &user)
    })
    .await
    {
        Ok(filled) => {
            for scope in filled.into_iter().filter(|s| empty.contains(s)) {
                let seeded = AuditEvent::DefaultUpdated {
                    scope,
                    credential_id: row.id.clone(),
                    model_id: model.id.clone(),
                    auto: true,
                };
                record(&services.store, caller, seeded).await;
            }
        }
        Err(error) => tracing::warn!(%error, "auto-defaults could not be stored"),
    }
}

async fn live_models(
    services: &Services,
    resolved: &ResolvedCredential,
) -> Result<Arc<Vec<ProviderModel>>, ModelListError> {
    services
        .catalogue
        .list(resolved.kind, &resolved.endpoint)
        .await
}

async fn owned(state: &State, caller: &Caller, id: &str) -> Result<CredentialRow, ApiError> {
    let (user, id) = (caller.user_id.clone(), id.to_owned());
    blocking(&state.store, move |store| store.credential(&user, &id))
        .await?
        .ok_or(ApiError::CredentialNotFound)
}

/// `PUT /credentials/:id`.
pub(crate) async fn update(
    state: &State,
    caller: &Caller,
    id: String,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Capability::ProvidersManage)?;
    let body: UpdateBody = read_json(request, BODY_LIMIT).await?;
    let row = owned(state, caller, &id).await?;
    if body.display_label.as_deref().is_some_and(|l| !field_ok(l)) {
        return Err(ApiError::InvalidBody);
    }
    // Every field the body names counts as touched, even one that changes nothing.
    let touched: Vec<CredentialField> = [
        (body.display_label.is_some(), CredentialField::DisplayLabel),
        (body.api_key.is_some(), CredentialField::ApiKey),
        (body.base_url.is_some(), CredentialField::BaseUrl),
    ]
    .into_iter()
    .filter_map(|(named, field)| named.then_some(field))
    .collect();
    let mut change = CredentialChange {
        display_label: body.display_label.clone(),
        ..CredentialChange::default()
    };
    if let Some(url) = body.base_url.filter(|u| !u.is_empty()) {
        if row.auth_mode != AuthMode::BaseUrl || url.len() > MAX_FIELD_LEN {
            return Err(ApiError::InvalidBody);
        }
        check_base_url(&url)?;
        change.base_url = Some(url.trim().to_owned());
    }
    match body.api_key {
        None => {}
        Some(key) if key.is_empty() => {
            if row.auth_mode == AuthMode::ApiKey {
                return Err(ApiError::EmptyApiKey);
            }
            change.sealed = Some(None);
        }
        Some(key) => {
            if key.len() > MAX_FIELD_LEN {
                return Err(ApiError::InvalidBody);
            }
            let master = state
                .services
                .credentials
                .master_key()
                .ok_or(ApiError::EncryptionNotConfigured)?;
            let sealed = master
                .seal(&key)
                .map_err(|_| ApiError::Internal("sealing a credential failed".to_owned()))?;
            change.sealed = Some(Some((sealed, master.fingerprint().to_owned())));
        }
    }
    let user = caller.user_id.clone();
    let label = body.display_label.clone().unwrap_or_default();
    let updated = blocking(&state.store, move |store| {
        store.update_credential(&user, &id, &change)
    })
    .await
    .map_err(|error| match error {
        ApiError::DuplicateCredential(_) => ApiError::DuplicateCredential(label.clone()),
        other => other,
    })?;
    let event = AuditEvent::CredentialUpdated {
        credential: CredentialFacts::from(&updated),
        fields_touched: touched,
    };
    record(&state.store, caller, event).await;
    let view = CredentialView::new(updated, &state.services.credentials);
    Ok(json_response(
        StatusCode::OK,
        &json!({ "credential": view }),
    ))
}

/// `DELETE /credentials/:id`.
pub(crate) async fn delete(
    state: &State,
    caller: &Caller,
    id: String,
) -> Result<Response, ApiError> {
    caller.require(Capability::ProvidersManage)?;
    let row = owned(state, caller, &id).await?;
    let user = caller.user_id.clone();
    let deleted = blocking(&state.store, move |store| {
        store.delete_credential(&user, &id)
    })
    .await?;
    if !deleted {
        return Err(ApiError::CredentialNotFound);
    }
    let deleted = AuditEvent::CredentialDeleted(CredentialFacts::from(&row));
    record(&state.store, caller, deleted).await;
    Ok(json_response(StatusCode::OK, &json!({ "ok": true })))
}

/// `POST /credentials/:id/test`: lists the credential's live models, asking the provider now;
/// every failure is a 200 `{ok:false}` naming it.
pub(crate) async fn test(state: &State, caller: &Caller, id: String) -> Result<Response, ApiError> {
    caller.require(Capability::ProvidersManage)?;
    let row = owned(state, caller, &id).await?;
    let outcome = match state.services.credentials.resolve(&row) {
        Err(error) => Err(error.to_string()),
        Ok(resolved) => match live_models(&state.services, &resolved).await {
            Err(error) => Err(error.to_string()),
            Ok(models) => {
                let live = models.iter().filter(|m| m.is_live()).count();
                if live == 0 {
                    Err(format!(
                        "No live models were returned for {}. Check the credential and provider endpoint.",
                        provider_label(resolved.kind)
                    ))
                } else {
                    Ok(live)
                }
            }
        },
    };
    let (body, outcome) = match outcome {
        Ok(count) => (
            json!({"ok": true, "modelCount": count}),
            TestOutcome::Listed(count),
        ),
        Err(message) => (
            json!({"ok": false, "error": message}),
            TestOutcome::Failed(message),
        ),
    };
    let tested = AuditEvent::CredentialTested {
        credential: CredentialFacts::from(&row),
        outcome,
    };
    record(&state.store, caller, tested).await;
    Ok(json_response(StatusCode::OK, &body))
}
