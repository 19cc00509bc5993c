//! Request bodies: how each driver maps canonical history, system parts and tools to its wire.

use atelier_llm::{
    AnthropicDriver, ChatCompletionsDriver, ChatRequest, ContentBlock, Driver, Endpoint, Image,
    LlmError, Message, ResponsesDriver, Role, ToolCall, ToolChoice, ToolDefinition, ToolResult,
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
};
use serde_json::json;

fn endpoint() -> Endpoint {
    Endpoint::new(
        reqwest::Client::new(),
        "http://127.0.0.1:9",
        Some("k".to_owned()),
    )
}

/// user → assistant (text + call) → tool result with an image → user: the history every test
/// maps.
fn request() -> ChatRequest {
    let image = Image {
        mime_type: "image/png".to_owned(),
        data: "AAAA".to_owned(),
    };
    ChatRequest {
        model: "m".to_owned(),
        system: vec![
            "static".to_owned(),
            SYSTEM_PROMPT_DYNAMIC_BOUNDARY.to_owned(),
            "dynamic".to_owned(),
        ],
        messages: vec![
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::Text {
                        text: "look".to_owned(),
                    },
                    ContentBlock::Image(image.clone()),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: "ok".to_owned(),
                    },
                    ContentBlock::ToolCall(ToolCall {
                        id: "c1".to_owned(),
                        name: "snap".to_owned(),
                        arguments: json!({"a": 1}),
                    }),
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![ContentBlock::ToolResult(ToolResult {
                    call_id: "c1".to_owned(),
                    ok: true,
                    data: Some(json!({"n": 2})),
                    error: None,
                    images: vec![image],
                })],
            },
            Message::user_text("next"),
        ],
        tools: vec![ToolDefinition {
            name: "snap".to_owned(),
            description: "d".to_owned(),
            input_schema: json!({"type": "object"}),
        }],
        max_tokens: None,
        scope: Some("site".to_owned()),
        tool_choice: Default::default(),
    }
}

#[test]
fn anthropic_caches_the_static_prefix_and_merges_tool_results_into_the_next_user_turn() {
    let body = AnthropicDriver::new(endpoint()).request_body(&request());
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "static", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "dynamic"},
        ])
    );
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(
        messages[1]["content"][1],
        json!({"type": "tool_use", "id": "c1", "name": "snap", "input": {"a": 1}})
    );
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "c1", "content": [
                {"type": "text", "text": "{\"n\":2}"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            ]},
            {"type": "text", "text": "next"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"name": "snap", "description": "d", "input_schema": {"type": "object"}}])
    );
}

#[test]
fn anthropic_sends_no_assistant_text_of_whitespace_alone() {
    let mut request = request();
    request.messages[1].content[0] = ContentBlock::Text {
        text: "\n\n ".to_owned(),
    };
    let body = AnthropicDriver::new(endpoint()).request_body(&request);
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "c1", "name": "snap", "input": {"a": 1}}]),
        "Anthropic refuses a blank text block"
    );
}

#[test]
fn anthropic_single_part_system_is_a_string_and_failed_results_are_errors() {
    let mut request = request();
    request.system = vec!["only".to_owned()];
    request.messages[2].content = vec![ContentBlock::ToolResult(ToolResult {
        call_id: "c1".to_owned(),
        ok: false,
        data: None,
        error: None,
        images: Vec::new(),
    })];
    let body = AnthropicDriver::new(endpoint()).request_body(&request);
    assert_eq!(body["system"], "only");
    assert_eq!(
        body["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "c1", "content": "Tool call failed.", "is_error": true})
    );
}

#[test]
fn responses_flattens_items_and_only_openai_sends_a_cache_key() {
    let openai = ResponsesDriver::openai(endpoint()).request_body(&request());
    assert_eq!(openai["instructions"], "static\n\ndynamic");
    assert!(openai["prompt_cache_key"]
        .as_str()
        .unwrap()
        .starts_with("instatic:site:"));
    assert_eq!(
        openai["input"],
        json!([
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            ]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "call_id": "c1", "name": "snap", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output":
                "{\"n\":2}\n\n[1 screenshot(s) omitted: this provider delivers tool results as text only.]"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]},
        ])
    );
    assert_eq!(
        openai["tools"],
        json!([{"type": "function", "name": "snap", "description": "d", "parameters": {"type": "object"}}])
    );
    let openrouter = ResponsesDriver::openrouter(endpoint()).request_body(&request());
    assert!(openrouter.get("prompt_cache_key").is_none());
}

#[test]
fn chat_completions_puts_system_first_and_uses_string_content_without_images() {
    for driver in [
        ChatCompletionsDriver::ollama(endpoint()),
        ChatCompletionsDriver::openai_compatible(endpoint()),
    ] {
        let body = driver.request_body(&request());
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "static\n\ndynamic"},
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ]},
                {"role": "assistant", "content": "ok", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "snap", "arguments": "{\"a\":1}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content":
                    "{\"n\":2}\n\n[1 screenshot(s) omitted: this provider delivers tool results as text only.]"},
                {"role": "user", "content": "next"},
            ])
        );
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "snap", "description": "d", "parameters": {"type": "object"}}}])
        );
        // An output limit is sent only when one is set.
        assert!(body.get("max_tokens").is_none(), "{body}");
        let mut limited = request();
        limited.max_tokens = Some(64);
        assert_eq!(driver.request_body(&limited)["max_tokens"], 64);
    }
}

