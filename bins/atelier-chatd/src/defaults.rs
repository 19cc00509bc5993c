//! Per-scope defaults: one row per scope, site-wide; read with
//! `ai.chat`, changed with `ai.providers.manage`.

use atelier_http::{json_response, Request, Response};
use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::audit::record;
use crate::caller::{Caller, Capability};
use crate::conversations::read_json;
use crate::error::ApiError;
use crate::state::{blocking, State};
use crate::store::events::AuditEvent;
use crate::store::Scope;

const BODY_LIMIT: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetBody {
    credential_id: String,
    model_id: String,
}

/// `GET /defaults`: `{defaults: {<scope>: {credentialId, modelId}}}` for the scopes that have
/// one.
pub(crate) async fn list(state: &State, caller: &Caller) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let rows = blocking(&state.store, |store| store.defaults()).await?;
    let defaults: Map<String, Value> = rows
        .into_iter()
        .map(|row| {
            (
                row.scope.as_str().to_owned(),
                json!({"credentialId": row.credential_id, "modelId": row.model_id}),
            )
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "defaults": defaults }),
    ))
}

/// `PUT` and `DELETE /defaults/:scope`, its method and scope checked by the router before the
/// session (as the reference orders them): `ai.providers.manage`, then the change.
pub(crate) async fn scoped(
    state: &State,
    caller: &Caller,
    method: &Method,
    scope: Scope,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Capability::ProvidersManage)?;
    if *method == Method::DELETE {
        blocking(&state.store, move |store| store.clear_default(scope)).await?;
        record(&state.store, caller, AuditEvent::DefaultCleared { scope }).await;
        let mut response = Response::new(atelier_http::full_body(bytes::Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        return Ok(response);
    }
    let body: SetBody = read_json(request, BODY_LIMIT).await?;
    if body.credential_id.is_empty() || body.model_id.is_empty() {
        return Err(ApiError::InvalidBody);
    }
    let user = caller.user_id.clone();
    let row = blocking(&state.store, move |store| {
        store.set_default(scope, &body.credential_id, &body.model_id, &user)
    })
    .await
    .map_err(|error| match error {
        ApiError::CredentialNotFound => ApiError::DefaultCredentialMissing,
        other => other,
    })?;
    let updated = AuditEvent::DefaultUpdated {
        scope,
        credential_id: row.credential_id.clone(),
        model_id: row.model_id.clone(),
        auto: false,
    };
    record(&state.store, caller, updated).await;
    Ok(json_response(StatusCode::OK, &json!({ "default": row })))
}
