//! The gate's metrics: what left the site, what was stopped and why, how much moved.
//!
//! Every family is registered under the prefix `atelier_gate` (the caller makes the registry
//! with that prefix), and every label value is spelled exactly as the decision log spells it,
//! so a count can be matched with the journal lines behind it.
//!
//! | name | type | labels | what the operator learns |
//! |---|---|---|---|
//! | `atelier_gate_connects_allowed_total` | counter | `door` | CONNECTs answered 200: tunnels opened |
//! | `atelier_gate_connects_refused_total` | counter | `door`, `reason` | CONNECTs refused before any tunnel, by reason |
//! | `atelier_gate_connects_failed_total` | counter | `door`, `reason` | CONNECTs to a planned public host that could not be reached (502) |
//! | `atelier_gate_addresses_refused_total` | counter | `door`, `reason` | resolved addresses that were not public, by address class |
//! | `atelier_gate_first_flights_refused_total` | counter | `door`, `reason` | tunnels closed after the 200 because the first flight was refused |
//! | `atelier_gate_tunnels_unused_total` | counter | `door` | tunnels the client closed after the 200 without a first flight (an HTTP pool's spare connection): no refusal |
//! | `atelier_gate_relayed_bytes_total` | counter | `door`, `direction` | bytes moved through tunnels, as they move |
//! | `atelier_gate_tunnels_open` | gauge | `door` | tunnels open now, from the 200 to the close |
//! | `atelier_gate_mcp_requests_total` | counter | `outcome` | MCP relay requests, relayed or refused by reason |
//! | `atelier_gate_model_requests_total` | counter | `api`, `outcome` | model relay requests, relayed or refused by reason, per API |
//!
//! Labels:
//! - `door`: `turn` or `build`.
//! - `reason` of `connects_refused_total`: a CONNECT head refusal (`head_too_large`,
//!   `head_timeout`, `malformed_request_line`, `method_not_allowed`, `port_not_allowed`,
//!   `ip_literal`, `invalid_host`, `special_use_host`, `not_in_plan`), or `over_cap` (the door
//!   already held its most connections), `no_address` (the name resolved to nothing),
//!   `not_public` (an answer was not a public address; `addresses_refused_total` says which
//!   kind).
//! - `reason` of `connects_failed_total`: `lookup_failed` or `dial_failed`.
//! - `reason` of `addresses_refused_total`: the address classifier's reason (`private`,
//!   `loopback`, `link_local`, ...).
//! - `reason` of `first_flights_refused_total`: the ClientHello refusal (`server_name_mismatch`,
//!   `encrypted_client_hello`, `timeout`, ...). A client that leaves before its first flight
//!   refused nothing and was refused nothing: it counts in `tunnels_unused_total`, while its
//!   decision log line says `client_closed`.
//! - `direction`: `upstream` (client to host, the first flight included) or `downstream` (host
//!   to client).
//! - `outcome`: `relayed` or the relay's refusal (`not_found`, `method_not_allowed`,
//!   `body_too_large`, `body_unreadable`, `upstream_redirect`, `upstream_unreachable`; the
//!   model relay's also `bad_path` and `endpoint_not_relayed`).
//! - `api` of `model_requests_total`: the route's API (`anthropic`, `openai`), or `unknown` for
//!   a path that names no API the relay knows.
//!
//! Each event is counted once, where the decision about it is recorded.

use std::fmt::Write as _;

use atelier_layout::files::ModelApi;
use atelier_proto::Door as DoorName;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::address::Reason;
use crate::client_hello::HelloRefusal;
use crate::connect::ConnectRefusal;
use crate::mcp::McpRefusal;
use crate::model::ModelRefusal;

/// The prefix of every gate metric.
pub const PREFIX: &str = "atelier_gate";

/// Why a CONNECT was refused before any tunnel: the `reason` of the decision it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The head was refused ([`ConnectRefusal`]), the plan check included.
    Connect(ConnectRefusal),
    /// The door already held its most connections (503).
    OverCap,
    /// The host resolved to no address.
    NoAddress,
    /// An answer was not a public address.
    NotPublic,
}

impl Refusal {
    /// The stable snake_case name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Connect(refusal) => refusal.as_str(),
            Refusal::OverCap => "over_cap",
            Refusal::NoAddress => "no_address",
            Refusal::NotPublic => "not_public",
        }
    }
}

