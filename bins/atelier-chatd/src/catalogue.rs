//! `GET /providers/:id/models`: a provider's live catalogue through
//! the caller's credential (or none), Anthropic and OpenAI models enriched with list prices and
//! context windows from the pricing catalogue. The request's cancellation reaches the provider
//! call: the listing stops once nobody waits for it.

use atelier_http::{json_response, Response};
use atelier_llm::{ListedPrice, ProviderKind, ProviderModel};
use hyper::StatusCode;
use serde_json::json;

use crate::caller::{Caller, Capability};
use crate::error::ApiError;
use crate::provider_ids::provider_kind;
use crate::state::{blocking, State};

/// The `credentialId` of a query string, percent-decoding nothing: ids are hex.
fn credential_param(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("credentialId="))
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// `GET /providers/:id/models[?credentialId=]`.
pub(crate) async fn models(
    state: &State,
    caller: &Caller,
    provider_id: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let kind = provider_kind(provider_id)
        .ok_or_else(|| ApiError::UnknownProvider(provider_id.to_owned()))?;
    let credentials = &state.services.credentials;
    let endpoint = match credential_param(query) {
        Some(id) => {
            let user = caller.user_id.clone();
            let row = blocking(&state.store, move |store| store.credential(&user, &id))
                .await?
                .ok_or(ApiError::CredentialNotFound)?;
            credentials
                .resolve(&row)
                .map_err(|error| ApiError::CredentialUnusable(error.to_string()))?
                .endpoint
        }
        None => credentials.placeholder(kind),
    };
    let listed = state
        .services
        .catalogue
        .list(kind, &endpoint)
        .await
        .map_err(|error| ApiError::Internal(error.to_string()))?;
    let mut models: Vec<ProviderModel> = listed.as_ref().clone();
    if matches!(kind, ProviderKind::Anthropic | ProviderKind::OpenAi) {
        let catalogue = state.services.pricing.catalogue().await;
        for model in &mut models {
            if let Some(entry) = catalogue.get(&atelier_llm::pricing_key(&model.id)) {
                model.pricing = Some(ListedPrice {
                    input_per_mtok: entry.prices.input_per_mtok,
                    output_per_mtok: entry.prices.output_per_mtok,
                });
                if entry.context_window.is_some() {
                    model.context_window = entry.context_window;
                }
            }
        }
    }
    Ok(json_response(StatusCode::OK, &json!({ "models": models })))
}
