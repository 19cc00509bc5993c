//! The live model catalogue over loopback HTTP: each provider's listing request, Ollama's
//! capability lookups in batches of six, and the catalogue's deadline, sharing of concurrent
//! listings, no listing kept once it ended, and forwarded cancellation.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_llm::{
    list_models, CatalogueSource, Endpoint, ModelCatalogue, ModelListError, ProviderKind,
};
use hyper::StatusCode;
use serde_json::{json, Value};

/// What the test server saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    api_key: Option<String>,
    body: Value,
}

#[derive(Default)]
struct Server {
    seen: Mutex<Vec<Seen>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    dropped: AtomicBool,
}

/// A loopback server answering `answer(path, body)` after `delay`.
async fn serve<F>(delay: Duration, answer: F) -> (String, Arc<Server>)
where
    F: Fn(&str, &Value) -> (StatusCode, Value) + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = Arc::new(Server::default());
    let answer = Arc::new(answer);
    let state = Arc::clone(&server);
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request: atelier_http::Request| {
            let (state, answer) = (Arc::clone(&state), Arc::clone(&answer));
            async move {
                let header = |name: &str| {
                    request
                        .headers()
                        .get(name)
                        .map(|v| v.to_str().unwrap().to_owned())
                };
                let mut seen = Seen {
                    method: request.method().to_string(),
                    path: request
                        .uri()
                        .path_and_query()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    authorization: header("authorization"),
                    api_key: header("x-api-key"),
                    body: Value::Null,
                };
                let bytes = atelier_http::read_body(request.into_body(), 1 << 20)
                    .await
                    .unwrap();
                seen.body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                state.seen.lock().unwrap().push(seen.clone());
                let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                state.max_in_flight.fetch_max(now, Ordering::SeqCst);
                // Notices a client that went away while the answer was pending.
                struct Gone(Arc<Server>, bool);
                impl Drop for Gone {
                    fn drop(&mut self) {
                        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
                        if !self.1 {
                            self.0.dropped.store(true, Ordering::SeqCst);
                        }
                    }
                }
                let mut guard = Gone(Arc::clone(&state), false);
                tokio::time::sleep(delay).await;
                guard.1 = true;
                let (status, value) = answer(&seen.path, &seen.body);
                atelier_http::json_response(status, &value)
            }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    (base, server)
}

fn endpoint(base: &str, key: Option<&str>) -> Endpoint {
    Endpoint::new(reqwest::Client::new(), base, key.map(str::to_owned))
}

