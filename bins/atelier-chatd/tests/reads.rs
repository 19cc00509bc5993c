//! The server-side reads against fixtures — a posted site snapshot and a content export
//! loaded with the real `atelier-chatd import-content` — compared with golden JSON, and the
//! system prompts: a static prefix byte-identical across turns and providers, the dynamic
//! suffix built from the snapshot.
//!
//! `ATELIER_UPDATE_GOLDEN=1 cargo test -p atelier-chatd --test reads` rewrites the goldens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use atelier_chatd::auth::Caller;
use atelier_chatd::prompts::{system_prompt, CONTENT_PREFIX, SITE_PREFIX};
use atelier_chatd::runtime::prepare_input;
use atelier_chatd::store::{Scope, Store};
use atelier_chatd::tools::snapshot::SiteSnapshot;
use atelier_chatd::tools::{catalogue, content_reads, site_reads};
use atelier_llm::{
    AnthropicDriver, ChatCompletionsDriver, ChatRequest, Driver, Endpoint, Message,
    ResponsesDriver, SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
};
use serde_json::{json, Map, Value};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn assert_golden(name: &str, value: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var_os("ATELIER_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (ATELIER_UPDATE_GOLDEN=1 writes it)",
            path.display()
        )
    });
    assert_eq!(text, expected, "{} differs", path.display());
}

fn import(database: &Path, export: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_atelier-chatd"))
        .arg("--database")
        .arg(database)
        .arg("import-content")
        .arg(export)
        .env_remove("CHATD_DATABASE")
        .output()
        .unwrap()
}

fn snapshot() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("site_snapshot.json")).unwrap()).unwrap()
}

fn reader() -> Caller {
    Caller {
        user_id: "u".into(),
        capabilities: [
            "site.read",
            "content.edit.any",
            "data.custom.tables.read",
            "users.manage",
            "media.read",
        ]
        .iter()
        .map(|c| (*c).to_owned())
        .collect(),
    }
}

