//! Conversations CRUD, every query scoped to the acting user, and the wire views.

use atelier_http::{json_response, Request, Response};
use hyper::header::{
    HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS,
};
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::caller::{Caller, Capability};
use crate::encode::encode_component;
use crate::error::ApiError;
use crate::state::{blocking, State, API_PREFIX};
use crate::store::{
    ContentBlock, Conversation, ConversationUpdate, Message, NewConversation, Role, Scope,
};

/// Conversation bodies are small; anything bigger is not a conversation edit.
const BODY_LIMIT: usize = 64 * 1024;

/// What a stored image that is not JPEG shows as in a detail view.
pub const UNSUPPORTED_IMAGE_TEXT: &str =
    "[Stored image omitted because its format is not supported by conversation preview.]";

/// A conversation with its messages: `ConversationDetailView`.
#[derive(Debug, Serialize)]
pub struct ConversationDetailView {
    /// The conversation (`ConversationView`).
    #[serde(flatten)]
    pub conversation: Conversation,
    /// Its messages in position order.
    pub messages: Vec<MessageView>,
}

/// A message as the editor shows it: `MessageView`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    /// Its id.
    pub id: String,
    /// Its position.
    pub position: i64,
    /// Who wrote it.
    pub role: Role,
    /// Its blocks, images replaced by URLs.
    pub content: Vec<Value>,
    /// The tool call it belongs to.
    pub tool_call_id: Option<String>,
    /// The tool's name.
    pub tool_name: Option<String>,
    /// When it was written.
    pub created_at: String,
}

impl MessageView {
    /// The view of `message` in conversation `conversation_id`.
    pub fn new(conversation_id: &str, message: Message) -> Self {
        let content = message
            .content
            .iter()
            .enumerate()
            .map(|(index, block)| view_block(conversation_id, &message.id, index, block))
            .collect();
        let (tool_call_id, tool_name) = match message.tool_call {
            Some(call) => (Some(call.id), Some(call.name)),
            None => (None, None),
        };
        Self {
            id: message.id,
            position: message.position,
            role: message.role,
            content,
            tool_call_id,
            tool_name,
            created_at: message.created_at,
        }
    }
}

fn view_block(
    conversation_id: &str,
    message_id: &str,
    index: usize,
    block: &ContentBlock,
) -> Value {
    match block {
        ContentBlock::Image { mime_type, .. } if mime_type == "image/jpeg" => json!({
            "kind": "image",
            "mimeType": "image/jpeg",
            "url": format!(
                "{API_PREFIX}conversations/{}/messages/{}/images/{index}",
                encode_component(conversation_id),
                encode_component(message_id)
            ),
        }),
        ContentBlock::Image { .. } => json!({ "kind": "text", "text": UNSUPPORTED_IMAGE_TEXT }),
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody {
    scope: Scope,
    title: Option<String>,
    credential_id: String,
    model_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateBody {
    title: Option<String>,
    credential_id: Option<String>,
    model_id: Option<String>,
}

/// Reads a JSON body; any failure, size included, is the generic 400.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    request: Request,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = atelier_http::read_body(request.into_body(), limit)
        .await
        .map_err(|_| ApiError::InvalidBody)?;
    serde_json::from_slice(&bytes).map_err(|_| ApiError::InvalidBody)
}

fn non_empty(value: Option<&String>) -> Result<(), ApiError> {
    match value {
        Some(text) if text.is_empty() => Err(ApiError::InvalidBody),
        _ => Ok(()),
    }
}

/// `GET /conversations?scope=`.
pub(crate) async fn list(
    state: &State,
    caller: &Caller,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let scope = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("scope="))
        .and_then(Scope::parse)
        .ok_or(ApiError::ScopeQueryRequired)?;
    let user = caller.user_id.clone();
    let conversations = blocking(&state.store, move |store| {
        store.list_conversations(&user, scope)
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "conversations": conversations }),
    ))
}

/// `POST /conversations`.
pub(crate) async fn create(
    state: &State,
    caller: &Caller,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let body: CreateBody = read_json(request, BODY_LIMIT).await?;
    non_empty(Some(&body.credential_id))?;
    non_empty(Some(&body.model_id))?;
    let user = caller.user_id.clone();
    let new = NewConversation {
        scope: body.scope,
        title: body.title,
        credential_id: body.credential_id,
        model_id: body.model_id,
    };
    let conversation = blocking(&state.store, move |store| {
        store.create_conversation(&user, &new)
    })
    .await?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({ "conversation": conversation }),
    ))
}

/// `GET /conversations/:id`.
pub(crate) async fn detail(
    state: &State,
    caller: &Caller,
    id: String,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let user = caller.user_id.clone();
    let (conversation, messages) = blocking(&state.store, move |store| {
        let Some(conversation) = store.conversation(&user, &id)? else {
            return Ok(None);
        };
        let messages = store.messages(&id)?;
        Ok(Some((conversation, messages)))
    })
    .await?
    .ok_or(ApiError::ConversationNotFound)?;
    let messages = messages
        .into_iter()
        .map(|message| MessageView::new(&conversation.id, message))
        .collect();
    Ok(private_json(
        StatusCode::OK,
        &json!({ "conversation": ConversationDetailView { conversation, messages } }),
    ))
}

