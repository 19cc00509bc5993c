//! The OpenAI-compatible driver against a real model server: llama.cpp's server with
//! SmolLM2-135M-Instruct on loopback (`scripts/local-model install`). Recorded transcripts
//! prove the driver parses what the fixtures say; these prove the fixtures say what a real
//! server sends. A missing install fails these tests; it never skips them.

use std::time::Duration;

use atelier_llm::{
    list_models, ChatCompletionsDriver, ChatRequest, Driver, Endpoint, Message, ProviderKind,
    StreamEvent, ToolChoice, ToolDefinition,
};
use atelier_local_model::LocalModel;
use futures_util::StreamExt;
use serde_json::{json, Value};

async fn server() -> LocalModel {
    LocalModel::start().await.unwrap_or_else(|e| panic!("{e}"))
}

/// A driver configured as an editor configures a Custom Provider: the base URL with `/v1`.
fn driver(server: &LocalModel) -> ChatCompletionsDriver {
    ChatCompletionsDriver::openai_compatible(Endpoint::new(
        reqwest::Client::new(),
        format!("{}/v1", server.base_url),
        None,
    ))
}

fn ask(server: &LocalModel, text: &str) -> ChatRequest {
    ChatRequest {
        model: server.model_id.clone(),
        system: vec!["You are a helpful assistant. Answer briefly.".to_owned()],
        messages: vec![Message::user_text(text)],
        max_tokens: Some(48),
        ..ChatRequest::default()
    }
}

/// Every event of one round, or the round's error as text.
async fn round(driver: &dyn Driver, request: &ChatRequest) -> Result<Vec<StreamEvent>, String> {
    let mut stream = driver.stream(request);
    let mut events = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(120), stream.next())
        .await
        .expect("the round stalled")
    {
        events.push(item.map_err(|e| e.to_string())?);
    }
    Ok(events)
}

fn finished(events: &[StreamEvent]) -> &atelier_llm::RoundEnd {
    match events.last() {
        Some(StreamEvent::Finished(end)) => end,
        other => panic!("the round did not end with Finished: {other:?}"),
    }
}

#[tokio::test]
async fn a_text_answer_streams_in_deltas_and_ends_with_its_stop_reason() {
    let server = server().await;
    let events = round(&driver(&server), &ask(&server, "Say hello."))
        .await
        .unwrap();
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(piece) => Some(piece.as_str()),
            _ => None,
        })
        .collect();
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .count();
    assert!(deltas > 1, "the text came in {deltas} delta(s): {events:?}");
    let end = finished(&events);
    assert!(end.stop && end.tool_calls.is_empty(), "{end:?}");
    assert!(
        matches!(end.stop_reason.as_deref(), Some("stop" | "length")),
        "{end:?}"
    );
    // llama-cpp-python ignores `stream_options.include_usage`: its streams carry no counts,
    // and the driver invents none (fixtures/custom/llama_cpp_text.sse). A server that starts
    // counting fails this line, and the fixture and the editor's usage numbers get revisited.
    assert_eq!(end.usage, None, "the server now streams usage: {end:?}");
    assert!(deltas <= 48, "max_tokens was not applied: {deltas} deltas");
    // The assistant turn to keep is exactly the streamed text.
    let kept = end.assistant.as_ref().expect("an assistant turn");
    assert_eq!(
        kept.content,
        [atelier_llm::ContentBlock::Text { text: text.clone() }]
    );
    assert!(!text.trim().is_empty());
}

#[tokio::test]
async fn a_forced_tool_call_arrives_in_argument_deltas_and_assembles_into_one_valid_call() {
    let server = server().await;
    let mut request = ask(&server, "Set the page title to Welcome.");
    request.max_tokens = Some(64);
    request.tools = vec![ToolDefinition {
        name: "set_title".to_owned(),
        description: "Sets the page title.".to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        }),
    }];
    request.tool_choice = ToolChoice::Function("set_title".to_owned());
    let events = round(&driver(&server), &request).await.unwrap();

    let started: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallStarted { id, name } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1, "{events:?}");
    let (id, name) = started[0];
    assert_eq!(name, "set_title");
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallArgumentsDelta { id: of, delta } if of == id => {
                Some(delta.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(deltas.len() > 1, "the arguments came whole: {deltas:?}");
    let assembled: Value = serde_json::from_str(&deltas.concat()).expect("valid JSON arguments");
    assert!(assembled["title"].is_string(), "{assembled}");

    let end = finished(&events);
    assert!(!end.stop, "a round with a call goes on: {end:?}");
    assert_eq!(end.tool_calls.len(), 1, "{end:?}");
    let call = &end.tool_calls[0];
    assert_eq!((call.id.as_str(), call.name.as_str()), (id, "set_title"));
    assert_eq!(call.arguments, assembled);
    let completed = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallCompleted(c) if c == call))
        .count();
    assert_eq!(completed, 1, "{events:?}");
}

#[tokio::test]
async fn the_model_list_is_the_servers_v1_models() {
    let server = server().await;
    for base_url in [format!("{}/v1", server.base_url), server.base_url.clone()] {
        let endpoint = Endpoint::new(reqwest::Client::new(), base_url.clone(), None);
        let models = list_models(ProviderKind::OpenAiCompatible, &endpoint)
            .await
            .unwrap();
        let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, [server.model_id.as_str()], "{base_url}");
        assert!(models[0].is_live());
    }
}

#[tokio::test]
async fn a_prompt_beyond_the_context_is_a_failed_round_not_an_empty_answer() {
    let server = server().await;
    // Far more than the server's 2048-token context.
    let request = ask(&server, &"word ".repeat(5000));
    let error = round(&driver(&server), &request).await.unwrap_err();
    assert!(
        error.starts_with("Custom Provider ended its answer before sending anything."),
        "{error}"
    );
}
