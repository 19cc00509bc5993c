//! sited as its operator's client drives it: `atelier-site-client` and the atelierctl binary
//! against a real sited `Router` served on a socket of its own ([`support`]), every request it
//! received logged.
//!
//! - [`follow`]: following a session's stream, live and after the fact.
//! - [`pairing`]: the `/health` fingerprint checked before any other byte is sent.
//! - [`publishing`]: builds, preview, publish, releases and rollback through the binary.
//! - [`sites`]: sites through the library and the binary, and every failure under `--json`.

mod follow;
mod pairing;
mod publishing;
mod sites;
pub mod support;
