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
use atelier_chatd::tools::{base_modules, catalogue, content_reads, site_reads};
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
            "modules in category TYPOGRAPHY",
            "site_list_modules",
            json!({"category": "TYPOGRAPHY"}),
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
    second["site"]["settings"]["framework"] = json!(null);
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
        site.contains(
            "Tokens — colors: [brand=hsla(212.08, 100%, 51.96%, 1), ink=hsla(0, 0%, 6.67%, 1), \
             accent=oklch(0.7 0.15 30)]; type --text-*: [s, m, l, xl]; spacing --space-*: [xs, s, m]; \
             fonts: [--font-heading→Inter, --font-body→system-ui, sans-serif]"
        ),
        "{site}"
    );
    assert!(placeholder.contains("Tokens: (none — no design system yet"));
}

/// A snapshot with every part the CMS editor posts, as small as it gets.
fn example_snapshot() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixture("instatic_example_snapshot.json")).unwrap(),
    )
    .unwrap()
}

/// Runs site read `name` on `raw` against an empty content store.
fn site_read(raw: &Value, name: &str, input: Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("chat.sqlite3")).unwrap();
    let tools = catalogue();
    let spec = tools.iter().find(|t| t.name == name).unwrap();
    let input = prepare_input(spec, &reader(), &input).unwrap();
    site_reads::run(&store, &SiteSnapshot::read(Some(raw)), name, &input).unwrap()
}

