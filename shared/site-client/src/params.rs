//! What a call carries, checked before anything is sent: slugs and ids that become path
//! segments (so none can escape its segment or smuggle a query), and the texts the engine
//! checks too (prompt and message length, names, the actor).

use std::fmt;

use crate::error::Invalid;

use atelier_site_api::limits::{check_prompt, BadPrompt};
pub use atelier_site_api::limits::{MAX_PROMPT_UNITS as MAX_TEXT_UNITS, MAX_USERNAME_CHARS};
pub use atelier_site_api::Slug;

/// The longest id the engine sends.
const MAX_ID_LEN: usize = 200;

/// Checks `text` against the slug grammar, naming it in the refusal.
pub fn slug(text: &str) -> Result<Slug, Invalid> {
    Slug::parse(text).map_err(|_| Invalid::Slug(text.to_owned()))
}

/// A session, build or release id: `[A-Za-z0-9._-]{1,200}` without `..`, the engine's rule.
/// Such an id needs no escaping in a path and can name no other directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(String);

impl Id {
    /// Checks `text` as the id of a `what` (named in the refusal).
    pub fn parse(what: &'static str, text: &str) -> Result<Id, Invalid> {
        let shaped = (1..=MAX_ID_LEN).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            && !text.contains("..");
        if shaped {
            Ok(Id(text.to_owned()))
        } else {
            Err(Invalid::Id {
                what,
                value: text.to_owned(),
            })
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A prompt or message: not blank, at most [`MAX_TEXT_UNITS`] UTF-16 units.
pub fn check_text(what: &'static str, text: &str) -> Result<(), Invalid> {
    check_prompt(text).map_err(|bad| match bad {
        BadPrompt::Blank => Invalid::TextRequired(what),
        BadPrompt::TooLong(len) => Invalid::TextTooLong {
            what,
            len,
            limit: MAX_TEXT_UNITS,
        },
    })
}

/// A field that must not be blank (a site's name, its domain).
pub fn check_required(what: &'static str, text: &str) -> Result<(), Invalid> {
    if text.trim().is_empty() {
        Err(Invalid::TextRequired(what))
    } else {
        Ok(())
    }
}

/// Who the calls are made for: recorded by sited in the audit log, never used to authorize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    user_id: i64,
    username: String,
}

impl Actor {
    /// Checks the actor as sited will (`username` 1..200 characters, not blank) and as a
    /// header can carry it (no control characters).
    pub fn new(user_id: i64, username: &str) -> Result<Actor, Invalid> {
        if username.trim().is_empty() {
            return Err(Invalid::Actor("the actor's name must not be empty".into()));
        }
        if username.chars().count() > MAX_USERNAME_CHARS {
            return Err(Invalid::Actor(format!(
                "the actor's name is longer than {MAX_USERNAME_CHARS} characters"
            )));
        }
        if username.chars().any(char::is_control) {
            return Err(Invalid::Actor(format!(
                "the actor's name {username:?} holds a control character"
            )));
        }
        Ok(Actor {
            user_id,
            username: username.to_owned(),
        })
    }

    /// The user id.
    pub fn user_id(&self) -> i64 {
        self.user_id
    }

    /// The username.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// `{"user_id": .., "username": ..}`, as every mutating body carries it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"user_id": self.user_id, "username": self.username})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_checked_against_the_grammar() {
        let cases: &[(&str, &str, bool)] = &[
            ("plain", "alpha", true),
            ("digits and hyphen", "a1-b2", true),
            ("shortest", "ab", true),
            ("longest", "a234567890123456789012345678901234567890", true),
            ("one char", "a", false),
            (
                "too long",
                "a2345678901234567890123456789012345678901",
                false,
            ),
            ("empty", "", false),
            ("leading digit", "1abc", false),
            ("leading hyphen", "-abc", false),
            ("uppercase", "Alpha", false),
            ("dot", "al.pha", false),
            ("dot dot", "..", false),
            ("slash", "al/pha", false),
            ("traversal", "../audit", false),
            ("encoded slash", "al%2fpha", false),
            ("query", "alpha?purge_prod=true", false),
            ("fragment", "alpha#x", false),
            ("space", "al pha", false),
            ("newline", "alpha\n", false),
            ("underscore", "al_pha", false),
            ("non-ascii", "álpha", false),
        ];
        for (name, text, ok) in cases {
            assert_eq!(slug(text).is_ok(), *ok, "{name}: {text:?}");
            if !ok {
                assert_eq!(slug(text), Err(Invalid::Slug((*text).into())), "{name}");
            }
        }
    }

    #[test]
    fn ids_are_single_safe_segments() {
        let long = "a".repeat(200);
        let too_long = "a".repeat(201);
        let cases: &[(&str, &str, bool)] = &[
            ("uuid", "0b6f3c2e-5d0a-4c55-9f0e-3b1c2d4e5f60", true),
            ("release id", "20260715T102030123Z-000000", true),
            ("dots and underscore", "a.b_c", true),
            ("200 chars", &long, true),
            ("201 chars", &too_long, false),
            ("empty", "", false),
            ("dot dot", "..", false),
            ("dot dot inside", "a..b", false),
            ("slash", "a/b", false),
            ("traversal", "../../etc/passwd", false),
            ("backslash", "a\\b", false),
            ("percent", "a%2e%2e", false),
            ("query", "a?after=1", false),
            ("space", "a b", false),
            ("nul", "a\0b", false),
            ("non-ascii", "é", false),
        ];
        for (name, text, ok) in cases {
            let parsed = Id::parse("session", text);
            assert_eq!(parsed.is_ok(), *ok, "{name}: {text:?}");
            if let Err(e) = parsed {
                assert_eq!(e.reason(), "invalid_id", "{name}");
                assert!(e.to_string().contains("session"), "{name}: {e}");
            }
        }
    }

    #[test]
    fn texts_are_checked_for_blankness_and_length_in_utf16_units() {
        assert_eq!(
            check_text("prompt", "  \n\t"),
            Err(Invalid::TextRequired("prompt"))
        );
        assert_eq!(check_text("prompt", "build it"), Ok(()));
        assert_eq!(check_text("prompt", &"a".repeat(MAX_TEXT_UNITS)), Ok(()));
        // One astral character is two UTF-16 units, so 16 Ki of them is exactly the limit.
        assert_eq!(
            check_text("prompt", &"😀".repeat(MAX_TEXT_UNITS / 2)),
            Ok(())
        );
        assert_eq!(
            check_text("message", &"😀".repeat(MAX_TEXT_UNITS / 2 + 1)),
            Err(Invalid::TextTooLong {
                what: "message",
                len: MAX_TEXT_UNITS + 2,
                limit: MAX_TEXT_UNITS
            })
        );
        assert_eq!(
            check_required("name", " "),
            Err(Invalid::TextRequired("name"))
        );
        assert_eq!(check_required("name", "Alpha"), Ok(()));
    }

    #[test]
    fn actors_are_checked_as_sited_and_a_header_need() {
        let cases: &[(&str, &str, bool)] = &[
            ("login name", "ana", true),
            ("non-ascii", "José Ñúñez", true),
            ("engine style", "user_42", true),
            ("200 chars", &"a".repeat(200), true),
            ("201 chars", &"a".repeat(201), false),
            ("empty", "", false),
            ("blank", "   ", false),
            ("newline injection", "ana\r\nX-Evil: 1", false),
            ("nul", "ana\0", false),
            ("escape", "ana\u{1b}[31m", false),
        ];
        for (name, username, ok) in cases {
            let actor = Actor::new(42, username);
            assert_eq!(actor.is_ok(), *ok, "{name}");
            if let Err(e) = actor {
                assert_eq!(e.reason(), "invalid_actor", "{name}");
            }
        }
        let actor = Actor::new(7, "ana").unwrap();
        assert_eq!(
            actor.to_json(),
            serde_json::json!({"user_id": 7, "username": "ana"})
        );
    }
}