/// Why a CONNECT to a planned public host found no way there (502).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The lookup failed.
    LookupFailed,
    /// Every dial failed or timed out.
    DialFailed,
}

impl Failure {
    /// The stable snake_case name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::LookupFailed => "lookup_failed",
            Failure::DialFailed => "dial_failed",
        }
    }
}

/// Why a tunnel was closed after its 200, before anything was sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EarlyClose {
    /// The first flight was refused ([`HelloRefusal`]), its deadline included.
    Hello(HelloRefusal),
    /// The client closed (or failed) before its first flight was decided.
    ClientClosed,
}

impl EarlyClose {
    /// The stable snake_case name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            EarlyClose::Hello(refusal) => refusal.as_str(),
            EarlyClose::ClientClosed => "client_closed",
        }
    }
}

/// Which way relayed bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client to the host.
    Upstream,
    /// From the host to the client.
    Downstream,
}

/// What came of one request to the MCP relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum McpOutcome {
    /// The upstream's answer was relayed, whatever its status.
    Relayed,
    /// The relay answered itself.
    Refused(McpRefusal),
}

/// What came of one request to the model relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelOutcome {
    /// The upstream's answer was relayed, whatever its status.
    Relayed,
    /// The relay answered itself.
    Refused(ModelRefusal),
}

/// A label value spelled by its stable name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Named<T>(T);

macro_rules! named {
    ($($type:ty => |$value:ident| $name:expr;)*) => {
        $(
            impl EncodeLabelValue for Named<$type> {
                fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                    let $value = self.0;
                    encoder.write_str($name)
                }
            }
        )*
    };
}

