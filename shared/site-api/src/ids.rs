//! The names a request may carry into a path — a site's [`Slug`] and a [`SessionId`] — and the
//! agent drivers a site can run ([`DriverId`]). Each is only ever made by parsing, so holding
//! one proves its grammar.

use std::fmt;
use std::fs::File;
use std::io::Read;

use serde::{Deserialize, Serialize};

/// The 400 detail for a slug that breaks the grammar, exactly as the original daemon wrote it.
pub const SLUG_RULE: &str =
    "slug must be 2–40 chars, lowercase letters/digits/hyphens, starting with a letter";

/// A site slug that matches `^[a-z][a-z0-9-]{1,39}$`, so it is also a safe single path name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Slug(String);

/// A slug that breaks the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{SLUG_RULE}")]
pub struct BadSlug;

impl Slug {
    /// Checks `text` against the grammar.
    pub fn parse(text: &str) -> Result<Slug, BadSlug> {
        Slug::try_from(text.to_owned())
    }

    /// The slug as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Slug {
    type Error = BadSlug;

    fn try_from(text: String) -> Result<Slug, BadSlug> {
        if atelier_layout::names::is_slug(&text) {
            Ok(Slug(text))
        } else {
            Err(BadSlug)
        }
    }
}

impl From<Slug> for String {
    fn from(slug: Slug) -> String {
        slug.0
    }
}

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A session id: a lowercase UUID v4, as the original daemon minted them.
///
/// Parsing one is the only way a request's id reaches a path, so an id that could escape the
/// sessions directory is simply not an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

/// Text that is not a session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a session id")]
pub struct BadSessionId;

impl SessionId {
    /// Parses `8-4-4-4-12` lowercase hex; anything else is `None`.
    pub fn parse(text: &str) -> Option<SessionId> {
        let shape = [8, 4, 4, 4, 12];
        let mut groups = text.split('-');
        let ok = shape.iter().all(|&n| {
            groups.next().is_some_and(|g| {
                g.len() == n
                    && g.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
        }) && groups.next().is_none();
        ok.then(|| SessionId(text.to_owned()))
    }

    /// A fresh random v4 id from the kernel's generator.
    pub fn new_v4() -> std::io::Result<SessionId> {
        let mut bytes = [0u8; 16];
        File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let hex = hex::encode(bytes);
        Ok(SessionId(format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = BadSessionId;

    fn try_from(text: String) -> Result<SessionId, BadSessionId> {
        SessionId::parse(&text).ok_or(BadSessionId)
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The coding agents a site can run, in the order `/health` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverId {
    /// Anthropic's Claude Code (`claude -p … --output-format stream-json`).
    ClaudeCode,
    /// OpenCode (`opencode run --format json`).
    Opencode,
    /// pi (`pi --mode json --print`), speaking to an OpenAI-compatible model.
    Pi,
    /// Atelier's own coding agent (`atelier-agent`), speaking to an OpenAI-compatible model or
    /// Anthropic's Messages API.
    Atelier,
}

impl DriverId {
    /// Every driver, in the order `/health` lists them.
    pub const ALL: [DriverId; 4] = [
        DriverId::ClaudeCode,
        DriverId::Opencode,
        DriverId::Pi,
        DriverId::Atelier,
    ];

    /// The wire id.
    pub const fn as_str(self) -> &'static str {
        match self {
            DriverId::ClaudeCode => "claude_code",
            DriverId::Opencode => "opencode",
            DriverId::Pi => "pi",
            DriverId::Atelier => "atelier",
        }
    }

    /// The driver with wire id `id`.
    pub fn parse(id: &str) -> Option<DriverId> {
        DriverId::ALL.into_iter().find(|d| d.as_str() == id)
    }
}

impl fmt::Display for DriverId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_grammar_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("shortest", "ab", true),
            ("digits and hyphens", "a1-b2", true),
            ("longest", &"a".repeat(40), true),
            ("trailing hyphen is allowed", "ab-", true),
            ("empty", "", false),
            ("one letter", "a", false),
            ("too long", &"a".repeat(41), false),
            ("digit first", "1ab", false),
            ("hyphen first", "-ab", false),
            ("uppercase", "Ab", false),
            ("underscore", "a_b", false),
            ("dot", "a.b", false),
            ("dot dot", "..", false),
            ("slash", "a/b", false),
            ("space", "a b", false),
            ("non-ascii letter", "añb", false),
            ("nul", "ab\0", false),
            ("percent escape", "a%2fb", false),
        ];
        for (name, input, ok) in cases {
            assert_eq!(Slug::parse(input).is_ok(), *ok, "case {name}: {input:?}");
            let read: Result<Slug, _> = serde_json::from_value(serde_json::json!(input));
            assert_eq!(read.is_ok(), *ok, "case {name} read from JSON: {input:?}");
        }
        assert_eq!(Slug::parse("x").unwrap_err().to_string(), SLUG_RULE);
    }

    #[test]
    fn session_id_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("v4", "0f8fad5b-d9cb-469f-a165-70867728950e", true),
            ("uppercase", "0F8FAD5B-D9CB-469F-A165-70867728950E", false),
            ("short group", "0f8fad5b-d9cb-469f-a165-7086772895", false),
            (
                "extra group",
                "0f8fad5b-d9cb-469f-a165-70867728950e-00",
                false,
            ),
            ("no hyphens", "0f8fad5bd9cb469fa16570867728950e", false),
            ("traversal", "../../etc/passwd", false),
            ("empty", "", false),
            ("non-hex", "0f8fad5b-d9cb-469f-a165-70867728950g", false),
        ];
        for (name, input, ok) in cases {
            assert_eq!(SessionId::parse(input).is_some(), *ok, "case {name}");
            let read: Result<SessionId, _> = serde_json::from_value(serde_json::json!(input));
            assert_eq!(read.is_ok(), *ok, "case {name} read from JSON");
        }
        let fresh = SessionId::new_v4().unwrap();
        assert_eq!(SessionId::parse(fresh.as_str()), Some(fresh.clone()));
        assert_eq!(&fresh.as_str()[14..15], "4", "a version 4 id");
    }

    #[test]
    fn driver_ids_round_trip_in_health_order() {
        for driver in DriverId::ALL {
            assert_eq!(DriverId::parse(driver.as_str()), Some(driver));
            assert_eq!(
                serde_json::to_value(driver).unwrap(),
                serde_json::json!(driver.as_str())
            );
        }
        assert_eq!(DriverId::parse("gpt"), None);
        assert_eq!(
            DriverId::ALL.map(DriverId::as_str),
            ["claude_code", "opencode", "pi", "atelier"]
        );
    }
}