/// A JSON answer marked `Cache-Control: private, no-store`, as the detail and chat answers are.
fn private_json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    let mut response = json_response(status, value);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    response
}

/// `PUT /conversations/:id`.
pub(crate) async fn update(
    state: &State,
    caller: &Caller,
    id: String,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let body: UpdateBody = read_json(request, BODY_LIMIT).await?;
    non_empty(body.title.as_ref())?;
    non_empty(body.credential_id.as_ref())?;
    non_empty(body.model_id.as_ref())?;
    let user = caller.user_id.clone();
    let update = ConversationUpdate {
        title: body.title,
        credential_id: body.credential_id,
        model_id: body.model_id,
    };
    let conversation = blocking(&state.store, move |store| {
        store.update_conversation(&user, &id, &update)
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "conversation": conversation }),
    ))
}

/// `DELETE /conversations/:id`.
pub(crate) async fn delete(
    state: &State,
    caller: &Caller,
    id: String,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let user = caller.user_id.clone();
    let deleted = blocking(&state.store, move |store| {
        store.delete_conversation(&user, &id)
    })
    .await?;
    if deleted {
        Ok(json_response(StatusCode::OK, &json!({ "ok": true })))
    } else {
        Err(ApiError::ConversationNotFound)
    }
}

/// The longest stored image served, in base64 characters.
const MAX_IMAGE_BASE64_LEN: usize = 2_000_000;

/// The largest decoded image served, in bytes.
const MAX_IMAGE_BYTES: usize = 1_500_000;

/// `GET /conversations/:cid/messages/:mid/images/:index`: a stored JPEG, served only when its
/// base64 is canonical and the bytes are plausibly a JPEG.
pub(crate) async fn image(
    state: &State,
    caller: &Caller,
    conversation_id: String,
    message_id: String,
    index: &str,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let index: usize = index.parse().map_err(|_| ApiError::ImageNotFound)?;
    let user = caller.user_id.clone();
    let message = blocking(&state.store, move |store| {
        if store.conversation(&user, &conversation_id)?.is_none() {
            return Ok(None);
        }
        store.message(&conversation_id, &message_id)
    })
    .await?;
    let data = message
        .and_then(|m| m.content.into_iter().nth(index))
        .and_then(|block| match block {
            ContentBlock::Image { mime_type, data } if mime_type == "image/jpeg" => Some(data),
            _ => None,
        })
        .ok_or(ApiError::ImageNotFound)?;
    let bytes = decode_jpeg(&data).ok_or(ApiError::ImageNotFound)?;
    let length = bytes.len();
    let mut response = Response::new(atelier_http::full_body(bytes));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("image/jpeg"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    Ok(response)
}

/// Canonical standard base64 of 1 to 1,500,000 bytes starting with the JPEG marker `FF D8 FF`.
fn decode_jpeg(data: &str) -> Option<Vec<u8>> {
    if data.is_empty() || data.len() > MAX_IMAGE_BASE64_LEN {
        return None;
    }
    let bytes = crate::images::decode_canonical_base64(data)?;
    let plausible =
        (1..=MAX_IMAGE_BYTES).contains(&bytes.len()) && bytes.starts_with(&[0xFF, 0xD8, 0xFF]);
    plausible.then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_base64_jpegs_are_served() {
        assert_eq!(decode_jpeg("/9j/"), Some(vec![0xFF, 0xD8, 0xFF]));
        assert_eq!(decode_jpeg("/9j/4A=="), Some(vec![0xFF, 0xD8, 0xFF, 0xE0]));
        for refused in ["", "/9j", "/9j/4B==", "/9j/4A=A", "TQ==TWFu", "/9j/4A==="] {
            assert_eq!(decode_jpeg(refused), None, "{refused}");
        }
        // Canonical, but not a JPEG.
        assert_eq!(decode_jpeg("TWFu"), None);
    }

    #[test]
    fn image_blocks_become_urls_and_other_formats_a_note() {
        let message = Message {
            id: "m 1".into(),
            position: 0,
            role: Role::User,
            content: vec![
                ContentBlock::Text { text: "hi".into() },
                ContentBlock::Image {
                    mime_type: "image/jpeg".into(),
                    data: "AAAA".into(),
                },
                ContentBlock::Image {
                    mime_type: "image/png".into(),
                    data: "AAAA".into(),
                },
            ],
            tool_call: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
        };
        let view = serde_json::to_value(MessageView::new("c/1", message)).unwrap();
        assert_eq!(
            view["content"],
            json!([
                {"kind": "text", "text": "hi"},
                {"kind": "image", "mimeType": "image/jpeg",
                 "url": "/admin/api/ai/conversations/c%2F1/messages/m%201/images/1"},
                {"kind": "text", "text": UNSUPPORTED_IMAGE_TEXT},
            ])
        );
        assert_eq!(view["toolCallId"], Value::Null);
        assert_eq!(view["role"], "user");
    }
}
