//! The site slug grammar `^[a-z][a-z0-9-]{1,39}$`: the only names a workspace may have.

use std::fmt;

/// The 400 detail for a slug that breaks the grammar, exactly as the original daemon wrote it.
pub const SLUG_RULE: &str =
    "slug must be 2–40 chars, lowercase letters/digits/hyphens, starting with a letter";

/// A site slug that matches the grammar, so it is also a safe single path name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Slug(String);

/// A slug that breaks the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{SLUG_RULE}")]
pub struct BadSlug;

impl Slug {
    /// Checks `text` against the grammar.
    pub fn parse(text: &str) -> Result<Slug, BadSlug> {
        if atelier_layout::names::is_slug(text) {
            Ok(Slug(text.to_owned()))
        } else {
            Err(BadSlug)
        }
    }

    /// The slug as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_table() {
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
        }
        assert_eq!(Slug::parse("x").unwrap_err().to_string(), SLUG_RULE);
    }
}
