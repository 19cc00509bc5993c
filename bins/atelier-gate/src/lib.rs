//! atelier-gate: the per-site egress gate — what may leave, and why not, and the serving half.
//!
//! Parts:
//! - [`address`]: the public-address classifier ([`classify`], [`Verdict`], [`Reason`]).
//! - [`connect`]: the CONNECT head parser ([`parse_head`], [`check_plan`], [`ConnectRefusal`]).
//! - [`client_hello`]: the first-flight walker ([`FirstFlightReader`], [`inspect_first_flight`],
//!   [`FirstFlight`], [`HelloRefusal`]).
//! - [`plan`]: a door's stamped plan file ([`plan::load_plan`]).
//! - [`serve`]: one door's CONNECT listener ([`serve::serve`], [`serve::Door`]); its tunnels'
//!   bytes move through [`atelier_relay`].
//! - [`mcp`]: the turn door's MCP relay to the Publication API ([`mcp::relay`],
//!   [`mcp::McpDoor`]).
//! - [`model`]: the turn door's model relay to the model providers, which adds the provider's
//!   key so no confined agent holds it, to the model API's own endpoints below the declared
//!   base URL only, with no tool or fetch of the provider's own in the body
//!   ([`model::body::inspect`]), dialling public addresses only ([`model::route_target`],
//!   [`model::endpoints`], [`model::relay`], [`model::ModelDoor`], [`model::PublicOnly`],
//!   [`model::ModelRefusal`]).
//! - [`relay`]: the turn door's relay listener, serving both relays by path
//!   ([`relay::serve`], [`relay::Relays`]), and the plumbing the two relays share.
//! - [`decisions`]: the decisions socket, through which sited receives a door's decisions for
//!   one run ([`decisions::serve`]); the decisions themselves are recorded in each door's
//!   [`serve::DecisionLog`].
//! - [`metrics`]: what the gate counts for the operator ([`metrics::Metrics`]).
//! - [`service`]: the systemd service around them ([`service::run`]).
//!
//! Each refusal is one closed enum with stable snake_case names (`as_str()`), so logs and
//! tests name the same reasons. The parsers do no I/O; [`serve`] drives them with the bytes it
//! has read.

pub mod address;
pub mod client_hello;
pub mod connect;
pub mod decisions;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod relay;
pub mod serve;
pub mod service;

/// The committed seed corpus of fuzz target `target` (`fuzz/seeds/make.py`) as (file name,
/// bytes), at least 20 of them: the parsers' tests hold each seed to what its name says.
#[cfg(test)]
pub(crate) fn fuzz_seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("a seed entry");
            let name = entry.file_name().into_string().expect("a UTF-8 seed name");
            (name, std::fs::read(entry.path()).expect("a readable seed"))
        })
        .collect();
    assert!(
        seeds.len() >= 20,
        "{} seeds in {}",
        seeds.len(),
        dir.display()
    );
    seeds
}

pub use address::{classify, parse_and_classify, Policy, Reason, Verdict};
pub use atelier_layout::hosts::is_plan_hostname;
pub use client_hello::{
    check_server_name, inspect_first_flight, FirstFlight, FirstFlightReader, HelloRefusal,
    MAX_FIRST_FLIGHT, MAX_HELLO_LEN, MAX_RECORD_LEN,
};
pub use connect::{check_plan, parse_head, ConnectRefusal, ConnectTarget, EGRESS_PORT, MAX_HEAD};
