//! The tool catalogues as data: the generated list of all 50 tools (scope, where each runs,
//! whether it mutates, its capabilities) against its golden file; every schema checked
//! against what Anthropic, OpenAI function calling and chat/completions document they accept;
//! and for every tool one valid input that passes and two invalid ones refused by name.
//!
//! `ATELIER_UPDATE_GOLDEN=1 cargo test -p atelier-chatd --test main catalogue::` rewrites the
//! golden.

use std::collections::HashSet;
use std::path::PathBuf;

use atelier_chatd::caller::Caller;
use atelier_chatd::runtime::prepare_input;
use atelier_chatd::tools::{catalogue, Execution};
use serde_json::{json, Value};

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `value` with the golden file `name`, or rewrites it when asked to.
pub fn assert_golden(name: &str, value: &Value) {
    let path = golden(name);
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

#[test]
fn the_catalogue_lists_all_fifty_tools() {
    let tools = catalogue();
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({"name": t.name, "scope": t.scope, "execution": t.execution,
                   "mutates": t.mutates, "capabilities": t.capabilities})
        })
        .collect();
    assert_golden("tool_catalogue.json", &Value::Array(listed));
    let count =
        |f: &dyn Fn(&atelier_chatd::tools::ToolSpec) -> bool| tools.iter().filter(|t| f(t)).count();
    use atelier_chatd::store::Scope;
    assert_eq!(tools.len(), 50);
    assert_eq!(count(&|t| t.scope == Scope::Site), 35);
    assert_eq!(
        count(&|t| t.scope == Scope::Site && t.execution == Execution::Server),
        6
    );
    assert_eq!(count(&|t| t.scope == Scope::Site && t.mutates), 22);
    assert_eq!(
        count(&|t| t.scope == Scope::Content && t.execution == Execution::Server),
        7
    );
    assert_eq!(
        count(&|t| t.scope == Scope::Content && t.execution == Execution::Browser && t.mutates),
        8
    );
    assert!(tools
        .iter()
        .all(|t| !(t.execution == Execution::Server && t.mutates)));
    let names: HashSet<&str> = tools.iter().map(|t| t.name).collect();
    assert_eq!(names.len(), 50, "names are unique");
}

/// Every keyword the schemas use: what all three wires document as supported.
const KEYWORDS: [&str; 15] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "anyOf",
    "const",
];

fn walk(schema: &Value, depth: usize, visit: &mut dyn FnMut(&Value, usize)) {
    visit(schema, depth);
    if let Some(properties) = schema["properties"].as_object() {
        for property in properties.values() {
            walk(property, depth + 1, visit);
        }
    }
    if let Some(values) = schema["patternProperties"].as_object() {
        for value in values.values() {
            walk(value, depth + 1, visit);
        }
    }
    if schema.get("items").is_some() {
        walk(&schema["items"], depth + 1, visit);
    }
    for branch in schema["anyOf"].as_array().into_iter().flatten() {
        walk(branch, depth, visit);
    }
}

/// OpenAI's strict mode needs every object closed and every property required (optional ones
/// become nullable); free-form maps and untyped values cannot be expressed. `None` for such a
/// schema, else the strict form.
fn strict_form(schema: &Value) -> Option<Value> {
    if schema.as_object().is_some_and(|o| o.is_empty()) || schema.get("patternProperties").is_some()
    {
        return None;
    }
    let mut out = schema.clone();
    if let Some(branches) = schema["anyOf"].as_array() {
        out["anyOf"] = Value::Array(branches.iter().map(strict_form).collect::<Option<_>>()?);
    }
    if schema.get("items").is_some() {
        out["items"] = strict_form(&schema["items"])?;
    }
    if let Some(properties) = schema["properties"].as_object() {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut strict = serde_json::Map::new();
        for (name, property) in properties {
            let mut property = strict_form(property)?;
            if !required.contains(&name.as_str()) {
                property = json!({"anyOf": [property, {"type": "null"}]});
            }
            strict.insert(name.clone(), property);
        }
        out["required"] = json!(properties.keys().collect::<Vec<_>>());
        out["properties"] = Value::Object(strict);
        out["additionalProperties"] = json!(false);
    }
    Some(out)
}

