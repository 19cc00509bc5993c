//! sited's metrics: what an operator asks of a site daemon without reading its log — how many
//! turns start and how they end, how many run now, how builds end and how long they take, and
//! how many clients follow a session's events.
//!
//! Every family is registered under the prefix `atelier_sited` by [`Metrics::new`]; the
//! daemon serves the registry on its metrics socket. The names, as scraped:
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `atelier_sited_turns_started_total` | counter | — | turns admitted and launched (a refused start or follow-up is not one) |
//! | `atelier_sited_turns_ended_total` | counter | `state`: `idle`, `interrupted`, `error`; with `error` only, `reason`: the turn's fault as its `error` event names it (`turn_agent_exited`, `turn_timeout`, `confinement.unit_refused`, …) | turns that wrote their `turn_end`, by the state they ended in |
//! | `atelier_sited_turns_running` | gauge | — | turns holding their site now, from admission to `turn_end`: the count `systemctl status` shows as "N turns running" |
//! | `atelier_sited_builds_total` | counter | `outcome`: `success`, `failed` | builds that wrote their terminal record |
//! | `atelier_sited_build_duration_seconds` | histogram | `outcome` | from a build's admission to its terminal record; buckets from 1 s to 30 min |
//! | `atelier_sited_sse_followers` | gauge | — | clients following a session's event stream now |
//! | `atelier_sited_sites` | gauge | — | sites (workspaces with a valid manifest), counted at boot and after every create or delete |
//!
//! The gauges are guards ([`Open`]) held by what they count and given back on drop, so a
//! cancelled task or a client gone mid-stream cannot leave a count behind. Builds a previous
//! process left running, which the boot sweep marks interrupted, are no build of this process
//! and are not counted. The site count is read from disk when it can change through sited
//! (boot, create, delete), not at every scrape, since that reads every manifest.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::build_record::BuildOutcome;
use crate::turn_fault::TurnEnd;

/// The upper bounds of the build duration buckets, in seconds: a static site's build takes
/// seconds when its dependencies are cached and minutes when they are not; the longest
/// deadlines a build may be given are about half an hour.
const BUILD_DURATION_BUCKETS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
];

/// sited's metric families; clones share them.
#[derive(Debug, Clone)]
pub struct Metrics {
    turns_started: Counter,
    turns_ended: Family<TurnEnd, Counter>,
    turns_running: Gauge,
    builds: Family<BuildLabels, Counter>,
    build_duration: Family<BuildLabels, Histogram, fn() -> Histogram>,
    sse_followers: Gauge,
    sites: Gauge,
}

/// The labels of a build's families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    /// The outcome's wire name.
    outcome: &'static str,
}