#[tokio::test]
async fn keyless_cloud_drivers_fail_before_sending() {
    use futures_util::StreamExt;
    let keyless = Endpoint::new(reqwest::Client::new(), "http://127.0.0.1:9", None);
    for driver in [
        Box::new(AnthropicDriver::new(keyless.clone())) as Box<dyn Driver>,
        Box::new(ResponsesDriver::openai(keyless.clone())),
        Box::new(ResponsesDriver::openrouter(keyless)),
    ] {
        let items: Vec<_> = driver.stream(&request()).collect().await;
        assert!(
            matches!(
                items.as_slice(),
                [Err(atelier_llm::LlmError::MissingSetting {
                    setting: atelier_llm::Setting::ApiKey,
                    ..
                })]
            ),
            "{items:?}"
        );
    }
}

/// Every driver, by its label, for the tables below.
fn drivers() -> Vec<(&'static str, Box<dyn Driver>)> {
    vec![
        ("anthropic", Box::new(AnthropicDriver::new(endpoint()))),
        ("openai", Box::new(ResponsesDriver::openai(endpoint()))),
        (
            "openrouter",
            Box::new(ResponsesDriver::openrouter(endpoint())),
        ),
        (
            "ollama",
            Box::new(ChatCompletionsDriver::ollama(endpoint())),
        ),
        (
            "custom",
            Box::new(ChatCompletionsDriver::openai_compatible(endpoint())),
        ),
    ]
}

#[test]
fn every_driver_spells_each_tool_choice_in_its_own_wire() {
    let snap = || ToolChoice::Function("snap".to_owned());
    // (driver, choice, the `tool_choice` field sent; null = no field)
    let cases = [
        ("anthropic", ToolChoice::Auto, json!(null)),
        ("anthropic", ToolChoice::None, json!({"type": "none"})),
        ("anthropic", ToolChoice::Required, json!({"type": "any"})),
        ("anthropic", snap(), json!({"type": "tool", "name": "snap"})),
        ("openai", ToolChoice::Auto, json!(null)),
        ("openai", ToolChoice::None, json!("none")),
        ("openai", ToolChoice::Required, json!("required")),
        (
            "openai",
            snap(),
            json!({"type": "function", "name": "snap"}),
        ),
        ("openrouter", ToolChoice::None, json!("none")),
        ("openrouter", ToolChoice::Required, json!("required")),
        (
            "openrouter",
            snap(),
            json!({"type": "function", "name": "snap"}),
        ),
        ("ollama", ToolChoice::Auto, json!(null)),
        ("ollama", ToolChoice::Required, json!("required")),
        (
            "ollama",
            snap(),
            json!({"type": "function", "function": {"name": "snap"}}),
        ),
        ("custom", ToolChoice::Auto, json!(null)),
        ("custom", ToolChoice::None, json!("none")),
        ("custom", ToolChoice::Required, json!("required")),
        (
            "custom",
            snap(),
            json!({"type": "function", "function": {"name": "snap"}}),
        ),
    ];
    let drivers = drivers();
    for (name, choice, expected) in cases {
        let driver = &drivers.iter().find(|(n, _)| *n == name).unwrap().1;
        let mut request = request();
        request.tool_choice = choice.clone();
        let body = driver.request_body(&request);
        assert_eq!(body["tool_choice"], expected, "{name} {choice:?}");
    }
}

#[test]
fn a_choice_without_tools_to_refuse_is_not_sent() {
    for (name, driver) in drivers() {
        let mut request = request();
        request.tools.clear();
        request.tool_choice = ToolChoice::None;
        let body = driver.request_body(&request);
        assert!(body.get("tool_choice").is_none(), "{name}: {body}");
        assert!(request.tool_choice_refusal().is_none());
    }
}

#[tokio::test]
async fn an_impossible_choice_is_refused_before_anything_is_sent() {
    use futures_util::StreamExt;
    // (case, tools kept, choice, the refusal's text)
    let cases = [
        (
            "required without tools",
            false,
            ToolChoice::Required,
            "A required tool call needs at least one tool.",
        ),
        (
            "named without tools",
            false,
            ToolChoice::Function("snap".to_owned()),
            "The forced tool \"snap\" is not among the request's tools.",
        ),
        (
            "named tool not declared",
            true,
            ToolChoice::Function("paint".to_owned()),
            "The forced tool \"paint\" is not among the request's tools.",
        ),
    ];
    for (case, keep_tools, choice, text) in cases {
        for (name, driver) in drivers() {
            let mut request = request();
            if !keep_tools {
                request.tools.clear();
            }
            request.tool_choice = choice.clone();
            // The endpoint is a closed port: any request sent would fail as unreachable, so a
            // configuration error proves nothing was sent.
            let items: Vec<_> = driver.stream(&request).collect().await;
            match items.as_slice() {
                [Err(LlmError::Config { message })] => assert_eq!(message, text, "{case} {name}"),
                other => panic!("{case} {name}: {other:?}"),
            }
        }
    }
}
