//! Model capability lookups against the scripted provider: what each provider's endpoint
//! answers, one request per key while a lookup is in flight, the 5-minute cache, and the
//! fail-closed answer on errors and timeouts (never cached).

use std::sync::Arc;
use std::time::Duration;

use atelier_llm::{CapabilityResolver, Endpoint, ModelCapabilities, ProviderKind};
use serde_json::{json, Value};

use crate::scripted;

use scripted::{start, Reply, Script, ScriptedProvider};

fn json_reply(body: Value) -> Reply {
    Reply::Error { status: 200, body }
}

async fn provider(reply: Reply) -> ScriptedProvider {
    start(Script::new(reply, false, false)).await
}

fn endpoint(provider: &ScriptedProvider, key: Option<&str>) -> Endpoint {
    Endpoint::new(
        reqwest::Client::new(),
        provider.base_url.clone(),
        key.map(str::to_owned),
    )
}

fn ollama_show(capabilities: &[&str]) -> Value {
    json!({"capabilities": capabilities, "model_info": {"llama.context_length": 8192}})
}

#[tokio::test]
async fn ollama_is_asked_through_api_show_with_the_model() {
    let ollama = provider(json_reply(ollama_show(&["completion", "tools"]))).await;
    let resolver = CapabilityResolver::new(ProviderKind::Ollama);
    let caps = resolver
        .resolve(&endpoint(&ollama, Some("k")), "llama3.3")
        .await;
    assert!(caps.tool_calling);
    assert!(!caps.vision_input);
    assert_eq!(caps.context_window, Some(8192));
    assert_eq!(ollama.paths(), ["/api/show"]);
    assert_eq!(ollama.bodies(), [json!({"model": "llama3.3"})]);
    let auth = ollama.received.lock().unwrap()[0].headers["authorization"].clone();
    assert_eq!(auth, "Bearer k");
}

#[tokio::test]
async fn openrouter_is_asked_for_its_catalogue() {
    let catalogue = json!({"data": [{"id": "vendor/seeing", "context_length": 1000,
        "architecture": {"input_modalities": ["image", "text"]},
        "supported_parameters": ["tools"]}]});
    let openrouter = provider(json_reply(catalogue)).await;
    let resolver = CapabilityResolver::new(ProviderKind::OpenRouter);
    let endpoint = endpoint(&openrouter, None);
    let seeing = resolver.resolve(&endpoint, "vendor/seeing").await;
    assert!(seeing.vision_input && seeing.tool_calling);
    assert_eq!(seeing.context_window, Some(1000));
    let unlisted = resolver.resolve(&endpoint, "vendor/unlisted").await;
    assert!(!unlisted.vision_input);
    assert_eq!(openrouter.paths(), ["/v1/models", "/v1/models"]);
}

/// Each provider's answer before any lookup, as the editor's model picker has always shown
/// it: (tools, vision, images in tool results, prompt cache, streaming).
#[test]
fn static_capabilities_are_the_originals() {
    let cases = [
        (
            "anthropic",
            ProviderKind::Anthropic,
            [true, true, true, true, true],
        ),
        (
            "openai",
            ProviderKind::OpenAi,
            [true, true, false, false, true],
        ),
        (
            "openrouter",
            ProviderKind::OpenRouter,
            [true, false, false, false, true],
        ),
        (
            "ollama",
            ProviderKind::Ollama,
            [true, false, false, false, true],
        ),
        (
            "openai-compatible",
            ProviderKind::OpenAiCompatible,
            [true, false, false, false, true],
        ),
    ];
    for (name, kind, want) in cases {
        let c = kind.static_capabilities();
        let got = [
            c.tool_calling,
            c.vision_input,
            c.tool_result_images,
            c.prompt_cache,
            c.streaming,
        ];
        assert_eq!(got, want, "{name}");
        assert_eq!(c.context_window, None, "{name}");
    }
}

