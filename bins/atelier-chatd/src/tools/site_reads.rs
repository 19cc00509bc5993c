//! The site editor's six server-side reads (chat_runtime.md §10.3): documents, breakpoints and
//! tokens from the posted snapshot (the latest one the browser sent with a tool result), the
//! shipped module registry, and post types and loop sources from the content store.

use serde_json::{json, Value};

use super::snapshot::{DocumentRef, Page, SiteSnapshot, Tokens};
use crate::store::{Store, StoreError};

/// The element modules chatd ships, as `(id, name, category, props schema, defaults)`.
/// `base.body` is the document root and is never offered.
fn registry() -> Vec<Value> {
    let module = |id: &str, name: &str, category: &str, props: Value, defaults: Value| json!({"id": id, "name": name, "category": category, "props": props, "defaults": defaults});
    let text = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    vec![
        module(
            "base.body",
            "Body",
            "structure",
            json!({"type": "object"}),
            json!({}),
        ),
        module(
            "base.section",
            "Section",
            "structure",
            json!({"type": "object", "properties": {"tag": {"type": "string"}}}),
            json!({"tag": "section"}),
        ),
        module(
            "base.container",
            "Container",
            "structure",
            json!({"type": "object", "properties": {"tag": {"type": "string"}}}),
            json!({"tag": "div"}),
        ),
        module(
            "base.heading",
            "Heading",
            "text",
            json!({"type": "object", "properties": {"text": {"type": "string"}, "level": {"type": "integer", "minimum": 1, "maximum": 6}}}),
            json!({"level": 2}),
        ),
        module(
            "base.text",
            "Text",
            "text",
            text.clone(),
            json!({"text": ""}),
        ),
        module(
            "base.link",
            "Link",
            "text",
            json!({"type": "object", "properties": {"text": {"type": "string"}, "href": {"type": "string"}}}),
            json!({"href": "#"}),
        ),
        module(
            "base.button",
            "Button",
            "interactive",
            json!({"type": "object", "properties": {"text": {"type": "string"}, "href": {"type": "string"}}}),
            json!({"text": "Button"}),
        ),
        module(
            "base.image",
            "Image",
            "media",
            json!({"type": "object", "properties": {"src": {"type": "string"}, "alt": {"type": "string"}}}),
            json!({"alt": ""}),
        ),
        module(
            "base.list",
            "List",
            "text",
            json!({"type": "object", "properties": {"ordered": {"type": "boolean"}}}),
            json!({"ordered": false}),
        ),
        module(
            "base.loop",
            "Loop",
            "data",
            json!({"type": "object", "properties": {"sourceId": {"type": "string"}, "limit": {"type": "integer"}}}),
            json!({"sourceId": "data.rows"}),
        ),
        module(
            "base.outlet",
            "Template outlet",
            "structure",
            json!({"type": "object"}),
            json!({}),
        ),
    ]
}

/// Runs site read `name` on `input` (already validated) against `snapshot`; `Err` is the tool's
/// error text.
pub fn run(
    store: &Store,
    snapshot: &SiteSnapshot,
    name: &str,
    input: &Value,
) -> Result<Value, String> {
    let failed = |error: StoreError| format!("The content store could not be read: {error}");
    match name {
        "site_list_documents" => Ok(list_documents(snapshot)),
        "site_list_modules" => Ok(list_modules(input["category"].as_str())),
        "site_list_tokens" => Ok(list_tokens(&snapshot.site.tokens, input["family"].as_str())),
        "site_list_post_types" => list_post_types(store).map_err(failed),
        "site_list_loop_sources" => list_loop_sources(store).map_err(failed),
        "site_list_breakpoints" => Ok(json!({
            "activeBreakpointId": snapshot.active_breakpoint_id,
            "breakpoints": snapshot.site.breakpoints,
        })),
        other => Err(format!("Unknown tool: {other}")),
    }
}

/// The one-line summary of a page or template.
pub fn page_summary(page: &Page) -> String {
    match &page.template {
        Some(template) => match template.target.kind.as_str() {
            "everywhere" => "Everywhere template wrapping all pages".to_owned(),
            "notFound" => "404 template".to_owned(),
            _ => format!(
                "Post type template for {}",
                template.target.table_slugs.join(", ")
            ),
        },
        None => match page.slug.as_deref() {
            Some("index") => "Homepage".to_owned(),
            Some(slug) => format!("Page /{slug}"),
            None => "Page".to_owned(),
        },
    }
}

