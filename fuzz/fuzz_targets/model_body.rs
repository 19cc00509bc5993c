//! Fuzzes the model relay's body vetting over any bytes an agent can POST. No panic; a body
//! it relays is one JSON object in which a reference written out here, over the parsed tree,
//! finds no tool the provider runs itself, no member connecting the provider to something and
//! no URL it would fetch (the parsed tree keeps the last of a repeated member, so it sees no
//! more than the vetting did); a finding quotes at most 64 characters, escaped onto one line.
#![no_main]

use atelier_gate::model::body::{inspect, BodyFinding};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// A member's name as an upstream ignoring case reads it.
fn fold(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '\u{017f}' => 's',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

fn client_tool(kind: &str) -> bool {
    let versioned = [
        "bash_",
        "text_editor_",
        "computer_",
        "memory_",
        "tool_search_tool_",
        "advisor_",
    ];
    kind == "custom"
        || kind == "function"
        || versioned
            .iter()
            .any(|prefix| kind.len() > prefix.len() && kind.starts_with(prefix))
}

fn inline(url: &str) -> bool {
    url.len() >= 5 && url[..5].eq_ignore_ascii_case("data:")
}

/// Nothing in `value` names a URL the provider fetches; `role` is where it sits.
fn clean(value: &Value, role: &str) -> bool {
    match value {
        Value::String(text) => role != "url" || inline(text),
        Value::Array(items) => items.iter().all(|item| clean(item, "any")),
        Value::Object(members) => members.iter().all(|(name, value)| {
            let name = fold(name);
            let fetches = role == "source" || role == "url";
            match name.as_str() {
                "input" => true,
                "url" if fetches => value.as_str().map_or(clean(value, "any"), inline),
                "type" if fetches => match value.as_str() {
                    Some(kind) => role != "source" || !kind.eq_ignore_ascii_case("url"),
                    None => clean(value, "any"),
                },
                "source" => clean(value, "source"),
                "image_url" | "file_url" | "document_url" | "audio_url" | "video_url" => {
                    clean(value, "url")
                }
                _ => clean(value, "any"),
            }
        }),
        _ => true,
    }
}

fn relayable(body: &Map<String, Value>) -> bool {
    body.iter().all(|(name, value)| match fold(name).as_str() {
        "tools" => match value {
            Value::Null => true,
            Value::Array(tools) => tools.iter().all(|tool| {
                tool.as_object().is_some_and(|tool| {
                    tool.iter().all(|(name, value)| match fold(name).as_str() {
                        "type" => value.as_str().is_some_and(client_tool),
                        _ => clean(value, "any"),
                    })
                })
            }),
            _ => false,
        },
        "mcp_servers" | "container" | "web_search_options" | "plugins" => value.is_null(),
        _ => clean(value, "any"),
    })
}

fuzz_target!(|data: &[u8]| {
    match inspect(data) {
        Ok(()) => {
            let body: Map<String, Value> =
                serde_json::from_slice(data).expect("a relayed body is one JSON object");
            assert!(relayable(&body), "relayed: {}", String::from_utf8_lossy(data));
        }
        Err(BodyFinding::NotJson) => {}
        Err(BodyFinding::ProviderTool(quoted) | BodyFinding::ProviderFetch(quoted)) => {
            assert!(!quoted.contains('\n') && !quoted.contains('\r'), "{quoted}");
            // 64 characters, each escaped to at most 10 (`\u{10ffff}`), the quotes and `…`.
            assert!(quoted.chars().count() <= 64 * 10 + 3, "{quoted}");
        }
    }
});
