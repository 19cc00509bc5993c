//! What chatd counts for its operator: chat turns as they start and end, how many run right
//! now, how providers fail, how long an editor waits for the first word of an answer, and the
//! tokens and dollars the turns booked. Every family lives under the `atelier_chatd` prefix
//! (the registry `run` makes) and is served on the metrics socket.
//!
//! | Name | Type | Labels | Meaning |
//! |---|---|---|---|
//! | `atelier_chatd_turns_started_total` | counter | `scope` (`site`, `content`, `data`, `plugin`) | Turns that passed every check and began streaming. |
//! | `atelier_chatd_turns_ended_total` | counter | `outcome` (`done`, `error`, `cancelled`) | Turns that ended: finished, failed (provider or storage; the line says why), or left by a client that went away. |
//! | `atelier_chatd_turns_in_flight` | gauge | — | Turns streaming now. |
//! | `atelier_chatd_provider_errors_total` | counter | `provider`, `class` | Turns a provider failed, by the failure's kind (see below). |
//! | `atelier_chatd_first_byte_seconds` | histogram | `provider` | From the chat request's arrival to the first piece of the model's answer (text or a tool call) sent to the client; buckets 1 ms to 30 s. |
//! | `atelier_chatd_tokens_total` | counter | `provider`, `kind` (`input`, `output`) | Prompt and completion tokens the turns booked. |
//! | `atelier_chatd_cost_usd_total` | counter | `provider` | US dollars the turns booked (the provider's own price, or the catalogue's). |
//!
//! `provider` is the provider id (`anthropic`, `openai`, `ollama`, `openrouter`,
//! `openai-compatible`). `class` is the kind of failure the driver reported: `overflow` (the
//! request exceeded the model's context or request size), `rate_limited` (quota or rate
//! limit), `auth` (the key was refused), `http` (any other non-OK answer, 5xx included),
//! `request` (the provider could not be reached), `stream` (the answer broke off),
//! `idle_timeout` (the answer stalled), `provider` (the provider reported an error inside its
//! stream), `config` (the credential cannot make a request). A turn whose runner names no
//! provider (none in production) counts in the turn families only.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use atelier_llm::{LlmError, ProviderKind};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::provider_ids::provider_id;
use crate::store::{Scope, TurnUsage};

/// The first-byte buckets in seconds: a local model answers in milliseconds, a loaded hosted
/// one may think for tens of seconds.
const FIRST_BYTE_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// chatd's metric families; cloning shares them.
#[derive(Clone, Debug)]
pub struct Metrics {
    turns_started: Family<ScopeLabels, Counter>,
    turns_ended: Family<OutcomeLabels, Counter>,
    turns_in_flight: Gauge,
    provider_errors: Family<ProviderErrorLabels, Counter>,
    first_byte: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    tokens: Family<TokenLabels, Counter>,
    cost_usd: Family<ProviderLabels, Counter<f64, AtomicU64>>,
}

impl Metrics {
    /// The families, registered in `registry` (which carries the `atelier_chatd` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            turns_started: Family::default(),
            turns_ended: Family::default(),
            turns_in_flight: Gauge::default(),
            provider_errors: Family::default(),
            first_byte: Family::new_with_constructor(first_byte_histogram),
            tokens: Family::default(),
            cost_usd: Family::default(),
        };
        registry.register(
            "turns_started",
            "Chat turns that passed every check and began streaming, by scope",
            metrics.turns_started.clone(),
        );
        registry.register(
            "turns_ended",
            "Chat turns that ended: done, error (the provider or storage failed), or cancelled (the client went away)",
            metrics.turns_ended.clone(),
        );
        registry.register(
            "turns_in_flight",
            "Chat turns streaming now",
            metrics.turns_in_flight.clone(),
        );
        registry.register(
            "provider_errors",
            "Chat turns a provider failed, by provider and kind of failure (auth: check the key; rate_limited: check the account)",
            metrics.provider_errors.clone(),
        );
        registry.register_with_unit(
            "first_byte",
            "Time from a chat request's arrival to the first piece of the model's answer sent to the editor",
            Unit::Seconds,
            metrics.first_byte.clone(),
        );
        registry.register(
            "tokens",
            "Tokens the chat turns booked, by provider and kind (input: prompt, output: completion)",
            metrics.tokens.clone(),
        );
        registry.register(
            "cost_usd",
            "US dollars the chat turns booked, by provider",
            metrics.cost_usd.clone(),
        );
        metrics
    }

    /// Families that count into a registry nobody reads: a router built without a registry
    /// (in tests, mostly) still runs the same code.
    pub fn unregistered() -> Metrics {
        Metrics::new(&mut Registry::default())
    }

    /// A turn in `scope`, whose request arrived at `arrived`, began streaming on `provider`.
    /// The turn counts as in flight until [`TurnMeter::ended`] or the meter is dropped.
    pub fn turn_started(
        &self,
        scope: Scope,
        provider: Option<ProviderKind>,
        arrived: Instant,
    ) -> TurnMeter {
        self.turns_started
            .get_or_create(&ScopeLabels { scope })
            .inc();
        self.turns_in_flight.inc();
        TurnMeter {
            metrics: self.clone(),
            provider: provider.map(Provider),
            arrived: Some(arrived),
            in_flight: true,
        }
    }

    /// A turn on `provider` failed with `error`.
    pub fn provider_failed(&self, provider: ProviderKind, error: &LlmError) {
        self.provider_errors
            .get_or_create(&ProviderErrorLabels {
                provider: Provider(provider),
                class: ProviderErrorClass::of(error),
            })
            .inc();
    }
}

