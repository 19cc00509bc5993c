//! The site editor's six server-side reads: documents, breakpoints and design tokens from the
//! posted snapshot (the latest one the browser sent with a tool result), the CMS's base
//! module catalogue, and post types and loop sources, whose data tables come from the
//! content store.

use serde_json::{json, Value};

use super::loop_sources::{loop_sources, DataTable, DataTableField};
use super::snapshot::{DocumentRef, Page, SiteSnapshot};
use super::tokens::TokenFamily;
use crate::store::{Store, StoreError};

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
        "site_list_tokens" => Ok(json!({"tokens": snapshot
            .tokens()
            .only(input["family"].as_str().and_then(TokenFamily::parse))})),
        "site_list_post_types" => list_post_types(store).map_err(failed),
        "site_list_loop_sources" => data_tables(store)
            .map(|tables| loop_sources(&tables))
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

/// The content store's collections as data tables, with their row counts.
fn data_tables(store: &Store) -> Result<Vec<DataTable>, StoreError> {
    let mut tables = Vec::new();
    for c in store.collections()? {
        let row_count = store.collection_documents(&c.id)?.len();
        tables.push(DataTable {
            fields: c
                .fields
                .iter()
                .map(|f| DataTableField {
                    id: f.id.clone(),
                    label: f.label.clone(),
                    kind: f.kind.clone(),
                    target_table_id: f.target_table_id.clone(),
                })
                .collect(),
            id: c.id,
            slug: c.slug,
            name: c.name,
            kind: c.kind,
            singular_label: c.singular_label,
            plural_label: c.plural_label,
            primary_field_id: c.primary_field_id,
            route_base: c.route_base,
            row_count,
        });
    }
    Ok(tables)
}