#[test]
fn every_schema_is_one_every_provider_accepts() {
    let name_ok = |name: &str| {
        (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let mut not_strict = Vec::new();
    for tool in catalogue() {
        let schema = &tool.input_schema;
        // All three: a plain object root, no root-level composition (Anthropic refuses it,
        // OpenAI requires an object root), a name in [a-zA-Z0-9_-]{1,64}.
        assert!(name_ok(tool.name), "{}", tool.name);
        assert_eq!(schema["type"], "object", "{}", tool.name);
        for combinator in ["anyOf", "oneOf", "allOf", "not", "enum", "const"] {
            assert!(
                schema.get(combinator).is_none(),
                "{} root {combinator}",
                tool.name
            );
        }
        assert!(
            !tool.description.is_empty() && tool.description.len() <= 1024,
            "{}",
            tool.name
        );
        let mut deepest = 0;
        let mut properties = 0;
        walk(schema, 0, &mut |node, depth| {
            deepest = deepest.max(depth);
            properties += node["properties"].as_object().map_or(0, |p| p.len());
            for key in node.as_object().unwrap().keys() {
                assert!(
                    KEYWORDS.contains(&key.as_str())
                        || key == "description"
                        || key == "patternProperties",
                    "{}: keyword {key}",
                    tool.name
                );
            }
            if let Some(required) = node["required"].as_array() {
                for name in required {
                    assert!(
                        node["properties"].get(name.as_str().unwrap()).is_some(),
                        "{}: {name}",
                        tool.name
                    );
                }
            }
        });
        // OpenAI's documented limits for function parameters: nesting and property count.
        assert!(deepest <= 5, "{} nests {deepest} levels", tool.name);
        assert!(
            properties <= 100,
            "{} has {properties} properties",
            tool.name
        );
        // The wire shapes themselves.
        let anthropic =
            json!({"name": tool.name, "description": tool.description, "input_schema": schema});
        let responses = json!({"type": "function", "name": tool.name, "description": tool.description, "parameters": schema});
        let completions = json!({"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": schema}});
        assert_eq!(anthropic["input_schema"]["type"], "object");
        assert_eq!(responses["parameters"]["type"], "object");
        assert_eq!(completions["function"]["parameters"]["type"], "object");
        match strict_form(schema) {
            Some(strict) => walk(&strict, 0, &mut |node, _| {
                if node["type"] == "object" {
                    assert_eq!(node["additionalProperties"], false, "{} strict", tool.name);
                    let keys: Vec<&String> = node["properties"]
                        .as_object()
                        .map(|p| p.keys().collect())
                        .unwrap_or_default();
                    assert_eq!(
                        node["required"].as_array().map_or(0, Vec::len),
                        keys.len(),
                        "{} strict",
                        tool.name
                    );
                }
            }),
            None => not_strict.push(tool.name),
        }
    }
    // Free-form maps (patches, field values, runtime settings) cannot be strict; chatd sends
    // no `strict` flag, as the original, so these still work in non-strict function calling.
    assert_eq!(
        not_strict,
        [
            "site_update_node_props",
            "site_write_code_asset",
            "content_create_document",
            "content_set_document_field",
            "content_set_document_fields",
        ]
    );
}

fn everyone() -> Caller {
    Caller {
        user_id: "u".into(),
        capabilities: [
            "ai.chat",
            "ai.tools.write",
            "site.read",
            "site.structure.edit",
            "site.content.edit",
            "site.style.edit",
            "content.create",
            "content.edit.any",
            "content.publish.any",
            "content.manage",
            "data.custom.tables.read",
            "users.manage",
            "media.read",
        ]
        .iter()
        .map(|c| (*c).to_owned())
        .collect(),
        label: None,
    }
}

/// A tool, an input it accepts, and inputs it refuses with a fragment of each error.
type Case = (&'static str, Value, Vec<(Value, &'static str)>);