/// Every document of the snapshot: pages and templates, then visual components.
pub fn documents(snapshot: &SiteSnapshot) -> Vec<Value> {
    let current = snapshot.current_document.as_ref();
    let mut out = Vec::new();
    let mut pages: Vec<&Page> = snapshot.site.pages.iter().collect();
    if !snapshot.page.id.is_empty() && !pages.iter().any(|p| p.id == snapshot.page.id) {
        pages.insert(0, &snapshot.page);
    }
    for page in pages {
        let reference = SiteSnapshot::page_ref(page);
        let mut entry = json!({
            "document": reference,
            "title": page.title,
            "rootNodeId": page.root_node_id,
            "active": page.id == snapshot.page.id,
            "current": current == Some(&reference),
            "summary": page_summary(page),
        });
        if let Some(slug) = &page.slug {
            entry["slug"] = json!(slug);
            entry["isHomepage"] = json!(slug == "index");
        }
        if let Some(template) = &page.template {
            entry["template"] = json!({"target": template.target, "priority": template.priority});
        }
        out.push(entry);
    }
    for component in &snapshot.site.visual_components {
        let reference = DocumentRef {
            kind: "visualComponent".to_owned(),
            id: component.id.clone(),
        };
        out.push(json!({
            "document": reference,
            "title": component.name,
            "rootNodeId": component.root_node_id,
            "active": false,
            "current": current == Some(&reference),
            "summary": "Visual component definition",
        }));
    }
    out
}

fn list_documents(snapshot: &SiteSnapshot) -> Value {
    json!({"currentDocument": snapshot.current_document, "documents": documents(snapshot)})
}

fn list_modules(category: Option<&str>) -> Value {
    let mut modules: Vec<Value> = registry()
        .into_iter()
        .filter(|m| m["id"] != "base.body")
        .filter(|m| {
            category.is_none_or(|c| {
                m["category"]
                    .as_str()
                    .is_some_and(|own| own.eq_ignore_ascii_case(c))
            })
        })
        .collect();
    modules.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    json!({ "modules": modules })
}

fn list_tokens(tokens: &Tokens, family: Option<&str>) -> Value {
    let wanted = |name: &str| family.is_none_or(|f| f == name);
    let colors: Vec<Value> = if wanted("colors") {
        tokens
            .colors
            .iter()
            .map(|c| {
                json!({"slug": c.slug, "value": c.value, "darkValue": c.dark_value,
                       "cssVar": format!("--{}", c.slug), "ref": format!("var(--{})", c.slug),
                       "utilities": [format!("text-{}", c.slug), format!("bg-{}", c.slug)]})
            })
            .collect()
    } else {
        Vec::new()
    };
    let scale = |groups: &[super::snapshot::ScaleGroup]| -> Vec<Value> {
        groups
            .iter()
            .map(|g| {
                json!({"groupId": g.id, "namingConvention": g.naming_convention,
                       "steps": g.steps.iter().map(|s| json!({"step": s,
                           "cssVar": format!("--{}-{s}", g.naming_convention)})).collect::<Vec<_>>()})
            })
            .collect()
    };
    json!({"tokens": {
        "colors": colors,
        "typography": if wanted("typography") { scale(&tokens.typography) } else { Vec::new() },
        "spacing": if wanted("spacing") { scale(&tokens.spacing) } else { Vec::new() },
        "fonts": if wanted("fonts") { serde_json::to_value(&tokens.fonts).unwrap_or_default() } else { json!([]) },
    }})
}

fn list_post_types(store: &Store) -> Result<Value, StoreError> {
    let post_types: Vec<Value> = store
        .collections()?
        .into_iter()
        .filter(|c| !c.route_base.trim().is_empty())
        .map(|c| {
            let label = c
                .plural_label
                .clone()
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| c.name.clone());
            json!({"slug": c.slug, "label": label, "routeBase": c.route_base, "kind": c.kind})
        })
        .collect();
    Ok(json!({ "postTypes": post_types }))
}

fn list_loop_sources(store: &Store) -> Result<Value, StoreError> {
    let mut tables = Vec::new();
    for c in store.collections()? {
        let rows = store.collection_documents(&c.id)?.len();
        let fields: Vec<Value> = c
            .fields
            .iter()
            .map(|f| {
                let mut field = json!({"id": f.id, "label": f.label, "type": f.kind,
                                       "token": format!("{{currentEntry.{}}}", f.id)});
                if let Some(format) = &f.format {
                    field["format"] = json!(format);
                }
                field
            })
            .collect();
        tables.push(json!({
            "id": c.id, "slug": c.slug, "name": c.name, "kind": c.kind,
            "singularLabel": c.singular_label, "pluralLabel": c.plural_label,
            "primaryFieldId": c.primary_field_id, "routable": !c.route_base.trim().is_empty(),
            "versioned": c.versioned, "rowCount": rows, "fields": fields,
        }));
    }
    Ok(json!({
        "usage": {"loopElement": "instatic-loop", "tokenSyntax": "{currentEntry.field}",
                  "invalidTokenSyntax": "{{post.field}}"},
        "sources": [{
            "id": "data.rows", "label": "Data table rows",
            "description": "Rows of one data table; name it with data-table-id.",
            "requestDependent": false, "perVisitor": false,
            "fields": [
                {"id": "title", "label": "Title", "token": "{currentEntry.title}"},
                {"id": "permalink", "label": "Permalink", "token": "{currentEntry.permalink}", "format": "url"},
                {"id": "publishedAt", "label": "Published", "token": "{currentEntry.publishedAt}", "format": "date"},
            ],
            "filterSchema": {"type": "object", "properties": {"status": {"type": "string"}}},
            "orderByOptions": ["publishedAt", "updatedAt", "title"],
        }],
        "dataTables": tables,
    }))
}
