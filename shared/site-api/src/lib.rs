//! The engine contract of `atelier-sited`, written once as types: the ids a path may carry
//! ([`Slug`], [`SessionId`]), the agent drivers ([`DriverId`]), the limits both sides check,
//! every response body, the session events, and the route table. sited serializes these;
//! `atelierctl` and the tests deserialize the very same structs, so the two ends cannot drift
//! apart.
//!
//! Reading is tolerant where a newer daemon may add something: unknown fields are ignored
//! everywhere, and an event body of an unknown type reads as [`UnknownEvent`] rather than
//! failing a follower's stream.

pub mod event;
pub mod ids;
pub mod limits;
pub mod routes;
pub mod wire;

pub use event::{Egress, SessionEvent, StoredEvent, TurnState, UnknownEvent};
pub use ids::{BadSlug, DriverId, SessionId, Slug, SLUG_RULE};
pub use routes::{route, Endpoint, Matched, Verb, ROUTES};
pub use wire::*;