named! {
    DoorName => |door| door.as_str();
    Refusal => |refusal| refusal.as_str();
    Failure => |failure| failure.as_str();
    Reason => |reason| reason.as_str();
    Why => |why| match why {
        Why::Refusal(refusal) => refusal.as_str(),
        Why::Failure(failure) => failure.as_str(),
        Why::Address(reason) => reason.as_str(),
        Why::Hello(refusal) => refusal.as_str(),
    };
    Direction => |direction| match direction {
        Direction::Upstream => "upstream",
        Direction::Downstream => "downstream",
    };
    McpOutcome => |outcome| match outcome {
        McpOutcome::Relayed => "relayed",
        McpOutcome::Refused(refusal) => refusal.as_str(),
    };
    ModelOutcome => |outcome| match outcome {
        ModelOutcome::Relayed => "relayed",
        ModelOutcome::Refused(refusal) => refusal.as_str(),
    };
    Option<ModelApi> => |api| api.map_or("unknown", ModelApi::as_str);
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DoorLabels {
    door: Named<DoorName>,
}

/// The `reason` of every family that has one; each family takes one kind of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Why {
    Refusal(Refusal),
    Failure(Failure),
    Address(Reason),
    Hello(HelloRefusal),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    door: Named<DoorName>,
    reason: Named<Why>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DirectionLabels {
    door: Named<DoorName>,
    direction: Named<Direction>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: Named<McpOutcome>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModelLabels {
    api: Named<Option<ModelApi>>,
    outcome: Named<ModelOutcome>,
}

type ByReason = Family<ReasonLabels, Counter>;

/// The gate's metric families; cloning shares them. [`Metrics::default`] makes families no
/// registry serves, for doors whose counts nobody reads (tests of other things).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    allowed: Family<DoorLabels, Counter>,
    refused: ByReason,
    failed: ByReason,
    addresses_refused: ByReason,
    flights_refused: ByReason,
    unused: Family<DoorLabels, Counter>,
    relayed: Family<DirectionLabels, Counter>,
    open: Family<DoorLabels, Gauge>,
    mcp: Family<OutcomeLabels, Counter>,
    model: Family<ModelLabels, Counter>,
}

/// The two byte counters of one door's tunnels; the tunnel adds to them as it moves bytes.
#[derive(Debug, Clone, Default)]
pub struct Relayed {
    /// Client to host.
    pub upstream: Counter,
    /// Host to client.
    pub downstream: Counter,
}

/// A tunnel's client is its unix side, the host its TCP side.
impl atelier_relay::Tally for Relayed {
    fn to_tcp(&self, bytes: u64) {
        self.upstream.inc_by(bytes);
    }
    fn to_unix(&self, bytes: u64) {
        self.downstream.inc_by(bytes);
    }
}

impl Metrics {
    /// Registers every family in `registry` (made with the prefix [`PREFIX`]).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        registry.register(
            "connects_allowed",
            "CONNECTs answered 200, each a tunnel opened to a planned host",
            metrics.allowed.clone(),
        );
        registry.register(
            "connects_refused",
            "CONNECTs refused before any tunnel, by the reason the decision log gives",
            metrics.refused.clone(),
        );
        registry.register(
            "connects_failed",
            "CONNECTs to a planned public host that could not be reached (lookup or dial failed)",
            metrics.failed.clone(),
        );
        registry.register(
            "addresses_refused",
            "Resolved addresses refused as not public, by address class",
            metrics.addresses_refused.clone(),
        );
        registry.register(
            "first_flights_refused",
            "Tunnels closed after their 200 because the first flight was refused; nothing went upstream",
            metrics.flights_refused.clone(),
        );
        registry.register(
            "tunnels_unused",
            "Tunnels the client closed after their 200 before sending anything; nothing went upstream",
            metrics.unused.clone(),
        );
        registry.register(
            "relayed_bytes",
            "Bytes moved through tunnels, counted as they move",
            metrics.relayed.clone(),
        );
        registry.register(
            "tunnels_open",
            "Tunnels open now, from their 200 to their close",
            metrics.open.clone(),
        );
        registry.register(
            "mcp_requests",
            "Requests to the MCP relay, relayed or refused by the relay's reason",
            metrics.mcp.clone(),
        );
        registry.register(
            "model_requests",
            "Requests to the model relay, relayed or refused by the relay's reason, per API",
            metrics.model.clone(),
        );
        metrics
    }

    /// Counts a CONNECT answered 200 on `door`.
    pub fn connect_allowed(&self, door: DoorName) {
        self.allowed.get_or_create(&door_labels(door)).inc();
    }

    /// Counts a CONNECT refused on `door` before any tunnel.
    pub fn connect_refused(&self, door: DoorName, refusal: Refusal) {
        by_reason(&self.refused, door, Why::Refusal(refusal));
    }

    /// Counts a CONNECT on `door` that found no way to its planned host.
    pub fn connect_failed(&self, door: DoorName, failure: Failure) {
        by_reason(&self.failed, door, Why::Failure(failure));
    }

    /// Counts one resolved address refused as not public on `door`.
    pub fn address_refused(&self, door: DoorName, reason: Reason) {
        by_reason(&self.addresses_refused, door, Why::Address(reason));
    }

    /// Counts a tunnel on `door` closed because its first flight was refused, or one its
    /// client closed before any first flight.
    pub fn tunnel_closed(&self, door: DoorName, why: EarlyClose) {
        match why {
            EarlyClose::Hello(refusal) => {
                by_reason(&self.flights_refused, door, Why::Hello(refusal));
            }
            EarlyClose::ClientClosed => {
                self.unused.get_or_create(&door_labels(door)).inc();
            }
        }
    }

    /// The byte counters of `door`'s tunnels.
    pub fn relayed(&self, door: DoorName) -> Relayed {
        let counter = |direction| {
            self.relayed.get_or_create_owned(&DirectionLabels {
                door: Named(door),
                direction: Named(direction),
            })
        };
        Relayed {
            upstream: counter(Direction::Upstream),
            downstream: counter(Direction::Downstream),
        }
    }

    /// The gauge of `door`'s open tunnels, for the door's [`OpenTunnels`](crate::serve::OpenTunnels).
    pub fn tunnels_open(&self, door: DoorName) -> Gauge {
        self.open.get_or_create_owned(&door_labels(door))
    }

    /// Counts one request to the MCP relay.
    pub fn mcp_request(&self, outcome: McpOutcome) {
        self.mcp
            .get_or_create(&OutcomeLabels {
                outcome: Named(outcome),
            })
            .inc();
    }

    /// Counts one request to the model relay, for `api` when its path named a known one.
    pub fn model_request(&self, api: Option<ModelApi>, outcome: ModelOutcome) {
        self.model
            .get_or_create(&ModelLabels {
                api: Named(api),
                outcome: Named(outcome),
            })
            .inc();
    }
}

fn door_labels(door: DoorName) -> DoorLabels {
    DoorLabels { door: Named(door) }
}

fn by_reason(family: &ByReason, door: DoorName, reason: Why) {
    family
        .get_or_create(&ReasonLabels {
            door: Named(door),
            reason: Named(reason),
        })
        .inc();
}

#[cfg(test)]
mod tests;