#[tokio::test]
async fn each_provider_lists_from_its_own_endpoint_with_its_own_auth() {
    let (base, server) = serve(Duration::ZERO, |path, _| {
        let body = match path {
            "/v1/models?limit=1000" => json!({"data": [{"id": "claude-opus-4-8"}]}),
            "/v1/models" => json!({"data": [{"id": "gpt-4o"}, {"id": "tts-1"}]}),
            _ => json!({}),
        };
        (StatusCode::OK, body)
    })
    .await;
    let anthropic = list_models(ProviderKind::Anthropic, &endpoint(&base, Some("sk-ant")))
        .await
        .unwrap();
    assert_eq!(anthropic[0].id, "claude-opus-4-8");
    let openai = list_models(ProviderKind::OpenAi, &endpoint(&base, Some("sk-oa")))
        .await
        .unwrap();
    assert_eq!(openai.len(), 1, "{openai:?}");
    // A Custom Provider base ending in /v1 is normalised, and its key is optional.
    let custom = list_models(
        ProviderKind::OpenAiCompatible,
        &endpoint(&format!("{base}/v1/"), None),
    )
    .await
    .unwrap();
    assert_eq!(custom.len(), 2);
    assert_eq!(custom[0].catalogue_source, Some(CatalogueSource::Live));
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen[0].path, "/v1/models?limit=1000");
    assert_eq!(seen[0].api_key.as_deref(), Some("sk-ant"));
    assert_eq!(seen[0].authorization, None);
    assert_eq!(seen[1].authorization.as_deref(), Some("Bearer sk-oa"));
    assert_eq!(seen[2].path, "/v1/models");
    assert_eq!(seen[2].authorization, None);
    // Without a key, Anthropic and OpenAI list nothing and ask nothing.
    assert!(list_models(ProviderKind::Anthropic, &endpoint(&base, None))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(server.seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_refusing_provider_is_an_error_but_custom_and_ollama_degrade() {
    let (base, _server) = serve(Duration::ZERO, |_, _| {
        (StatusCode::UNAUTHORIZED, json!({"error": "no"}))
    })
    .await;
    let refused = list_models(ProviderKind::OpenRouter, &endpoint(&base, Some("k"))).await;
    assert_eq!(
        refused,
        Err(ModelListError::Status {
            label: "OpenRouter",
            status: 401
        })
    );
    let custom = list_models(ProviderKind::OpenAiCompatible, &endpoint(&base, None))
        .await
        .unwrap();
    assert!(custom.is_empty());
    let ollama = list_models(ProviderKind::Ollama, &endpoint(&base, None))
        .await
        .unwrap();
    assert!(ollama
        .iter()
        .all(|m| m.catalogue_source == Some(CatalogueSource::Fallback)));
}

#[tokio::test]
async fn ollama_looks_capabilities_up_in_batches_of_six() {
    let (base, server) = serve(Duration::from_millis(30), |path, body| match path {
        "/api/tags" => (
            StatusCode::OK,
            json!({"models": (0..14).map(|n| json!({"name": format!("m{n}")})).collect::<Vec<_>>()}),
        ),
        "/api/show" if body["model"] == "m3" => (StatusCode::NOT_FOUND, json!({})),
        "/api/show" if body["model"] == "m1" => (
            StatusCode::OK,
            json!({"capabilities": ["completion", "vision"]}),
        ),
        "/api/show" => (StatusCode::OK, json!({"capabilities": ["completion", "tools"]})),
        _ => (StatusCode::NOT_FOUND, json!({})),
    })
    .await;
    let models = list_models(ProviderKind::Ollama, &endpoint(&base, Some("proxy-key")))
        .await
        .unwrap();
    assert_eq!(models.len(), 14);
    assert!(models
        .iter()
        .all(|m| m.catalogue_source == Some(CatalogueSource::Live)));
    assert!(models[1].capabilities.vision_input && !models[1].capabilities.tool_calling);
    // A failed lookup: tools assumed, vision not.
    assert!(models[3].capabilities.tool_calling && !models[3].capabilities.vision_input);
    assert!(models[0].capabilities.tool_calling && !models[0].capabilities.vision_input);
    assert_eq!(server.max_in_flight.load(Ordering::SeqCst), 6);
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen.len(), 15);
    assert!(seen[1..]
        .iter()
        .all(|s| s.method == "POST" && s.authorization.as_deref() == Some("Bearer proxy-key")));
}

#[tokio::test]
async fn the_catalogue_shares_concurrent_listings_keeps_none_and_bounds_them() {
    let (base, server) = serve(Duration::from_millis(100), |_, _| {
        (StatusCode::OK, json!({"data": [{"id": "a/b"}]}))
    })
    .await;
    let catalogue = ModelCatalogue::default();
    let at = endpoint(&base, Some("k1"));
    let (first, second) = tokio::join!(
        catalogue.list(ProviderKind::OpenRouter, &at),
        catalogue.list(ProviderKind::OpenRouter, &at)
    );
    assert_eq!(first.unwrap(), second.unwrap());
    assert_eq!(server.seen.lock().unwrap().len(), 1, "shared");
    // A listing that has ended is not kept: the next caller asks the provider again.
    catalogue.list(ProviderKind::OpenRouter, &at).await.unwrap();
    assert_eq!(server.seen.lock().unwrap().len(), 2, "asked again");
    catalogue
        .list(ProviderKind::OpenRouter, &endpoint(&base, Some("k2")))
        .await
        .unwrap();
    assert_eq!(server.seen.lock().unwrap().len(), 3);

    let hurried = ModelCatalogue::default().with_timeout(Duration::from_millis(20));
    assert_eq!(
        hurried.list(ProviderKind::OpenRouter, &at).await,
        Err(ModelListError::TimedOut)
    );
}

#[tokio::test]
async fn a_fallback_or_empty_listing_is_not_kept_once_the_provider_answers() {
    let up = Arc::new(AtomicBool::new(false));
    let answering = Arc::clone(&up);
    let (base, _server) = serve(Duration::ZERO, move |path, _| {
        let up = answering.load(Ordering::SeqCst);
        match path {
            "/api/tags" if up => (StatusCode::OK, json!({"models": [{"name": "qwen3"}]})),
            "/api/tags" => (StatusCode::SERVICE_UNAVAILABLE, json!({})),
            "/api/show" => (StatusCode::OK, json!({"capabilities": ["completion"]})),
            "/v1/models" if up => (StatusCode::OK, json!({"data": [{"id": "local"}]})),
            "/v1/models" => (StatusCode::OK, json!({"data": []})),
            _ => (StatusCode::NOT_FOUND, json!({})),
        }
    })
    .await;
    let catalogue = ModelCatalogue::default();
    let at = endpoint(&base, None);
    let ids = |models: &[atelier_llm::ProviderModel]| -> Vec<String> {
        models.iter().map(|m| m.id.clone()).collect()
    };
    // Ollama down: its built-in suggestions; a Custom Provider listing nothing: empty.
    let fallback = catalogue.list(ProviderKind::Ollama, &at).await.unwrap();
    assert!(!fallback.is_empty() && fallback.iter().all(|m| !m.is_live()));
    let empty = catalogue
        .list(ProviderKind::OpenAiCompatible, &at)
        .await
        .unwrap();
    assert!(empty.is_empty());
    // Both answer now, and the very next listing says so.
    up.store(true, Ordering::SeqCst);
    let live = catalogue.list(ProviderKind::Ollama, &at).await.unwrap();
    assert_eq!(ids(&live), ["qwen3"]);
    assert!(live[0].is_live());
    let listed = catalogue
        .list(ProviderKind::OpenAiCompatible, &at)
        .await
        .unwrap();
    assert_eq!(ids(&listed), ["local"]);
}

#[tokio::test]
async fn a_caller_that_goes_away_cancels_the_provider_request() {
    let (base, server) = serve(Duration::from_secs(5), |_, _| {
        (StatusCode::OK, json!({"data": []}))
    })
    .await;
    let catalogue = ModelCatalogue::default();
    let at = endpoint(&base, Some("k"));
    let waiting = tokio::time::timeout(
        Duration::from_millis(200),
        catalogue.list(ProviderKind::OpenRouter, &at),
    )
    .await;
    assert!(waiting.is_err());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while !server.dropped.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the provider request was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing was kept, and the next caller starts afresh.
    let again = tokio::time::timeout(
        Duration::from_millis(100),
        catalogue.list(ProviderKind::OpenRouter, &at),
    )
    .await;
    assert!(again.is_err());
    assert_eq!(server.seen.lock().unwrap().len(), 2);
}