#[test]
fn every_tool_takes_a_valid_input_and_refuses_two_invalid_ones() {
    let page = json!({"type": "page", "id": "p1"});
    // (tool, valid, [invalid, expected error fragment] × 2)
    let cases: Vec<Case> = vec![
        (
            "site_list_documents",
            json!({}),
            vec![
                (json!([]), "input must be an object"),
                (json!("x"), "input must be an object"),
            ],
        ),
        (
            "site_list_modules",
            json!({"category": "text"}),
            vec![
                (json!({"category": {}}), "must be a string"),
                (json!({"category": []}), "must be a string"),
            ],
        ),
        (
            "site_list_tokens",
            json!({"family": "colors"}),
            vec![
                (
                    json!({"family": "shadows"}),
                    "input.family must be one of: colors, typography, spacing, fonts",
                ),
                (json!({"family": 1}), "must be one of"),
            ],
        ),
        (
            "site_list_post_types",
            json!({}),
            vec![
                (json!(null), "input must be an object"),
                (json!(3), "input must be an object"),
            ],
        ),
        (
            "site_list_loop_sources",
            json!({}),
            vec![
                (json!(true), "input must be an object"),
                (json!([1]), "input must be an object"),
            ],
        ),
        (
            "site_list_breakpoints",
            json!({}),
            vec![
                (json!("all"), "input must be an object"),
                (json!(0), "input must be an object"),
            ],
        ),
        (
            "site_insert_html",
            json!({"parentId": "n1", "html": "<section class=\"hero\"><h1>Hi</h1></section>"}),
            vec![
                (json!({"html": "<p>x</p>"}), "input.parentId is required"),
                (
                    json!({"parentId": "n1", "html": "<a href=\"{{post.url}}\">x</a>"}),
                    "Loop tokens use single braces: write {currentEntry.field}",
                ),
            ],
        ),
        (
            "site_get_node_html",
            json!({"nodeId": "n1"}),
            vec![
                (json!({}), "input.nodeId is required"),
                (json!({"nodeId": ""}), "input.nodeId must not be empty"),
            ],
        ),
        (
            "site_read_document",
            json!({"document": page, "part": 2}),
            vec![
                (json!({"part": 0}), "input.part must be at least 1"),
                (
                    json!({"document": {"type": "layout", "id": "x"}}),
                    "input.document.type must be",
                ),
            ],
        ),
        (
            "site_open_document",
            json!({"document": {"type": "visualComponent", "id": "vc1"}}),
            vec![
                (json!({}), "input.document is required"),
                (
                    json!({"document": {"type": "page"}}),
                    "input.document.id is required",
                ),
            ],
        ),
        (
            "site_replace_node_html",
            json!({"nodeId": "n1", "html": "<style>.a{color:red}</style>"}),
            vec![
                (json!({"nodeId": "n1"}), "input.html is required"),
                (
                    json!({"nodeId": "n1", "html": "<style>.a { color: red</style><p>x</p>"}),
                    "<style> block 1: CSS does not parse",
                ),
            ],
        ),
        (
            "site_delete_node",
            json!({"nodeId": "n1"}),
            vec![
                (
                    json!({"nodeId": {"id": 5}}),
                    "input.nodeId must be a string",
                ),
                (json!({"id": "n1"}), "input.nodeId is required"),
            ],
        ),
        (
            "site_update_node_props",
            json!({"nodeId": "n1", "patch": {"text": "Hello"}, "breakpointId": "bp-md"}),
            vec![
                (json!({"nodeId": "n1"}), "input.patch is required"),
                (
                    json!({"nodeId": "n1", "patch": "text"}),
                    "input.patch must be an object",
                ),
            ],
        ),
        (
            "site_move_node",
            json!({"nodeId": "n1", "newParentId": "n2", "newIndex": 0}),
            vec![
                (
                    json!({"nodeId": "n1", "newParentId": "n2", "newIndex": -1}),
                    "input.newIndex must be at least 0",
                ),
                (
                    json!({"nodeId": "n1", "newParentId": "n2"}),
                    "input.newIndex is required",
                ),
            ],
        ),
        (
            "site_rename_node",
            json!({"nodeId": "n1", "label": "Hero"}),
            vec![
                (
                    json!({"nodeId": "n1", "label": ""}),
                    "input.label must not be empty",
                ),
                (json!({"label": "x"}), "input.nodeId is required"),
            ],
        ),
        (
            "site_duplicate_node",
            json!({"nodeId": "n1", "count": 3}),
            vec![
                (
                    json!({"nodeId": "n1", "count": 51}),
                    "input.count must be at most 50",
                ),
                (
                    json!({"nodeId": "n1", "count": 0}),
                    "input.count must be at least 1",
                ),
            ],
        ),
        (
            "site_apply_css",
            json!({"operation": "merge", "css": ".hero { color: var(--brand) !important }"}),
            vec![
                (
                    json!({"operation": "delete", "css": ".a{}"}),
                    "site_apply_css delete needs selectors",
                ),
                (
                    json!({"operation": "remove-properties", "selectors": [".a"], "properties": ["9px"]}),
                    "input.properties[0] must match",
                ),
            ],
        ),
        (
            "site_assign_class",
            json!({"nodeId": "n1", "classId": "hero"}),
            vec![
                (json!({"nodeId": "n1"}), "input.classId is required"),
                (json!({"nodeId": "n1", "classId": ""}), "must not be empty"),
            ],
        ),
        (
            "site_remove_class",
            json!({"nodeId": "n1", "classId": "hero"}),
            vec![
                (json!({"classId": "hero"}), "input.nodeId is required"),
                (json!({"nodeId": [], "classId": "x"}), "must be a string"),
            ],
        ),
        (
            "site_list_code_assets",
            json!({"type": "script"}),
            vec![
                (
                    json!({"type": "font"}),
                    "input.type must be one of: script, style",
                ),
                (
                    json!({"type": ["script"]}),
                    "input.type must be one of: script, style",
                ),
            ],
        ),
        (
            "site_read_code_asset",
            json!({"path": "src/app.js", "part": 1, "maxChars": 5000}),
            vec![
                (
                    json!({"maxChars": 100001}),
                    "input.maxChars must be at most 100000",
                ),
                (json!({"part": "first"}), "input.part must be an integer"),
            ],
        ),
        (
            "site_write_code_asset",
            json!({"path": "src/menu.js", "type": "script", "content": "export {}", "dependencies": {"gsap": "3.12.5"}}),
            vec![
                (
                    json!({"path": "a.js", "type": "script"}),
                    "input.content is required",
                ),
                (
                    json!({"path": "a.js", "type": "script", "content": "", "dependencies": {"gsap": ""}}),
                    "input.dependencies.gsap must not be empty",
                ),
            ],
        ),
        (
            "site_patch_code_asset",
            json!({"path": "a.js", "expectedHash": "abc", "replacements": [{"oldText": "a", "newText": "b"}]}),
            vec![
                (
                    json!({"expectedHash": "abc", "replacements": []}),
                    "input.replacements must have at least 1 item",
                ),
                (
                    json!({"expectedHash": "abc", "replacements": [{"newText": "b"}]}),
                    "input.replacements[0].oldText is required",
                ),
            ],
        ),
        (
            "site_inspect_code_runtime",
            json!({"document": page}),
            vec![
                (json!({"document": "p1"}), ""),
                (json!({"document": {"type": "page", "id": ""}}), ""),
            ],
        ),
        (
            "site_add_page",
            json!({"title": "About", "slug": "about"}),
            vec![
                (json!({"slug": "about"}), "input.title is required"),
                (json!({"title": ""}), "input.title must not be empty"),
            ],
        ),
        (
            "site_delete_page",
            json!({"pageId": "p2"}),
            vec![
                (json!({}), "input.pageId is required"),
                (json!({"pageId": {}}), "must be a string"),
            ],
        ),
        (
            "site_rename_page",
            json!({"pageId": "p2", "title": "Team"}),
            vec![
                (json!({"pageId": "p2"}), "input.title is required"),
                (json!({"title": "Team"}), "input.pageId is required"),
            ],
        ),
        (
            "site_duplicate_page",
            json!({"pageId": "p2", "title": "Copy"}),
            vec![
                (json!({"pageId": "p2", "title": ""}), "must not be empty"),
                (json!({"pageId": "p2"}), "input.title is required"),
            ],
        ),
        (
            "site_set_page_template",
            json!({"pageId": "p3", "target": {"kind": "postTypes", "tableSlugs": ["posts"]}, "priority": 50}),
            vec![
                (
                    json!({"pageId": "p3", "target": {"kind": "postTypes", "tableSlugs": []}}),
                    "",
                ),
                (json!({"pageId": "p3", "target": {"kind": "sometimes"}}), ""),
            ],
        ),
        (
            "site_clear_page_template",
            json!({"pageId": "p3"}),
            vec![
                (json!({"pageId": ""}), "must not be empty"),
                (json!({}), "input.pageId is required"),
            ],
        ),
        (
            "site_set_color_tokens",
            json!({"tokens": [{"slug": "brand", "lightValue": "#0af", "darkValue": "#08c"}]}),
            vec![
                (
                    json!({"tokens": []}),
                    "input.tokens must have at least 1 item",
                ),
                (
                    json!({"tokens": [{"slug": "brand"}]}),
                    "input.tokens[0].lightValue is required",
                ),
            ],
        ),
        (
            "site_set_font_tokens",
            json!({"tokens": [{"name": "Heading", "googleFamily": "Inter", "variants": ["700"]}]}),
            vec![
                (
                    json!({"tokens": [{"variable": "--x"}]}),
                    "input.tokens[0].name is required",
                ),
                (
                    json!({"tokens": [{"name": "H", "variants": [""]}]}),
                    "input.tokens[0].variants[0] must not be empty",
                ),
            ],
        ),
        (
            "site_set_type_scale",
            json!({"namingConvention": "text", "baseScaleIndex": 2, "min": {"fontSize": 16, "scaleRatio": 1.2}, "max": {"fontSize": 20, "scaleRatio": "1.333"}}),
            vec![
                (
                    json!({"baseScaleIndex": -2}),
                    "input.baseScaleIndex must be at least 0",
                ),
                (
                    json!({"min": {"fontSize": "big"}}),
                    "input.min.fontSize must be a number",
                ),
            ],
        ),
        (
            "site_set_spacing_scale",
            json!({"namingConvention": "space", "min": {"size": 8}}),
            vec![
                (
                    json!({"max": {"size": []}}),
                    "input.max.size must be a number",
                ),
                (json!({"steps": ""}), "input.steps must not be empty"),
            ],
        ),
        (
            "site_render_snapshot",
            json!({"breakpointId": "bp-md"}),
            vec![
                (json!({"breakpointId": ""}), "must not be empty"),
                (json!({"nodeId": 3.5, "breakpointId": []}), ""),
            ],
        ),
        (
            "content_list_collections",
            json!({}),
            vec![
                (json!([]), "input must be an object"),
                (json!("posts"), "input must be an object"),
            ],
        ),
        (
            "content_get_collection_schema",
            json!({"tableId": "t-posts"}),
            vec![
                (json!({}), "input.tableId is required"),
                (json!({"tableId": ""}), "must not be empty"),
            ],
        ),
        (
            "content_list_documents",
            json!({"tableId": "t-posts", "status": "published", "limit": 10, "offset": 5}),
            vec![
                (
                    json!({"tableId": "t-posts", "limit": 500}),
                    "input.limit must be at most 200",
                ),
                (
                    json!({"tableId": "t-posts", "status": "live"}),
                    "input.status must be one of: draft, unpublished, published, scheduled",
                ),
            ],
        ),
        (
            "content_get_document",
            json!({"documentId": "d1"}),
            vec![
                (json!({}), "input.documentId is required"),
                (
                    json!({"documentId": null}),
                    "input.documentId must be a string",
                ),
            ],
        ),
        (
            "content_search_documents",
            json!({"query": "launch", "limit": 5}),
            vec![
                (json!({"query": ""}), "input.query must not be empty"),
                (
                    json!({"query": "x", "limit": 101}),
                    "input.limit must be at most 100",
                ),
            ],
        ),
        (
            "content_list_users",
            json!({}),
            vec![
                (json!(1), "input must be an object"),
                (json!([{}]), "input must be an object"),
            ],
        ),
        (
            "content_list_media",
            json!({"query": "hero", "mimeType": "image/", "limit": 3}),
            vec![
                (json!({"limit": 0}), "input.limit must be at least 1"),
                (json!({"query": {}}), "must be a string"),
            ],
        ),
        (
            "content_create_document",
            json!({"tableId": "t-posts", "fields": {"title": "Hello"}}),
            vec![
                (json!({"fields": {}}), "input.tableId is required"),
                (
                    json!({"tableId": "t", "fields": []}),
                    "input.fields must be an object",
                ),
            ],
        ),
        (
            "content_delete_document",
            json!({"documentId": "d1"}),
            vec![
                (json!({}), "input.documentId is required"),
                (json!({"documentId": ""}), "must not be empty"),
            ],
        ),
        (
            "content_set_document_status",
            json!({"documentId": "d1", "status": "scheduled", "scheduledAt": "2026-12-24T09:00:00Z"}),
            vec![
                (
                    json!({"documentId": "d1", "status": "archived"}),
                    "input.status must be one of",
                ),
                (json!({"status": "draft"}), "input.documentId is required"),
            ],
        ),
        (
            "content_set_document_field",
            json!({"documentId": "d1", "fieldId": "body", "value": "# Title\n\nText."}),
            vec![
                (
                    json!({"documentId": "d1", "fieldId": "body"}),
                    "input.value is required",
                ),
                (
                    json!({"documentId": "d1", "value": 1}),
                    "input.fieldId is required",
                ),
            ],
        ),
        (
            "content_set_document_fields",
            json!({"documentId": "d1", "fields": {"title": "T", "body": "B"}}),
            vec![
                (json!({"documentId": "d1"}), "input.fields is required"),
                (
                    json!({"documentId": "d1", "fields": "title=T"}),
                    "input.fields must be an object",
                ),
            ],
        ),
        (
            "content_set_document_author",
            json!({"documentId": "d1", "userId": "u2"}),
            vec![
                (json!({"documentId": "d1"}), "input.userId is required"),
                (
                    json!({"documentId": "d1", "userId": ""}),
                    "must not be empty",
                ),
            ],
        ),
        (
            "content_set_active_document",
            json!({"documentId": "d1"}),
            vec![
                (json!({"document": "d1"}), "input.documentId is required"),
                (json!({"documentId": ""}), "must not be empty"),
            ],
        ),
        (
            "content_set_active_collection",
            json!({"tableId": "t-posts"}),
            vec![
                (json!({}), "input.tableId is required"),
                (json!({"tableId": ""}), "must not be empty"),
            ],
        ),
    ];
    let tools = catalogue();
    assert_eq!(cases.len(), tools.len(), "every tool has its cases");
    let caller = everyone();
    for (name, valid, invalid) in cases {
        let spec = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        let accepted = prepare_input(spec, &caller, &valid);
        assert!(accepted.is_ok(), "{name}: {accepted:?}");
        assert_eq!(invalid.len(), 2, "{name}");
        for (input, fragment) in invalid {
            let error = prepare_input(spec, &caller, &input)
                .expect_err(&format!("{name} accepted {input}"));
            assert!(
                error.contains(fragment),
                "{name}: {error:?} lacks {fragment:?}"
            );
        }
    }
}
