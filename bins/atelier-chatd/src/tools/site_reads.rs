//! The site editor's six server-side reads: documents, breakpoints and design tokens from the
//! posted snapshot (the latest one the browser sent with a tool result), the CMS's base
//! module catalogue, and post types and loop sources, whose data tables the CMS lists for the
//! chatting user.

use serde_json::{json, Value};

use super::loop_sources::{loop_sources, DataTable, DataTableField};
use super::snapshot::{DocumentRef, Page, SiteSnapshot};
use super::tokens::TokenFamily;
use crate::cms::reads::{self, CmsReader, ReadError};

/// Runs site read `name` on `input` (already validated) against `snapshot`, asking `cms` for
/// the data tables where a read needs them; `Err` is the tool's error text.
pub async fn run(
    cms: &CmsReader,
    snapshot: &SiteSnapshot,
    name: &str,
    input: &Value,
) -> Result<Value, String> {
    let failed = |error: ReadError| error.for_tool(name);
    match name {
        "site_list_documents" => Ok(list_documents(snapshot)),
        "site_list_modules" => Ok(list_modules(input["category"].as_str())),
        "site_list_tokens" => Ok(json!({"tokens": snapshot
            .tokens()
            .only(input["family"].as_str().and_then(TokenFamily::parse))})),
        "site_list_post_types" => cms
            .tables()
            .await
            .map(|tables| list_post_types(&tables))
            .map_err(failed),
        "site_list_loop_sources" => cms
            .tables()
            .await
            .map(|tables| loop_sources(&data_tables(tables)))
            .map_err(failed),
        "site_list_breakpoints" => Ok(json!({
            "activeBreakpointId": snapshot.active_breakpoint_id,
            "breakpoints": snapshot.site.breakpoints,
        })),
        other => Err(format!("Unknown tool: {other}")),
    }
}

/// The one-line summary of a page or template.
pub fn page_summary(page: &Page) -> String {
    match page.template.as_ref().filter(|t| t.enabled) {
        Some(template) => match template.target.kind.as_str() {
            "everywhere" => "Everywhere template wrapping all pages".to_owned(),
            "notFound" => "404 template".to_owned(),
            _ => format!(
                "Post type template for {}",
                template.target.table_slugs.join(", ")
            ),
        },
        None if page.slug == "index" => "Homepage".to_owned(),
        None => format!("Page /{}", page.slug),
    }
}

/// Every document of the snapshot: the site's pages and templates, then its visual
/// components.
pub fn documents(snapshot: &SiteSnapshot) -> Vec<Value> {
    let current = snapshot.current_document.as_ref();
    let mut out = Vec::new();
    for page in &snapshot.site.pages {
        let reference = SiteSnapshot::page_ref(page);
        let mut entry = json!({
            "document": reference,
            "title": page.title,
            "slug": page.slug,
            "rootNodeId": page.root_node_id,
            "active": page.id == snapshot.page.id,
            "current": current == Some(&reference),
            "isHomepage": page.slug == "index",
            "summary": page_summary(page),
        });
        if let Some(template) = page.template.as_ref().filter(|t| t.enabled) {
            entry["template"] =
                json!({"target": template.target, "priority": template.priority_value()});
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
            "rootNodeId": component.tree.root_node_id,
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

/// The base modules, narrowed to one category (compared without case) when asked.
fn list_modules(category: Option<&str>) -> Value {
    let modules: Vec<Value> = super::base_modules::catalogue()
        .into_iter()
        .filter(|m| {
            category.is_none_or(|c| {
                m["category"]
                    .as_str()
                    .is_some_and(|own| own.eq_ignore_ascii_case(c))
            })
        })
        .collect();
    json!({ "modules": modules })
}

fn list_post_types(tables: &[reads::DataTable]) -> Value {
    let post_types: Vec<Value> = tables
        .iter()
        .filter(|t| !t.route_base.trim().is_empty())
        .map(|t| json!({"slug": t.slug, "label": t.label(), "routeBase": t.route_base, "kind": t.kind}))
        .collect();
    json!({ "postTypes": post_types })
}

/// The CMS's tables as the loop listing takes them.
fn data_tables(tables: Vec<reads::DataTable>) -> Vec<DataTable> {
    let optional = |text: String| Some(text).filter(|t| !t.is_empty());
    tables
        .into_iter()
        .map(|t| DataTable {
            fields: t
                .fields
                .into_iter()
                .map(|f| DataTableField {
                    id: f.id,
                    label: f.label,
                    kind: f.kind,
                    target_table_id: f.target_table_id,
                })
                .collect(),
            id: t.id,
            slug: t.slug,
            name: t.name,
            kind: t.kind,
            singular_label: optional(t.singular_label),
            plural_label: optional(t.plural_label),
            primary_field_id: optional(t.primary_field_id),
            route_base: t.route_base,
            row_count: usize::try_from(t.row_count).unwrap_or(usize::MAX),
        })
        .collect()
}
