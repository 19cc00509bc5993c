//! The content workspace's seven server-side reads (chat_runtime.md §10.5), over the content
//! store. Lists are filtered and paged here, so a result stays small whatever the store holds.

use serde_json::{json, Value};

use crate::store::content::{Collection, Document, Field};
use crate::store::{Store, StoreError};

/// The kinds of collection the content workspace shows.
const VISIBLE_KINDS: [&str; 2] = ["postType", "page"];

/// Runs content read `name` on `input` (already validated); `Err` is the tool's error text.
pub fn run(store: &Store, name: &str, input: &Value) -> Result<Value, String> {
    let failed = |error: StoreError| format!("The content store could not be read: {error}");
    match name {
        "content_list_collections" => list_collections(store).map_err(failed),
        "content_get_collection_schema" => {
            collection_schema(store, input["tableId"].as_str().unwrap_or_default())
                .map_err(failed)?
        }
        "content_list_documents" => list_documents(store, input).map_err(failed),
        "content_get_document" => {
            get_document(store, input["documentId"].as_str().unwrap_or_default()).map_err(failed)?
        }
        "content_search_documents" => search_documents(store, input).map_err(failed),
        "content_list_users" => list_users(store).map_err(failed),
        "content_list_media" => list_media(store, input).map_err(failed),
        other => Err(format!("Unknown tool: {other}")),
    }
}

fn label(collection: &Collection) -> &str {
    collection
        .plural_label
        .as_deref()
        .filter(|l| !l.is_empty())
        .unwrap_or(&collection.name)
}

fn summary(store: &Store, collection: &Collection) -> Result<Value, StoreError> {
    let rows = store.collection_documents(&collection.id)?.len();
    Ok(json!({
        "id": collection.id,
        "slug": collection.slug,
        "label": label(collection),
        "kind": collection.kind,
        "rowCount": rows,
        "primaryFieldId": collection.primary_field_id,
    }))
}

fn list_collections(store: &Store) -> Result<Value, StoreError> {
    let mut collections = Vec::new();
    for collection in store.collections()? {
        if VISIBLE_KINDS.contains(&collection.kind.as_str()) {
            collections.push(summary(store, &collection)?);
        }
    }
    Ok(json!({ "collections": collections }))
}

fn field_view(field: &Field) -> Value {
    let mut view = json!({
        "id": field.id, "label": field.label, "type": field.kind,
        "required": field.required, "builtIn": field.built_in,
    });
    match field.kind.as_str() {
        "select" | "multiSelect" => {
            view["options"] = json!(field.options.clone().unwrap_or_default());
        }
        "media" => {
            view["mediaKind"] = json!(field.media_kind);
            view["allowMultiple"] = json!(field.allow_multiple.unwrap_or(false));
        }
        "relation" => {
            view["targetTableId"] = json!(field.target_table_id);
            view["allowMultiple"] = json!(field.allow_multiple.unwrap_or(false));
        }
        _ => {}
    }
    view
}

fn collection_schema(store: &Store, id: &str) -> Result<Result<Value, String>, StoreError> {
    // Every collection, not only the visible ones: a relation may point anywhere.
    let Some(collection) = store.collections()?.into_iter().find(|c| c.id == id) else {
        return Ok(Err(format!("Collection {id} not found.")));
    };
    let mut view = summary(store, &collection)?;
    view["fields"] = collection.fields.iter().map(field_view).collect();
    Ok(Ok(json!({ "collection": view })))
}

fn light(document: &Document) -> Value {
    json!({
        "id": document.id, "tableId": document.collection_id, "title": document.title,
        "slug": document.slug, "status": document.status,
        "authorUserId": document.author_user_id, "updatedAt": document.updated_at,
    })
}

fn usize_of(input: &Value, key: &str, default: usize) -> usize {
    input[key]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(default)
}

fn list_documents(store: &Store, input: &Value) -> Result<Value, StoreError> {
    let table = input["tableId"].as_str().unwrap_or_default();
    let limit = usize_of(input, "limit", 25);
    let offset = usize_of(input, "offset", 0);
    let matching: Vec<Document> = store
        .collection_documents(table)?
        .into_iter()
        .filter(|d| input["status"].as_str().is_none_or(|s| d.status == s))
        .filter(|d| {
            input["authorUserId"]
                .as_str()
                .is_none_or(|a| d.author_user_id.as_deref() == Some(a))
        })
        .collect();
    let page: Vec<Value> = matching
        .iter()
        .skip(offset)
        .take(limit)
        .map(light)
        .collect();
    Ok(json!({"total": matching.len(), "offset": offset, "limit": limit, "documents": page}))
}

fn get_document(store: &Store, id: &str) -> Result<Result<Value, String>, StoreError> {
    let Some(d) = store.content_document(id)? else {
        return Ok(Err(format!("Document {id} not found.")));
    };
    Ok(Ok(json!({"document": {
        "id": d.id, "tableId": d.collection_id, "title": d.title, "slug": d.slug,
        "status": d.status, "authorUserId": d.author_user_id, "createdAt": d.created_at,
        "updatedAt": d.updated_at, "publishedAt": d.published_at,
        "scheduledPublishAt": d.scheduled_publish_at, "fields": d.fields,
    }})))
}

fn search_documents(store: &Store, input: &Value) -> Result<Value, StoreError> {
    let query = input["query"].as_str().unwrap_or_default().to_lowercase();
    let limit = usize_of(input, "limit", 25);
    let collections = store.collections()?;
    let mut results = Vec::new();
    for document in store.all_documents()? {
        if results.len() >= limit {
            break;
        }
        let Some(collection) = collections
            .iter()
            .find(|c| c.id == document.collection_id && VISIBLE_KINDS.contains(&c.kind.as_str()))
        else {
            continue;
        };
        let hit = document.title.to_lowercase().contains(&query)
            || document
                .slug
                .as_deref()
                .is_some_and(|s| s.to_lowercase().contains(&query));
        if hit {
            results.push(json!({
                "id": document.id, "tableId": collection.id, "tableSlug": collection.slug,
                "tableName": collection.name, "slug": document.slug, "status": document.status,
                "updatedAt": document.updated_at,
            }));
        }
    }
    Ok(json!({"query": input["query"], "results": results}))
}

fn list_users(store: &Store) -> Result<Value, StoreError> {
    Ok(json!({ "users": store.content_users()? }))
}

fn list_media(store: &Store, input: &Value) -> Result<Value, StoreError> {
    let query = input["query"].as_str().unwrap_or_default().to_lowercase();
    let mime = input["mimeType"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    let limit = usize_of(input, "limit", 25);
    let matching: Vec<_> = store
        .content_media()?
        .into_iter()
        .filter(|m| {
            format!("{} {}", m.filename, m.alt_text.as_deref().unwrap_or(""))
                .to_lowercase()
                .contains(&query)
        })
        .filter(|m| m.mime_type.to_lowercase().contains(&mime))
        .collect();
    let media: Vec<_> = matching.iter().take(limit).collect();
    Ok(json!({"total": matching.len(), "media": media}))
}
