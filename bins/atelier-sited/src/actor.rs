//! The `actor` every mutating body carries: recorded (audit, owner), never used to authorize.

use atelier_site_api::limits::MAX_USERNAME_CHARS;
use serde_json::Value;

pub use atelier_site_api::Actor;

/// A body or actor refusal; the message is the contract's exact 400 detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefusal {
    /// The body is not JSON.
    #[error("Request body must be valid JSON")]
    NotJson,
    /// The body is JSON but not an object.
    #[error("Request body must be a JSON object")]
    NotObject,
    /// No `actor`.
    #[error("Missing required field: actor {{user_id, username}}")]
    MissingActor,
    /// `actor.user_id` is not an integer.
    #[error("actor.user_id must be an integer")]
    BadUserId,
    /// `actor.username` is not a 1–200 char string.
    #[error("actor.username must be a non-empty string")]
    BadUsername,
}

/// Parses a mutating request's body: empty text is `{}`, anything else must be JSON.
pub fn parse_body(bytes: &[u8]) -> Result<Value, BodyRefusal> {
    if bytes.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_slice(bytes).map_err(|_| BodyRefusal::NotJson)
}

/// The actor of a parsed body, checked in the contract's order.
pub fn actor_of(body: &Value) -> Result<Actor, BodyRefusal> {
    let object = body.as_object().ok_or(BodyRefusal::NotObject)?;
    let actor = match object.get("actor") {
        Some(Value::Object(actor)) => actor,
        _ => return Err(BodyRefusal::MissingActor),
    };
    let user_id = actor
        .get("user_id")
        .and_then(integer)
        .ok_or(BodyRefusal::BadUserId)?;
    let username = actor
        .get("username")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty() && u.chars().count() <= MAX_USERNAME_CHARS)
        .ok_or(BodyRefusal::BadUsername)?;
    Ok(Actor {
        user_id,
        username: username.to_owned(),
    })
}

/// A JSON number that is an integer in JavaScript's sense (`1.0` counts).
fn integer(value: &Value) -> Option<i64> {
    if let Some(i) = value.as_i64() {
        return Some(i);
    }
    let f = value.as_f64()?;
    (f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0).then_some(f as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn actor_table() {
        let ok = Actor {
            user_id: 3,
            username: "ana".into(),
        };
        let cases: Vec<(&str, &[u8], Result<Actor, BodyRefusal>)> = vec![
            (
                "valid",
                br#"{"actor":{"user_id":3,"username":"ana"}}"#,
                Ok(ok.clone()),
            ),
            (
                "integral float",
                br#"{"actor":{"user_id":3.0,"username":"ana"}}"#,
                Ok(ok),
            ),
            ("empty body", b"", Err(BodyRefusal::MissingActor)),
            ("not json", b"{", Err(BodyRefusal::NotJson)),
            ("array", b"[]", Err(BodyRefusal::NotObject)),
            ("string", b"\"x\"", Err(BodyRefusal::NotObject)),
            (
                "actor null",
                br#"{"actor":null}"#,
                Err(BodyRefusal::MissingActor),
            ),
            (
                "actor string",
                br#"{"actor":"ana"}"#,
                Err(BodyRefusal::MissingActor),
            ),
            (
                "no user id",
                br#"{"actor":{"username":"ana"}}"#,
                Err(BodyRefusal::BadUserId),
            ),
            (
                "string user id",
                br#"{"actor":{"user_id":"3","username":"ana"}}"#,
                Err(BodyRefusal::BadUserId),
            ),
            (
                "fractional user id",
                br#"{"actor":{"user_id":3.5,"username":"ana"}}"#,
                Err(BodyRefusal::BadUserId),
            ),
            (
                "no username",
                br#"{"actor":{"user_id":3}}"#,
                Err(BodyRefusal::BadUsername),
            ),
            (
                "empty username",
                br#"{"actor":{"user_id":3,"username":""}}"#,
                Err(BodyRefusal::BadUsername),
            ),
            (
                "numeric username",
                br#"{"actor":{"user_id":3,"username":3}}"#,
                Err(BodyRefusal::BadUsername),
            ),
        ];
        for (name, body, want) in cases {
            let got = parse_body(body).and_then(|b| actor_of(&b));
            assert_eq!(got, want, "case {name}");
        }
        let long = json!({"actor": {"user_id": 1, "username": "u".repeat(201)}});
        assert_eq!(actor_of(&long), Err(BodyRefusal::BadUsername));
        assert_eq!(
            BodyRefusal::MissingActor.to_string(),
            "Missing required field: actor {user_id, username}"
        );
    }
}