#[test]
fn server_reads_answer_from_the_snapshot_and_the_imported_content() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("chat.sqlite3");

    // A refused export changes nothing and says why.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"collections": [], "documents": [{"id": "d", "collectionId": "nope", "title": "x",
            "status": "draft", "createdAt": "t", "updatedAt": "t"}]}"#,
    )
    .unwrap();
    let output = import(&database, &bad);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nothing was changed") && stderr.contains("unknown collection \"nope\""),
        "{stderr}"
    );
    let output = import(&database, &fixture("content_export.json"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&output.stdout).unwrap(),
        json!({"collections": 3, "documents": 5, "users": 2, "media": 3})
    );

    let store = Store::open(&database).unwrap();
    let raw = snapshot();
    let snapshot = SiteSnapshot::read(Some(&raw));
    assert_eq!(snapshot.page.title, "Home");
    let tools = catalogue();
    let caller = reader();
    let run = |name: &str, input: Value| -> Value {
        let spec = tools.iter().find(|t| t.name == name).unwrap();
        let input = prepare_input(spec, &caller, &input).unwrap();
        let outcome = if spec.scope == Scope::Site {
            site_reads::run(&store, &snapshot, name, &input)
        } else {
            content_reads::run(&store, name, &input)
        };
        match outcome {
            Ok(data) => json!({"ok": true, "data": data}),
            Err(error) => json!({"ok": false, "error": error}),
        }
    };
    let mut site = Map::new();
    for (case, name, input) in [
        ("documents", "site_list_documents", json!({})),
        ("modules", "site_list_modules", json!({})),
        (
            "modules in category TEXT",
            "site_list_modules",
            json!({"category": "TEXT"}),
        ),
        ("tokens", "site_list_tokens", json!({})),
        ("fonts only", "site_list_tokens", json!({"family": "fonts"})),
        ("post types", "site_list_post_types", json!({})),
        ("loop sources", "site_list_loop_sources", json!({})),
        ("breakpoints", "site_list_breakpoints", json!({})),
    ] {
        site.insert(case.to_owned(), run(name, input));
    }
    assert_golden("reads/site.json", &Value::Object(site));
    let mut content = Map::new();
    for (case, name, input) in [
        ("collections", "content_list_collections", json!({})),
        (
            "schema of posts",
            "content_get_collection_schema",
            json!({"tableId": "t-posts"}),
        ),
        (
            "schema of a data table",
            "content_get_collection_schema",
            json!({"tableId": "t-authors"}),
        ),
        (
            "schema not found",
            "content_get_collection_schema",
            json!({"tableId": "t-gone"}),
        ),
        (
            "posts",
            "content_list_documents",
            json!({"tableId": "t-posts"}),
        ),
        (
            "posts by ana, page 2 of 1",
            "content_list_documents",
            json!({"tableId": "t-posts", "authorUserId": "u-ana", "limit": 1, "offset": 1}),
        ),
        (
            "published posts",
            "content_list_documents",
            json!({"tableId": "t-posts", "status": "published"}),
        ),
        (
            "document",
            "content_get_document",
            json!({"documentId": "d-launch"}),
        ),
        (
            "document not found",
            "content_get_document",
            json!({"documentId": "d-gone"}),
        ),
        (
            "search launch (visible tables only)",
            "content_search_documents",
            json!({"query": "LAUNCH"}),
        ),
        ("users", "content_list_users", json!({})),
        (
            "media: images",
            "content_list_media",
            json!({"mimeType": "image/"}),
        ),
        (
            "media: launch, limit 1",
            "content_list_media",
            json!({"query": "launch", "limit": 1}),
        ),
    ] {
        content.insert(case.to_owned(), run(name, input));
    }
    assert_golden("reads/content.json", &Value::Object(content));

    // A malformed snapshot is the placeholder, not an error.
    let placeholder = SiteSnapshot::read(Some(&json!({"page": "not an object"})));
    assert_eq!(placeholder, SiteSnapshot::placeholder());
}

fn request_for(system: Vec<String>) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        system,
        messages: vec![Message::user_text("hi")],
        tools: catalogue()
            .iter()
            .filter(|t| t.scope == Scope::Site)
            .map(|t| t.definition())
            .collect(),
        max_tokens: None,
        scope: Some("site".into()),
        tool_choice: Default::default(),
    }
}