#[test]
fn the_example_snapshot_names_its_tokens_in_the_prompt_and_the_token_list() {
    let raw = example_snapshot();
    let suffix = system_prompt(Scope::Site, Some(&raw)).pop().unwrap();
    assert!(
        suffix.ends_with(
            "Tokens — colors: [primary=hsla(17.83, 62.16%, 43.53%, 1)]; \
             type --text-*: [s, m, l, xl]; fonts: [--font-body→Inter]"
        ),
        "{suffix}"
    );
    assert!(suffix.starts_with(
        "Page: \"Home\" · current document: page:pg_home · root: n_body · selected: n_h1"
    ));

    let tokens = &site_read(&raw, "site_list_tokens", json!({}))["tokens"];
    let primary = &tokens["colors"][0];
    assert_eq!(primary["slug"], "primary");
    assert_eq!(primary["category"], "brand");
    assert_eq!(primary["cssVar"], "--primary");
    assert_eq!(primary["ref"], "var(--primary)");
    assert_eq!(primary["value"], "hsla(17.83, 62.16%, 43.53%, 1)");
    assert_eq!(primary["darkValue"], "hsla(20, 67.54%, 62.55%, 1)");
    assert_eq!(
        primary["utilityClasses"],
        json!(["text-primary", "bg-primary", "border-primary"])
    );
    // Two shades, no transparent steps, no tints.
    assert_eq!(
        primary["variants"],
        json!([
            {"variant": "d-1", "cssVar": "--primary-d-1", "ref": "var(--primary-d-1)",
             "value": "hsla(17.83, 62.16%, 31.92%, 1)",
             "utilityClasses": ["text-primary-d-1", "bg-primary-d-1", "border-primary-d-1"]},
            {"variant": "d-2", "cssVar": "--primary-d-2", "ref": "var(--primary-d-2)",
             "value": "hsla(17.83, 62.16%, 20.31%, 1)",
             "utilityClasses": ["text-primary-d-2", "bg-primary-d-2", "border-primary-d-2"]}
        ])
    );
    let text = &tokens["typography"][0];
    assert_eq!(
        (
            &text["id"],
            &text["family"],
            &text["name"],
            &text["namingConvention"]
        ),
        (
            &json!("tg1"),
            &json!("typography"),
            &json!("Text"),
            &json!("text")
        )
    );
    let steps: Vec<&Value> = text["steps"].as_array().unwrap().iter().collect();
    let names: Vec<&str> = steps
        .iter()
        .map(|s| s["cssVar"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["--text-s", "--text-m", "--text-l", "--text-xl"]);
    // Base step m: 16 px at 320 px wide to 19 px at 1400 px, in rem of a 10 px root.
    assert_eq!(
        steps[1],
        &json!({"step": "m", "cssVar": "--text-m", "ref": "var(--text-m)",
                "value": "clamp(1.6rem, calc(0.28vw + 1.51rem), 1.9rem)", "utilityClasses": []})
    );
    assert_eq!(
        steps[0]["value"],
        "clamp(1.42rem, calc(0vw + 1.42rem), 1.43rem)"
    );
    assert_eq!(tokens["spacing"], json!([]));
    assert_eq!(
        tokens["fonts"],
        json!([{"name": "Body", "cssVar": "--font-body", "ref": "var(--font-body)",
                "family": "Inter", "stack": "\"Inter\", sans-serif"}])
    );
    let fonts_only = &site_read(&raw, "site_list_tokens", json!({"family": "fonts"}))["tokens"];
    assert_eq!(fonts_only["fonts"], tokens["fonts"]);
    assert_eq!(fonts_only["colors"], json!([]));
    assert_eq!(fonts_only["typography"], json!([]));
}

#[test]
fn the_example_snapshot_lists_templates_and_component_roots() {
    let raw = example_snapshot();
    let documents = site_read(&raw, "site_list_documents", json!({}));
    let documents = documents["documents"].as_array().unwrap();
    let refs: Vec<(&str, &str, &str)> = documents
        .iter()
        .map(|d| {
            (
                d["document"]["type"].as_str().unwrap(),
                d["document"]["id"].as_str().unwrap(),
                d["rootNodeId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        refs,
        [
            ("page", "pg_home", "n_body"),
            ("template", "pg_post", "n_tb"),
            ("visualComponent", "vc_card", "vc_root"),
        ]
    );
    assert_eq!(documents[1]["summary"], "Post type template for posts");
    assert_eq!(
        documents[1]["template"],
        json!({"target": {"kind": "postTypes", "tableSlugs": ["posts"]}, "priority": 10})
    );
    let suffix = system_prompt(Scope::Site, Some(&raw)).pop().unwrap();
    assert!(suffix
        .contains("visualComponent:vc_card=\"Card\" (root=vc_root; Visual component definition)"));
    assert!(suffix.contains("Pages: [pg_home=index (active), pg_post=post [template:posts]]"));

    // Every page has a slug: a snapshot with a page without one is not a snapshot.
    let mut slugless = raw.clone();
    slugless["site"]["pages"][0]
        .as_object_mut()
        .unwrap()
        .remove("slug");
    assert_eq!(
        SiteSnapshot::read(Some(&slugless)),
        SiteSnapshot::placeholder()
    );
}

/// Every base module the CMS registers, by id.
const BASE_MODULE_IDS: [&str; 25] = [
    "base.body",
    "base.container",
    "base.loop",
    "base.text",
    "base.list",
    "base.outlet",
    "base.image",
    "base.svg",
    "base.button",
    "base.link",
    "base.form",
    "base.label",
    "base.input",
    "base.textarea",
    "base.select",
    "base.option",
    "base.option-group",
    "base.checkbox",
    "base.radio",
    "base.submit",
    "base.form-message",
    "base.video",
    "base.slot-instance",
    "base.slot-outlet",
    "base.visual-component-ref",
];

#[test]
fn site_list_modules_is_the_base_module_catalogue() {
    assert_eq!(base_modules::ids(), BASE_MODULE_IDS);
    let listed = site_read(&example_snapshot(), "site_list_modules", json!({}));
    assert_eq!(listed["modules"], Value::Array(base_modules::catalogue()));
    let ids: Vec<&str> = listed["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = BASE_MODULE_IDS
        .iter()
        .copied()
        .filter(|id| *id != "base.body")
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let text = listed["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "base.text")
        .unwrap();
    assert_eq!(text["name"], "Text");
    assert_eq!(text["category"], "Typography");
    assert_eq!(text["canHaveChildren"], false);
    assert_eq!(
        text["props"][0],
        json!({"key": "text", "type": "textarea", "label": "Text", "defaultValue": "Add your text here."})
    );
    assert_eq!(text["props"][1]["defaultValue"], "p");
    let media = site_read(
        &example_snapshot(),
        "site_list_modules",
        json!({"category": "media"}),
    );
    let media: Vec<&str> = media["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(media, ["base.image", "base.svg", "base.video"]);
}

#[test]
fn site_list_loop_sources_offers_the_built_in_sources() {
    let listed = site_read(&example_snapshot(), "site_list_loop_sources", json!({}));
    let ids: Vec<&str> = listed["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["data.rows", "site.pages", "site.media"]);
    assert_eq!(
        listed["sources"][1]["fields"][2],
        json!({"id": "permalink", "label": "Permalink", "token": "{currentEntry.permalink}", "format": "url"})
    );
    // An empty content store has no tables to offer, and none is made up.
    assert_eq!(listed["dataTables"], json!([]));
}