fn first_byte_histogram() -> Histogram {
    Histogram::new(FIRST_BYTE_BUCKETS)
}

/// One streaming turn's share of the metrics: it books the turn's first byte, usage and end,
/// and takes the turn off the in-flight gauge exactly once, at its end or when dropped.
#[derive(Debug)]
pub struct TurnMeter {
    metrics: Metrics,
    provider: Option<Provider>,
    /// When the request arrived, until the first byte of the answer was timed.
    arrived: Option<Instant>,
    /// Whether the turn still counts in the in-flight gauge.
    in_flight: bool,
}

impl TurnMeter {
    /// A piece of the model's answer went to the client; the first one is timed.
    pub fn answer_sent(&mut self) {
        let Some(arrived) = self.arrived.take() else {
            return;
        };
        if let Some(provider) = self.provider {
            self.metrics
                .first_byte
                .get_or_create(&ProviderLabels { provider })
                .observe(arrived.elapsed().as_secs_f64());
        }
    }

    /// The turn booked `usage`.
    pub fn booked(&self, usage: &TurnUsage) {
        let Some(provider) = self.provider else {
            return;
        };
        let tokens = |kind, count: i64| {
            self.metrics
                .tokens
                .get_or_create(&TokenLabels { provider, kind })
                .inc_by(u64::try_from(count).unwrap_or(0));
        };
        tokens(TokenKind::Input, usage.prompt_tokens);
        tokens(TokenKind::Output, usage.completion_tokens);
        // A counter only grows: a cost that is not a positive number books nothing.
        if usage.cost_usd.is_finite() && usage.cost_usd > 0.0 {
            self.metrics
                .cost_usd
                .get_or_create(&ProviderLabels { provider })
                .inc_by(usage.cost_usd);
        }
    }

    /// The turn ended with `outcome`; it is no longer in flight.
    pub fn ended(&mut self, outcome: TurnOutcome) {
        if self.leave_flight() {
            self.metrics
                .turns_ended
                .get_or_create(&OutcomeLabels { outcome })
                .inc();
        }
    }

    /// Takes the turn off the in-flight gauge; `false` when it already was.
    fn leave_flight(&mut self) -> bool {
        let was = std::mem::replace(&mut self.in_flight, false);
        if was {
            self.metrics.turns_in_flight.dec();
        }
        was
    }
}

impl Drop for TurnMeter {
    fn drop(&mut self) {
        // A turn whose task was dropped before its end leaves the gauge all the same.
        self.leave_flight();
    }
}

/// How a turn ended, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnOutcome {
    /// The model finished.
    Done,
    /// The provider, the runner or storage failed; the client got an error line.
    Error,
    /// The client went away.
    Cancelled,
}

impl TurnOutcome {
    fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Done => "done",
            TurnOutcome::Error => "error",
            TurnOutcome::Cancelled => "cancelled",
        }
    }
}

/// The kind of a provider failure, one per kind the drivers report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderErrorClass {
    /// The request exceeded the model's context or request size.
    Overflow,
    /// Quota or rate limit.
    RateLimited,
    /// The credentials were refused.
    Auth,
    /// Any other non-OK answer.
    Http,
    /// The request could not be sent or its answer not received.
    Request,
    /// The answer broke off part-way.
    Stream,
    /// The answer stalled past the idle limit.
    IdleTimeout,
    /// The provider reported an error inside its stream.
    Provider,
    /// The credential cannot make a request.
    Config,
}

