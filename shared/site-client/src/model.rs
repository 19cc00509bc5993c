//! The shapes sited answers with, as the client reads them: the contract crate's own types, so
//! the client reads exactly what the daemon writes. Unknown fields are ignored, and an event
//! body of a type this client does not know reads as [`UnknownEvent`], so an upgrade of sited
//! alone never breaks a follower.

use serde_json::Value;

pub use atelier_site_api::{
    Actor, AuditEntry, BuildOutcome, BuildRecord, BuildStarted, BuildWithLog, Capabilities,
    DataList, DeleteReport, DriverAvailability, Health, Limits, MessageAccepted, Preprod, Preview,
    Published, Releases, Served, SessionEvent, SessionStarted, SessionStopped, SessionSummary,
    SiteManifest, SiteSession, SiteStatus, SkippedSurface, TemplateInfo, TurnState, UnknownEvent,
};

/// A stored event as a follower reads it: the body kept as JSON until it is read by type.
pub type StoredEvent = atelier_site_api::StoredEvent<Value>;
