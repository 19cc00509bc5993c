//! The engine contract of `atelier-sited`, written once as types: the ids a path may carry
//! ([`Slug`], [`SessionId`]), the agent drivers ([`DriverId`]), the limits both sides check,
//! every request and response body, the session events, and the route table. sited writes
//! the responses and a client reads the very same structs (and the other way round for the
//! requests), so the two ends cannot drift apart.
//!
//! Reading is tolerant where a newer daemon may add something: unknown fields are ignored
//! everywhere, and an event body of an unknown type reads as [`UnknownEvent`] rather than
//! failing a follower's stream.

pub mod event;
pub mod ids;
pub mod limits;
pub mod reason;
pub mod requests;
pub mod routes;
pub mod wire;

pub use event::{Egress, SessionEvent, StoredEvent, TurnState, UnknownEvent};
pub use ids::{BadSlug, DriverId, SessionId, Slug, SLUG_RULE};
pub use reason::Reason;
pub use requests::{CreateSite, Publish, Rollback, SendMessage, StartSession};
pub use routes::{route, Endpoint, Matched, Verb, ROUTES};
pub use wire::*;
