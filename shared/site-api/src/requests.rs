//! The bodies of the mutating requests, without the `actor` every one of them also carries
//! (a client adds its own; sited reads it first). A client serializes these; sited builds the
//! same values from a request at its edge, with the contract's own refusal for each field, and
//! its services take them typed.

use serde::Serialize;

use crate::ids::{DriverId, Slug};

/// `POST /v1/sites`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateSite {
    /// The new site's slug.
    pub slug: Slug,
    /// Its display name (1–200 characters, trimmed).
    pub name: String,
    /// Its domain, as given: the daemon checks its grammar only after the slug is known to be
    /// free, the order the contract refuses in.
    pub domain: String,
    /// The template id; the default template when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The agent driver; the instance's default when absent (an unknown one is ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverId>,
}

/// `POST /v1/sites/:slug/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartSession {
    /// The first turn's prompt: not blank, at most the prompt limit.
    pub prompt: String,
    /// The driver for this session; the site's when absent (an unknown one is ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverId>,
}

/// `POST /v1/sessions/:id/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SendMessage {
    /// The follow-up turn's message: not blank, at most the prompt limit.
    pub message: String,
}

/// `POST /v1/sites/:slug/publish`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Publish {
    /// Always `true`: a publish must say so explicitly.
    pub confirm: bool,
    /// A note for the audit log (the daemon keeps 500 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `POST /v1/sites/:slug/rollback`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rollback {
    /// The production release to serve again.
    pub release: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_leave_out_what_is_absent() {
        let site = CreateSite {
            slug: Slug::parse("alpha").unwrap(),
            name: "Alpha".into(),
            domain: "alpha.example.org".into(),
            template: None,
            driver: None,
        };
        assert_eq!(
            serde_json::to_value(&site).unwrap(),
            json!({"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org"})
        );
        let start = StartSession {
            prompt: "p".into(),
            driver: Some(DriverId::Opencode),
        };
        assert_eq!(
            serde_json::to_value(&start).unwrap(),
            json!({"prompt": "p", "driver": "opencode"})
        );
        let publish = Publish {
            confirm: true,
            note: None,
        };
        assert_eq!(
            serde_json::to_value(&publish).unwrap(),
            json!({"confirm": true})
        );
    }
}