impl ProviderErrorClass {
    /// The class of `error`.
    pub fn of(error: &LlmError) -> ProviderErrorClass {
        match error {
            LlmError::Overflow { .. } => ProviderErrorClass::Overflow,
            LlmError::RateLimited { .. } => ProviderErrorClass::RateLimited,
            LlmError::Auth { .. } => ProviderErrorClass::Auth,
            LlmError::Http { .. } => ProviderErrorClass::Http,
            LlmError::Request { .. } => ProviderErrorClass::Request,
            LlmError::Stream { .. } => ProviderErrorClass::Stream,
            LlmError::IdleTimeout { .. } => ProviderErrorClass::IdleTimeout,
            LlmError::Provider { .. } | LlmError::ResponseFailed { .. } => {
                ProviderErrorClass::Provider
            }
            LlmError::MissingSetting { .. } | LlmError::Config { .. } => ProviderErrorClass::Config,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ProviderErrorClass::Overflow => "overflow",
            ProviderErrorClass::RateLimited => "rate_limited",
            ProviderErrorClass::Auth => "auth",
            ProviderErrorClass::Http => "http",
            ProviderErrorClass::Request => "request",
            ProviderErrorClass::Stream => "stream",
            ProviderErrorClass::IdleTimeout => "idle_timeout",
            ProviderErrorClass::Provider => "provider",
            ProviderErrorClass::Config => "config",
        }
    }
}

/// Which kind of tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TokenKind {
    Input,
    Output,
}

impl TokenKind {
    fn as_str(self) -> &'static str {
        match self {
            TokenKind::Input => "input",
            TokenKind::Output => "output",
        }
    }
}

/// A provider as a label: its provider id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Provider(ProviderKind);

impl Provider {
    fn as_str(self) -> &'static str {
        provider_id(self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ScopeLabels {
    scope: Scope,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: TurnOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProviderLabels {
    provider: Provider,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProviderErrorLabels {
    provider: Provider,
    class: ProviderErrorClass,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenLabels {
    provider: Provider,
    kind: TokenKind,
}

/// Label values are the words the API and the docs already use (`as_str` of each type).
macro_rules! label_value {
    ($($type:ty),*) => {$(
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    )*};
}

label_value!(Scope, TurnOutcome, ProviderErrorClass, TokenKind, Provider);

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).expect("encoding the registry");
        text
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
    }

    #[test]
    fn a_dropped_meter_leaves_flight_once_and_counts_no_end() {
        let mut registry = Registry::with_prefix("atelier_chatd");
        let metrics = Metrics::new(&mut registry);
        let mut ended = metrics.turn_started(Scope::Data, None, Instant::now());
        let dropped = metrics.turn_started(Scope::Data, None, Instant::now());
        assert_eq!(
            value(&encoded(&registry), "atelier_chatd_turns_in_flight"),
            Some(2.0)
        );
        ended.ended(TurnOutcome::Done);
        ended.ended(TurnOutcome::Error);
        drop((ended, dropped));
        let text = encoded(&registry);
        assert_eq!(value(&text, "atelier_chatd_turns_in_flight"), Some(0.0));
        assert_eq!(
            value(&text, r#"atelier_chatd_turns_started_total{scope="data"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(&text, r#"atelier_chatd_turns_ended_total{outcome="done"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(&text, r#"atelier_chatd_turns_ended_total{outcome="error"}"#),
            None
        );
    }

    #[test]
    fn provider_labels_are_the_provider_ids() {
        for id in crate::provider_ids::PROVIDER_IDS {
            let kind = crate::provider_ids::provider_kind(id).expect("a known id");
            assert_eq!(Provider(kind).as_str(), id);
        }
    }

    #[test]
    fn provider_failures_are_labelled_with_the_provider_id_and_class() {
        let mut registry = Registry::with_prefix("atelier_chatd");
        let metrics = Metrics::new(&mut registry);
        metrics.provider_failed(
            ProviderKind::OpenAiCompatible,
            &LlmError::Auth {
                label: "Custom Provider",
                status: 401,
            },
        );
        assert_eq!(
            value(
                &encoded(&registry),
                r#"atelier_chatd_provider_errors_total{provider="openai-compatible",class="auth"}"#
            ),
            Some(1.0)
        );
    }
}