/// One thing a gauge counts while it is open; dropping it takes it off the gauge.
#[derive(Debug)]
#[must_use = "the count lasts as long as the guard"]
pub struct Open {
    gauge: Gauge,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

fn build_duration_histogram() -> Histogram {
    Histogram::new(BUILD_DURATION_BUCKETS)
}

impl Metrics {
    /// Registers every family in `registry` (the caller gives it the `atelier_sited` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            turns_started: Counter::default(),
            turns_ended: Family::default(),
            turns_running: Gauge::default(),
            builds: Family::default(),
            build_duration: Family::new_with_constructor(build_duration_histogram),
            sse_followers: Gauge::default(),
            sites: Gauge::default(),
        };
        registry.register(
            "turns_started",
            "Agent turns admitted and launched; a start or follow-up refused is not counted",
            metrics.turns_started.clone(),
        );
        registry.register(
            "turns_ended",
            "Agent turns ended, by the state their turn_end names, and for an error the fault's reason",
            metrics.turns_ended.clone(),
        );
        registry.register(
            "turns_running",
            "Agent turns holding their site now, from admission to turn_end",
            metrics.turns_running.clone(),
        );
        registry.register(
            "builds",
            "Builds ended, by the outcome of their terminal record",
            metrics.builds.clone(),
        );
        registry.register_with_unit(
            "build_duration",
            "Time from a build's admission to its terminal record, by outcome",
            Unit::Seconds,
            metrics.build_duration.clone(),
        );
        registry.register(
            "sse_followers",
            "Clients following a session's event stream now",
            metrics.sse_followers.clone(),
        );
        registry.register(
            "sites",
            "Sites of this instance, as of the last boot, create or delete",
            metrics.sites.clone(),
        );
        metrics
    }

    /// Metrics kept but registered nowhere, for a router built without a registry.
    pub fn unregistered() -> Metrics {
        Metrics::new(&mut Registry::default())
    }

    /// A turn was launched.
    pub fn turn_started(&self) {
        self.turns_started.inc();
    }

    /// A turn holds its site; it counts as running until the guard is dropped.
    pub fn turn_running(&self) -> Open {
        open(&self.turns_running)
    }

    /// A turn wrote its `turn_end`.
    pub fn turn_ended(&self, end: TurnEnd) {
        self.turns_ended.get_or_create(&end).inc();
    }

    /// A build wrote its terminal record `elapsed` after its admission.
    pub fn build_ended(&self, outcome: BuildOutcome, elapsed: Duration) {
        let labels = BuildLabels {
            outcome: outcome.as_str(),
        };
        self.builds.get_or_create(&labels).inc();
        self.build_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// The instance has `count` sites now.
    pub fn sites_counted(&self, count: usize) {
        self.sites.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// A client follows a session's events until the guard is dropped.
    pub fn sse_follower(&self) -> Open {
        open(&self.sse_followers)
    }
}

fn open(gauge: &Gauge) -> Open {
    gauge.inc();
    Open {
        gauge: gauge.clone(),
    }
}

/// `state`, and `reason` for an error alone: an idle or interrupted turn has no reason, and an
/// empty label would only be noise to every query.
impl EncodeLabelSet for TurnEnd {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        match self {
            TurnEnd::Idle | TurnEnd::Interrupted => [("state", self.state())].encode(encoder),
            TurnEnd::Error(fault) => {
                [("state", self.state()), ("reason", fault.reason())].encode(encoder)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;
    use crate::turn_fault::TurnFault;

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn the_families_encode_under_their_documented_names_and_labels() {
        let mut registry = Registry::with_prefix("atelier_sited");
        let metrics = Metrics::new(&mut registry);
        metrics.turn_started();
        metrics.turn_ended(TurnEnd::Idle);
        metrics.turn_ended(TurnEnd::Interrupted);
        metrics.turn_ended(TurnEnd::Error(TurnFault::AgentExited));
        metrics.build_ended(BuildOutcome::Success, Duration::from_secs(3));
        let running = metrics.turn_running();
        let follower = metrics.sse_follower();
        metrics.sites_counted(2);
        let text = scrape(&registry);
        for line in [
            "atelier_sited_turns_started_total 1",
            "atelier_sited_turns_ended_total{state=\"idle\"} 1",
            "atelier_sited_turns_ended_total{state=\"interrupted\"} 1",
            "atelier_sited_turns_ended_total{state=\"error\",reason=\"turn_agent_exited\"} 1",
            "atelier_sited_turns_running 1",
            "atelier_sited_builds_total{outcome=\"success\"} 1",
            "atelier_sited_build_duration_seconds_bucket{le=\"2.0\",outcome=\"success\"} 0",
            "atelier_sited_build_duration_seconds_bucket{le=\"5.0\",outcome=\"success\"} 1",
            "atelier_sited_build_duration_seconds_count{outcome=\"success\"} 1",
            "atelier_sited_sse_followers 1",
            "atelier_sited_sites 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        drop((running, follower));
        let text = scrape(&registry);
        for line in [
            "atelier_sited_turns_running 0",
            "atelier_sited_sse_followers 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
