//! A door's decisions: each recorded once, then sent to every subscription of the door and
//! logged to the journal, both deduplicated and bounded per run.
//!
//! [`DecisionLog::record`] is synchronous, and the gate calls it before it answers the client
//! the decision is about: a decision whose reply the client has seen is already queued in every
//! [`Subscription`] of its door. A subscription (one per subscriber of the decisions socket, so
//! one per run) receives at most [`MAX_LOG_LINES`] distinct decisions. The journal keeps the
//! same bound per window, and a window starts with each new subscription of the door, so a
//! long-lived gate logs the first decisions of every run.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use atelier_proto::egress::{Decision, Verdict};
use atelier_proto::Door as DoorName;
use tokio::sync::mpsc;

pub use atelier_proto::egress::{printable, MAX_DECISION_TEXT as MAX_LOG_TEXT};

/// Distinct decisions a subscription receives, and distinct lines the journal takes per
/// window; later new ones are dropped (after one warning saying so). The original daemon's
/// per-run bound.
pub const MAX_LOG_LINES: usize = 200;

/// One door's decisions, its subscriptions and its journal window.
#[derive(Debug)]
pub struct DecisionLog {
    door: DoorName,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// What the journal took in this window.
    journal: Distinct,
    subscribers: Vec<Subscriber>,
    next_id: u64,
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    sent: Distinct,
    queue: mpsc::UnboundedSender<Decision>,
}

/// Distinct decisions, in the order first seen, at most [`MAX_LOG_LINES`].
#[derive(Debug, Default)]
struct Distinct {
    order: Vec<Decision>,
    seen: HashSet<Decision>,
    full: bool,
}

/// What [`Distinct::admit`] made of a decision.
enum Admit {
    /// A decision not seen before, now counted.
    New,
    /// Seen before.
    Seen,
    /// New but over the bound; `first` for the first one dropped.
    OverCap { first: bool },
}

/// One subscriber's view of a door's decisions, from the moment of [`DecisionLog::subscribe`]
/// until it is ended (or dropped).
#[derive(Debug)]
pub struct Subscription {
    end: SubscriptionEnd,
    queue: mpsc::UnboundedReceiver<Decision>,
}

/// Ends a [`Subscription`] from elsewhere, e.g. from the task that watches the subscriber's
/// read side.
#[derive(Debug, Clone)]
pub struct SubscriptionEnd {
    log: Arc<DecisionLog>,
    id: u64,
}

// === impl DecisionLog ===

impl DecisionLog {
    /// An empty log for `door`.
    pub fn new(door: DoorName) -> DecisionLog {
        DecisionLog {
            door,
            state: Mutex::new(State::default()),
        }
    }

    /// The door whose decisions this is.
    pub fn door(&self) -> DoorName {
        self.door
    }

    /// Records one decision of this door: queued for every subscription that has not had it
    /// (within its bound), then logged unless this window already logged it. `host` and
    /// `reason` are made printable and bounded, as either may carry agent-supplied text.
    ///
    /// Journal entries carry the fields `door`, `host`, `port` (when there is one), `verdict`
    /// and `reason`, and the human [`Decision::line`] as their message.
    pub fn record(&self, host: &str, port: Option<u16>, verdict: Verdict, reason: &str) {
        let decision = Decision::new(self.door, host, port, verdict, reason);
        let mut state = self.lock();
        for subscriber in &mut state.subscribers {
            match subscriber.sent.admit(&decision) {
                Admit::New => {
                    // A closed queue means the subscription is ending; its end removes it.
                    let _ = subscriber.queue.send(decision.clone());
                }
                Admit::Seen | Admit::OverCap { first: false } => {}
                Admit::OverCap { first: true } => tracing::warn!(
                    door = %self.door,
                    "a subscription received {MAX_LOG_LINES} distinct decisions; later ones are not sent to it"
                ),
            }
        }
        match state.journal.admit(&decision) {
            Admit::New => tracing::info!(
                door = %decision.door,
                host = %decision.host,
                port = decision.port,
                verdict = %decision.verdict,
                reason = %decision.reason,
                "{}",
                decision.line()
            ),
            Admit::Seen | Admit::OverCap { first: false } => {}
            Admit::OverCap { first: true } => tracing::warn!(
                door = %self.door,
                "logged {MAX_LOG_LINES} distinct decisions since this door's run began; later ones are not logged"
            ),
        }
    }

    /// Starts a subscription: it receives every decision recorded from now on, until it is
    /// ended. A subscription starts a run, so the journal's window starts again too.
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        let (sender, queue) = mpsc::unbounded_channel();
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.subscribers.push(Subscriber {
            id,
            sent: Distinct::default(),
            queue: sender,
        });
        state.journal = Distinct::default();
        Subscription {
            end: SubscriptionEnd {
                log: Arc::clone(self),
                id,
            },
            queue,
        }
    }

    /// How many subscriptions are recording.
    pub fn subscriptions(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// The decisions the journal took in this window, in order, each as its journal fields
    /// read on stderr: `door=turn host=api.example.com port=443 verdict=allowed reason=via
    /// 198.18.0.10:443` (no `port=` when there is none).
    pub fn lines(&self) -> Vec<String> {
        self.lock().journal.order.iter().map(fields).collect()
    }

    fn end(&self, id: u64) {
        self.lock()
            .subscribers
            .retain(|subscriber| subscriber.id != id);
    }

    /// The state; a panic elsewhere while holding it leaves nothing half-done that matters.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `decision` as the human log prints its fields.
fn fields(decision: &Decision) -> String {
    let port = decision
        .port
        .map(|port| format!(" port={port}"))
        .unwrap_or_default();
    format!(
        "door={} host={}{port} verdict={} reason={}",
        decision.door, decision.host, decision.verdict, decision.reason
    )
}

// === impl Distinct ===

impl Distinct {
    fn admit(&mut self, decision: &Decision) -> Admit {
        if self.seen.contains(decision) {
            return Admit::Seen;
        }
        if self.order.len() >= MAX_LOG_LINES {
            let first = !self.full;
            self.full = true;
            return Admit::OverCap { first };
        }
        self.seen.insert(decision.clone());
        self.order.push(decision.clone());
        Admit::New
    }
}

// === impl Subscription ===

impl Subscription {
    /// The next decision: waits for one while the subscription records; once it is ended,
    /// yields what was recorded before the end, then `None`.
    pub async fn next(&mut self) -> Option<Decision> {
        self.queue.recv().await
    }

    /// A handle that ends this subscription.
    pub fn end_handle(&self) -> SubscriptionEnd {
        self.end.clone()
    }

    /// Stops recording into this subscription; what it already holds is still yielded.
    pub fn end(&self) {
        self.end.end();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.end.end();
    }
}

// === impl SubscriptionEnd ===

impl SubscriptionEnd {
    /// Stops recording into the subscription. Ending twice is harmless.
    pub fn end(&self) {
        self.log.end(self.id);
    }
}