#[test]
fn the_static_prefix_is_byte_identical_across_turns_and_providers() {
    let first = snapshot();
    let mut second = first.clone();
    second["page"]["title"] = json!("About us");
    second["selectedNodeId"] = json!(null);
    second["site"]["tokens"] = json!({});
    let turns = [
        system_prompt(Scope::Site, Some(&first)),
        system_prompt(Scope::Site, Some(&second)),
        system_prompt(Scope::Site, None),
    ];
    for parts in &turns {
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], SITE_PREFIX);
        assert_eq!(parts[1], SYSTEM_PROMPT_DYNAMIC_BOUNDARY);
    }
    assert_ne!(turns[0][2], turns[1][2]);
    let endpoint = Endpoint::new(
        reqwest::Client::new(),
        "http://127.0.0.1:9",
        Some("k".into()),
    );
    let drivers: Vec<Box<dyn Driver>> = vec![
        Box::new(AnthropicDriver::new(endpoint.clone())),
        Box::new(ResponsesDriver::openai(endpoint.clone())),
        Box::new(ResponsesDriver::openrouter(endpoint.clone())),
        Box::new(ChatCompletionsDriver::ollama(endpoint.clone())),
        Box::new(ChatCompletionsDriver::openai_compatible(endpoint)),
    ];
    for driver in &drivers {
        let bodies: Vec<Value> = turns
            .iter()
            .map(|t| driver.request_body(&request_for(t.clone())))
            .collect();
        for body in &bodies {
            let system_text = match driver.label() {
                "Anthropic" => {
                    // Only the prefix is marked for caching.
                    assert_eq!(
                        body["system"][0]["cache_control"],
                        json!({"type": "ephemeral"})
                    );
                    assert!(body["system"][1].get("cache_control").is_none());
                    body["system"][0]["text"].as_str().unwrap().to_owned()
                }
                "OpenAI" | "OpenRouter" => body["instructions"].as_str().unwrap().to_owned(),
                _ => body["messages"][0]["content"].as_str().unwrap().to_owned(),
            };
            assert!(system_text.starts_with(SITE_PREFIX), "{}", driver.label());
            assert!(!system_text.contains(SYSTEM_PROMPT_DYNAMIC_BOUNDARY));
        }
        if driver.label() == "OpenAI" {
            assert_eq!(bodies[0]["prompt_cache_key"], bodies[1]["prompt_cache_key"]);
        }
    }
    // The prefix's own rules.
    assert!(SITE_PREFIX.contains("site_insert_html"));
    assert!(SITE_PREFIX.contains("Structure as HTML, styling as CSS"));
    assert!(SITE_PREFIX.contains("No raw HTML/CSS/JSON in the reply"));
    for banned in ["Module ids:", "base.container", "base.text"] {
        assert!(!SITE_PREFIX.contains(banned), "{banned}");
    }
    let headings = [
        "Building",
        "Design system first",
        "Structure as HTML, styling as CSS",
        "Behavior and runtime code",
        "Responsive",
        "Documents",
        "Pages",
        "Loops (repeated CMS/data lists)",
        "Templates (CMS layouts)",
        "Notes",
        "Reply",
    ];
    let positions: Vec<usize> = headings
        .iter()
        .map(|h| {
            SITE_PREFIX
                .find(&format!("\n{h}\n"))
                .unwrap_or_else(|| panic!("{h}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "sections in order"
    );
    let content = system_prompt(Scope::Content, None);
    assert_eq!(content[0], CONTENT_PREFIX);
    assert_eq!(system_prompt(Scope::Data, None).len(), 1);
}

#[test]
fn the_dynamic_suffixes_follow_the_snapshot() {
    let site = system_prompt(Scope::Site, Some(&snapshot())).pop().unwrap();
    let placeholder = system_prompt(Scope::Site, Some(&json!("garbage")))
        .pop()
        .unwrap();
    let content_snapshot = json!({
        "user": {"displayName": "Ana", "email": "ana@example.org"},
        "collections": [{"id": "t-posts", "slug": "posts", "kind": "postType", "docCount": 3}],
        "activeCollectionId": "t-posts",
        "activeDocument": {"id": "d-launch", "title": "Launch day", "tableId": "t-posts", "status": "published",
            "fields": [
                {"id": "title", "type": "text", "required": true, "builtIn": true, "value": "Launch day"},
                {"id": "body", "type": "body", "value": "x".repeat(250)},
                {"id": "summary", "type": "text", "value": "y".repeat(130)},
                {"id": "views", "type": "number", "value": 42},
                {"id": "cover", "type": "media", "value": null},
                {"id": "tags", "type": "multiSelect", "value": ["a", "b"]}
            ]}
    });
    let content = system_prompt(Scope::Content, Some(&content_snapshot))
        .pop()
        .unwrap();
    let empty_content = system_prompt(Scope::Content, None).pop().unwrap();
    assert_golden(
        "prompts/suffixes.json",
        &json!({"site": site, "site placeholder": placeholder, "content": content, "content without snapshot": empty_content}),
    );
    assert!(site.starts_with(
        "Page: \"Home\" · current document: page:p-home · root: n-root · selected: n-hero"
    ));
    assert!(
        site.contains("Tokens — colors: [brand=#0a7cff, ink=#111]; type --text-*: [s, m, l, xl]")
    );
    assert!(placeholder.contains("Tokens: (none — no design system yet"));
}
