//! atelierctl: the operator's client for atelier-sited — pairs through `/health` the way the
//! engine does, then drives every route of the contract over sited's unix socket.
//!
//! - [`client`]: [`Client`], HTTP/1.1 over the socket, pairing, every route typed.
//! - [`routes`]: the route table as requests ([`Route`], [`Call`]).
//! - [`sse`]: the event-stream parser and [`EventStream`], a session's events as a `Stream`.
//! - [`model`]: the shapes sited answers with (`atelier-site-api`'s), and stored session events.
//! - [`config`]: flags, the engine env file, the token file, the default actor.
//! - [`params`]: slugs, ids, texts and the actor, checked before anything is sent.
//! - [`error`]: the one [`Error`], sited's [`Problem`], local refusals ([`Invalid`]).
//! - [`fingerprint`]: the pairing fingerprint.
//! - [`cli`], [`render`]: the command line and its readable output.

#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod config;
pub mod error;
pub mod fingerprint;
pub mod model;
pub mod params;
pub mod render;
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
