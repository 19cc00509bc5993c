//! The edge of the HTTP surface: a mutating request's JSON body becomes the contract's typed
//! request here, once, each field refused with the contract's own detail and in its order.
//! The services behind the router take these values and never look at the JSON again.

use atelier_site_api::limits::{check_prompt, BadPrompt, MAX_NOTE_CHARS};
use atelier_site_api::{CreateSite, DriverId, Publish, Rollback, SendMessage, Slug, StartSession};
use serde_json::Value;

use crate::manifest::MAX_NAME_CHARS;
use crate::publishing::PublishError;
use crate::sessions::SessionError;
use crate::sites::SiteError;

/// `POST /v1/sites`: the slug's grammar, then the name. The domain is kept as given, because
/// the contract refuses a taken slug before a bad domain; a template that is not a string is
/// kept as its JSON text, which names no template.
pub fn create_site(body: &Value) -> Result<CreateSite, SiteError> {
    let slug = Slug::parse(body.get("slug").and_then(Value::as_str).unwrap_or(""))?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.chars().count() <= MAX_NAME_CHARS)
        .ok_or(SiteError::BadName)?
        .to_owned();
    let domain = body
        .get("domain")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let template = match body.get("template") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(other) => Some(other.to_string()),
    };
    Ok(CreateSite {
        slug,
        name,
        domain,
        template,
        driver: driver(body),
    })
}

/// `POST /v1/sites/:slug/sessions`: the prompt, and the driver when it names a known one.
pub fn start_session(body: &Value) -> Result<StartSession, SessionError> {
    Ok(StartSession {
        prompt: text(body.get("prompt"), "prompt")?,
        driver: driver(body),
    })
}

/// `POST /v1/sessions/:id/messages`: the message.
pub fn send_message(body: &Value) -> Result<SendMessage, SessionError> {
    Ok(SendMessage {
        message: text(body.get("message"), "message")?,
    })
}

/// `POST /v1/sites/:slug/publish`: `confirm` must be exactly `true`; the note is cut to its
/// limit.
pub fn publish(body: &Value) -> Result<Publish, PublishError> {
    if body.get("confirm") != Some(&Value::Bool(true)) {
        return Err(PublishError::Validation(
            "publish requires an explicit confirm: true",
        ));
    }
    let note = body
        .get("note")
        .and_then(Value::as_str)
        .map(|n| n.chars().take(MAX_NOTE_CHARS).collect());
    Ok(Publish {
        confirm: true,
        note,
    })
}

/// `POST /v1/sites/:slug/rollback`: the release as text (absent is empty, which the service
/// refuses as required; a non-string is its JSON text, which names no release).
pub fn rollback(body: &Value) -> Rollback {
    let release = match body.get("release") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Rollback { release }
}

/// A known driver named by the body's `driver`; an unknown one is ignored, as the original
/// daemon ignored it.
fn driver(body: &Value) -> Option<DriverId> {
    body.get("driver")
        .and_then(Value::as_str)
        .and_then(DriverId::parse)
}

/// A prompt or message: a string that is not blank, at most the prompt limit in UTF-16 units.
fn text(value: Option<&Value>, field: &str) -> Result<String, SessionError> {
    let blank = || SessionError::Validation(format!("{field} must be a non-empty string"));
    let text = value.and_then(Value::as_str).ok_or_else(blank)?;
    check_prompt(text).map_err(|bad| match bad {
        BadPrompt::Blank => blank(),
        BadPrompt::TooLong(_) => SessionError::Validation(format!("{field} exceeds 32 KiB")),
    })?;
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use atelier_site_api::limits::MAX_PROMPT_UNITS;
    use serde_json::json;

    #[test]
    fn prompts_are_checked_in_utf16_units() {
        assert!(text(Some(&json!("  ")), "prompt").is_err());
        assert!(text(Some(&json!(3)), "prompt").is_err());
        assert!(text(None, "prompt").is_err());
        let max = "é".repeat(MAX_PROMPT_UNITS);
        assert!(text(Some(&json!(max)), "prompt").is_ok());
        let over = "😀".repeat(MAX_PROMPT_UNITS / 2 + 1);
        let err = text(Some(&json!(over)), "prompt").unwrap_err();
        assert_eq!(err.to_string(), "prompt exceeds 32 KiB");
    }

    #[test]
    fn bodies_become_typed_requests_with_the_contracts_refusals() {
        let site = create_site(
            &json!({"slug": "alpha", "name": " Alpha ", "domain": "A.example",
            "template": 7, "driver": "gpt"}),
        )
        .unwrap();
        assert_eq!(site.slug.as_str(), "alpha");
        assert_eq!(site.name, "Alpha");
        assert_eq!(site.domain, "A.example", "the grammar is checked later");
        assert_eq!(site.template.as_deref(), Some("7"));
        assert_eq!(site.driver, None, "an unknown driver is ignored");
        assert!(matches!(
            create_site(&json!({"slug": "A", "name": ""})),
            Err(SiteError::BadSlug(_))
        ));
        assert!(matches!(
            create_site(&json!({"slug": "alpha", "name": "  "})),
            Err(SiteError::BadName)
        ));
        let start = start_session(&json!({"prompt": "p", "driver": "pi"})).unwrap();
        assert_eq!(start.driver, Some(DriverId::Pi));
        assert!(publish(&json!({"confirm": "true"})).is_err());
        let note = publish(&json!({"confirm": true, "note": "n".repeat(600)})).unwrap();
        assert_eq!(note.note.map(|n| n.chars().count()), Some(MAX_NOTE_CHARS));
        assert_eq!(rollback(&json!({})).release, "");
        assert_eq!(rollback(&json!({"release": 5})).release, "5");
    }
}