#[tokio::test]
async fn providers_without_a_lookup_are_never_asked() {
    let nobody = provider(json_reply(json!({}))).await;
    for (kind, vision) in [
        (ProviderKind::Anthropic, true),
        (ProviderKind::OpenAi, true),
        (ProviderKind::OpenAiCompatible, false),
    ] {
        let caps = CapabilityResolver::new(kind)
            .resolve(&endpoint(&nobody, None), "m")
            .await;
        assert_eq!(caps, kind.static_capabilities());
        assert_eq!(caps.vision_input, vision, "{kind:?}");
        assert!(caps.tool_calling);
    }
    assert!(nobody.paths().is_empty());
}

#[tokio::test]
async fn concurrent_lookups_share_one_request_and_the_answer_is_cached() {
    let slow = Reply::Delayed(
        Duration::from_millis(200),
        Box::new(json_reply(ollama_show(&["vision", "tools"]))),
    );
    let ollama = provider(slow).await;
    let resolver = Arc::new(CapabilityResolver::new(ProviderKind::Ollama));
    let endpoint = endpoint(&ollama, None);
    let lookups: Vec<_> = (0..20)
        .map(|_| {
            let (resolver, endpoint) = (Arc::clone(&resolver), endpoint.clone());
            tokio::spawn(async move { resolver.resolve(&endpoint, "gemma3").await })
        })
        .collect();
    for lookup in lookups {
        assert!(lookup.await.unwrap().vision_input);
    }
    assert_eq!(ollama.paths().len(), 1, "one request for twenty callers");
    assert!(resolver.resolve(&endpoint, "gemma3").await.vision_input);
    assert_eq!(
        ollama.paths().len(),
        1,
        "the second turn is served from the cache"
    );
    // Another model, or another key, is another entry.
    resolver.resolve(&endpoint, "llava").await;
    let other_key = Endpoint {
        api_key: Some("other".into()),
        ..endpoint.clone()
    };
    resolver.resolve(&other_key, "gemma3").await;
    assert_eq!(ollama.paths().len(), 3);
}

#[tokio::test]
async fn a_cached_answer_expires() {
    let ollama = provider(json_reply(ollama_show(&["tools"]))).await;
    let resolver =
        CapabilityResolver::new(ProviderKind::Ollama).with_ttl(Duration::from_millis(50));
    let endpoint = endpoint(&ollama, None);
    resolver.resolve(&endpoint, "m").await;
    resolver.resolve(&endpoint, "m").await;
    assert_eq!(ollama.paths().len(), 1);
    tokio::time::sleep(Duration::from_millis(80)).await;
    resolver.resolve(&endpoint, "m").await;
    assert_eq!(ollama.paths().len(), 2);
}

fn fail_closed() -> ModelCapabilities {
    ModelCapabilities {
        vision_input: false,
        ..ProviderKind::Ollama.static_capabilities()
    }
}

#[tokio::test]
async fn a_timed_out_lookup_fails_closed_for_every_waiter_and_is_not_cached() {
    let hung = Reply::Delayed(
        Duration::from_secs(5),
        Box::new(json_reply(ollama_show(&["vision", "tools"]))),
    );
    let ollama = provider(hung).await;
    let resolver = Arc::new(
        CapabilityResolver::new(ProviderKind::Ollama).with_timeout(Duration::from_millis(100)),
    );
    let endpoint = endpoint(&ollama, None);
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(
        resolver.resolve(&endpoint, "gemma3"),
        resolver.resolve(&endpoint, "gemma3")
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the timeout bounds the wait"
    );
    assert_eq!(a, fail_closed());
    assert_eq!(b, fail_closed());
    assert_eq!(ollama.paths().len(), 1);
    resolver.resolve(&endpoint, "gemma3").await;
    assert_eq!(ollama.paths().len(), 2, "a failed lookup is asked again");
}

#[tokio::test]
async fn a_refused_lookup_fails_closed() {
    let ollama = provider(Reply::Error {
        status: 404,
        body: json!({"error": "model not found"}),
    })
    .await;
    let caps = CapabilityResolver::new(ProviderKind::Ollama)
        .resolve(&endpoint(&ollama, None), "nope")
        .await;
    assert_eq!(caps, fail_closed());
}
