//! A client of atelier-sited's engine contract, for whatever drives sited from outside it:
//! atelierctl and the cross-binary tests. It pairs through `/health` the way the engine does
//! (the instance's fingerprint checked before any other byte is sent), then calls every route
//! of the contract over sited's unix socket with the contract's own types.
//!
//! - [`client`]: [`Client`], HTTP/1.1 over the socket, pairing, every route typed.
//! - [`routes`]: the route table as requests ([`Route`], [`Call`]).
//! - [`sse`]: [`EventStream`], a session's events as a `Stream`.
//! - [`model`]: the shapes sited answers with (`atelier-site-api`'s), and stored session events.
//! - [`config`]: how a client finds its target: flags, the engine env file, the token file, the
//!   default actor.
//! - [`params`]: slugs, ids, texts and the actor, checked before anything is sent.
//! - [`error`]: the one [`Error`], sited's [`Problem`], local refusals ([`Invalid`]).
//! - [`fingerprint`]: the pairing fingerprint.

#![forbid(unsafe_code)]

pub mod client;
pub mod config;
pub mod error;
pub mod fingerprint;
pub mod model;
pub mod params;
pub mod routes;
pub mod sse;

pub use client::{Client, Reply, HOST_NAME};
pub use config::{BasePath, EngineEnv, ServiceToken, Target, DEFAULT_BASE_PATH};
pub use error::{Error, Invalid, Mismatch, Problem};
pub use fingerprint::instance_fingerprint;
pub use model::{SessionEvent, StoredEvent, TurnState, UnknownEvent};
pub use params::{Actor, Id, Slug};
pub use routes::{Call, NewSite, Route};
pub use sse::{EventStream, SseFrame, SseItem, SseParser, StreamItem};
