//! Fuzzes the model relay's body vetting over any bytes an agent can POST. No panic; a body
//! it relays is one JSON object in which a reference written out here, over the parsed tree,
//! finds no tool the provider runs itself, no member connecting the provider to something and
//! no URL it would fetch (the parsed tree keeps the last of a repeated member, so it sees no
//! more than the vetting did); a finding quotes at most 64 characters, escaped onto one line.
//! Pinned to a model, a relayed body names that model and nothing is relayed that unpinned
//! would not be.
#![no_main]

use atelier_gate::model::body::{inspect, BodyFinding};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// A member's name as the most lenient upstream reads it.
fn fold(name: &str) -> String {
    let mut folded = String::new();
    for c in name.chars() {
        match c {
            '_' | '-' => {}
            '\u{017f}' => folded.push('s'),
            '\u{212a}' => folded.push('k'),
            '\u{0130}' | '\u{0131}' => folded.push('i'),
            '\u{fb00}' => folded.push_str("ff"),
            '\u{fb01}' => folded.push_str("fi"),
            '\u{fb02}' => folded.push_str("fl"),
            '\u{fb03}' => folded.push_str("ffi"),
            '\u{fb04}' => folded.push_str("ffl"),
            '\u{fb05}' | '\u{fb06}' => folded.push_str("st"),
            c => folded.push(c.to_ascii_lowercase()),
        }
    }
    folded
}

fn client_tool(kind: &str) -> bool {
    let families = [
        "bash",
        "text_editor",
        "computer",
        "memory",
        "tool_search_tool_regex",
        "tool_search_tool_bm25",
        "advisor",
    ];
    kind == "custom"
        || kind == "function"
        || families.iter().any(|family| {
            let version = kind.len().saturating_sub(9);
            kind.len() == family.len() + 9
                && kind.starts_with(family)
                && kind.as_bytes()[version] == b'_'
                && kind[version + 1..].bytes().all(|b| b.is_ascii_digit())
        })
}

fn inline(url: &str) -> bool {
    url.len() >= 5 && url.is_char_boundary(5) && url[..5].eq_ignore_ascii_case("data:")
}

/// Nothing in `value` names a URL the provider fetches; `role` is where it sits.
fn clean(value: &Value, role: &str) -> bool {
    match value {
        Value::String(text) => match role {
            "url" => inline(text),
            "file" => !text.contains("://") || inline(text),
            _ => true,
        },
        Value::Array(items) if role == "inert" => items.iter().all(|item| clean(item, "inert")),
        Value::Array(items) => items.iter().all(|item| clean(item, "any")),
        Value::Object(members) => members.iter().all(|(name, value)| {
            let name = fold(name);
            if role == "inert" {
                return clean(value, "inert");
            }
            match name.as_str() {
                "input" | "inputschema" | "parameters" | "schema" | "jsonschema" => {
                    clean(value, "inert")
                }
                "url" if role == "source" || role == "url" => {
                    value.as_str().map_or(clean(value, "any"), inline)
                }
                "type" => match value.as_str() {
                    Some(kind) => {
                        let fetched = role == "source" && kind.eq_ignore_ascii_case("url");
                        let call = matches!(fold(kind).as_str(), "servertooluse" | "mcptooluse");
                        !fetched && !call
                    }
                    None => clean(value, "any"),
                },
                "source" => clean(value, "source"),
                "imageurl" | "fileurl" | "documenturl" | "audiourl" | "videourl" => {
                    clean(value, "url")
                }
                "fileid" | "filedata" | "fileuri" | "uri" => clean(value, "file"),
                _ => clean(value, "any"),
            }
        }),
        _ => true,
    }
}

/// A tool the agent runs, with nothing in it the provider would fetch.
fn client_tool_object(tool: &Value) -> bool {
    let Some(tool) = tool.as_object() else {
        return false;
    };
    let provider_members = [
        "googlesearch",
        "googlesearchretrieval",
        "enterprisewebsearch",
        "urlcontext",
        "codeexecution",
        "retrieval",
        "websearch",
        "webfetch",
        "filesearch",
    ];
    let named = tool
        .keys()
        .any(|name| matches!(fold(name).as_str(), "type" | "name"));
    named
        && tool.iter().all(|(name, value)| {
            let name = fold(name);
            match name.as_str() {
                "type" => value.as_str().is_some_and(client_tool),
                name if provider_members.contains(&name) => false,
                "input" | "inputschema" | "parameters" | "schema" | "jsonschema" => {
                    clean(value, "inert")
                }
                _ => clean(&Value::Object(Map::from_iter([(name.to_owned(), value.clone())])), "any"),
            }
        })
}

fn relayable(body: &Map<String, Value>) -> bool {
    let provider_members = [
        "mcpservers",
        "container",
        "websearchoptions",
        "plugins",
        "extrabody",
        "enablesearch",
        "searchoptions",
        "searchparameters",
    ];
    body.iter().all(|(name, value)| match fold(name).as_str() {
        "tools" | "functions" => match value {
            Value::Null => true,
            Value::Array(tools) => tools.iter().all(client_tool_object),
            _ => false,
        },
        name if provider_members.contains(&name) => value.is_null(),
        // The lists of models for a gateway to fall back to.
        "models" | "fallbacks" => value.is_null(),
        _ => clean(value, "any"),
    })
}

fuzz_target!(|data: &[u8]| {
    // Pinned, a relayed body names the pinned model (the tree keeps the last `model`).
    if inspect(data, Some("m")).is_ok() {
        let body: Map<String, Value> = serde_json::from_slice(data).expect("a JSON object");
        let models: Vec<&Value> = body
            .iter()
            .filter(|(name, _)| fold(name) == "model")
            .map(|(_, value)| value)
            .collect();
        assert!(!models.is_empty() && models.iter().all(|model| **model == "m"));
        assert!(inspect(data, None).is_ok(), "pinning a model only refuses more");
    }
    match inspect(data, None) {
        Ok(()) => {
            let body: Map<String, Value> =
                serde_json::from_slice(data).expect("a relayed body is one JSON object");
            assert!(relayable(&body), "relayed: {}", String::from_utf8_lossy(data));
        }
        Err(BodyFinding::NotJson) => {}
        Err(
            BodyFinding::ProviderTool(quoted)
            | BodyFinding::ProviderFetch(quoted)
            | BodyFinding::OtherModel(quoted)
            | BodyFinding::ModelList(quoted),
        ) => {
            assert!(!quoted.contains('\n') && !quoted.contains('\r'), "{quoted}");
            // 64 characters, each escaped to at most 10 (`\u{10ffff}`), the quotes and `…`.
            assert!(quoted.chars().count() <= 64 * 10 + 3, "{quoted}");
        }
    }
});
