//! The faults a turn can end with, and the `error` event each leaves in its session: the
//! machine `reason` the engine maps, whether trying again may work, and a fixed sentence the
//! engine's UI shows as `message`.
//!
//! The sentence is sited's own, chosen by the fault alone: nothing an agent printed or wrote
//! reaches it (an agent's stderr tail has its own `agent_output` event). Every fault is one
//! variant and every question about it one exhaustive match, so a fault added without its
//! reason, retriability or sentence does not compile.
//!
//! [`TurnEnd`] is the state a turn ends in, with its fault if it has one: what its `turn_end`
//! says and what the metrics count it by.

use atelier_site_api::SessionEvent;

use crate::runs::RunRefusal;
use atelier_site_api::Reason;
use atelier_systemd::Reason as Pid1Reason;

/// Why a turn ended in fault; a turn has at most one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnFault {
    /// The turn could not be prepared (its plan, brief or files), so no run was opened.
    SetupFailed,
    /// A stop, or sited stopping, ended the turn.
    Interrupted,
    /// The turn ran past its deadline and was ended.
    Timeout,
    /// The run's connection ended without an exit record.
    UnitLost,
    /// The agent was ended by a signal.
    AgentKilled,
    /// The agent exited non-zero, or exited 0 saying it failed.
    AgentExited,
    /// The host cannot run anything for the site.
    ConfinementUnavailable,
    /// sited is stopping and opens no new run.
    DaemonStopping,
    /// The site has no agent identity.
    IdentityMissing,
    /// An earlier run of the site would not die.
    IdentityQuarantined,
    /// The door unit never answered, or PID 1 refused it.
    UnitRefused,
    /// PID 1 loaded the door unit differently from what was rendered.
    UnitNonconformant,
}

impl TurnFault {
    /// Every fault, each once.
    pub const ALL: [TurnFault; 12] = [
        TurnFault::SetupFailed,
        TurnFault::Interrupted,
        TurnFault::Timeout,
        TurnFault::UnitLost,
        TurnFault::AgentKilled,
        TurnFault::AgentExited,
        TurnFault::ConfinementUnavailable,
        TurnFault::DaemonStopping,
        TurnFault::IdentityMissing,
        TurnFault::IdentityQuarantined,
        TurnFault::UnitRefused,
        TurnFault::UnitNonconformant,
    ];

    /// The fault a refused run leaves: the refusal's own reason, the one its HTTP problem
    /// names too.
    pub fn of_refusal(refusal: &RunRefusal) -> TurnFault {
        match refusal {
            RunRefusal::DaemonStopping => TurnFault::DaemonStopping,
            RunRefusal::Unavailable(_) => TurnFault::ConfinementUnavailable,
            RunRefusal::IdentityMissing(_) => TurnFault::IdentityMissing,
            RunRefusal::Quarantined { .. } => TurnFault::IdentityQuarantined,
            RunRefusal::Nonconformant(_) => TurnFault::UnitNonconformant,
            RunRefusal::UnitRefused { .. } => TurnFault::UnitRefused,
            RunRefusal::Pid1(error) => match error.reason() {
                Pid1Reason::Unavailable => TurnFault::ConfinementUnavailable,
                Pid1Reason::IdentityQuarantined => TurnFault::IdentityQuarantined,
                Pid1Reason::UnitNonconformant => TurnFault::UnitNonconformant,
                Pid1Reason::UnitRefused => TurnFault::UnitRefused,
            },
        }
    }

    /// The wire `reason` (a refusal's is the problem reason's string).
    pub fn reason(self) -> &'static str {
        match self {
            TurnFault::SetupFailed => "turn_setup_failed",
            TurnFault::Interrupted => "turn_interrupted",
            TurnFault::Timeout => "turn_timeout",
            TurnFault::UnitLost => "turn_unit_lost",
            TurnFault::AgentKilled => "turn_agent_killed",
            TurnFault::AgentExited => "turn_agent_exited",
            TurnFault::ConfinementUnavailable => Reason::ConfinementUnavailable.as_str(),
            TurnFault::DaemonStopping => Reason::ConfinementDaemonStopping.as_str(),
            TurnFault::IdentityMissing => Reason::ConfinementIdentityMissing.as_str(),
            TurnFault::IdentityQuarantined => Reason::ConfinementIdentityQuarantined.as_str(),
            TurnFault::UnitRefused => Reason::ConfinementUnitRefused.as_str(),
            TurnFault::UnitNonconformant => Reason::ConfinementUnitNonconformant.as_str(),
        }
    }

    /// Whether the same turn may work when tried again: a fault of the run's moment, not of
    /// the agent, the site or the host's set-up.
    pub fn retriable(self) -> bool {
        match self {
            // A stopping daemon is back in a moment (the engine maps it to busy, retryable).
            TurnFault::Interrupted
            | TurnFault::Timeout
            | TurnFault::UnitLost
            | TurnFault::AgentKilled
            | TurnFault::DaemonStopping => true,
            TurnFault::SetupFailed
            | TurnFault::AgentExited
            | TurnFault::ConfinementUnavailable
            | TurnFault::IdentityMissing
            | TurnFault::IdentityQuarantined
            | TurnFault::UnitRefused
            | TurnFault::UnitNonconformant => false,
        }
    }

    /// The sentence the engine's UI shows for this fault.
    pub fn message(self) -> &'static str {
        match self {
            TurnFault::SetupFailed => {
                "The turn could not be prepared, so the agent was not started."
            }
            TurnFault::Interrupted => "The turn was stopped before it finished.",
            TurnFault::Timeout => "The turn ran past its time limit and was stopped.",
            TurnFault::UnitLost => {
                "The agent's run was lost before it finished; the turn can be tried again."
            }
            TurnFault::AgentKilled => "The agent was ended before it finished the turn.",
            TurnFault::AgentExited => {
                "The agent stopped with an error before it finished the turn."
            }
            TurnFault::ConfinementUnavailable => {
                "This host cannot run the agent for this site, so the turn was not started."
            }
            TurnFault::DaemonStopping => {
                "The site daemon is shutting down, so the turn was not started; try again in a moment."
            }
            TurnFault::IdentityMissing => {
                "This site has no agent identity on the host yet, so the turn was not started."
            }
            TurnFault::IdentityQuarantined => {
                "An earlier run of this site would not stop, so the turn was not started."
            }
            TurnFault::UnitRefused => {
                "The host refused to start the agent's run, so the turn was not started."
            }
            TurnFault::UnitNonconformant => {
                "The host's agent unit differs from what was installed, so the turn was not started."
            }
        }
    }

    /// The session's `error` event body for this fault.
    pub fn event(self) -> SessionEvent {
        SessionEvent::Error {
            reason: Some(self.reason().to_owned()),
            retriable: Some(self.retriable()),
            message: Some(self.message().to_owned()),
        }
    }
}

/// The state a turn ended in, as its `turn_end` and the session's meta name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnEnd {
    /// It finished without a fault.
    Idle,
    /// A stop, or sited stopping, ended it.
    Interrupted,
    /// It ended with this fault.
    Error(TurnFault),
}

impl TurnEnd {
    /// The wire `state`.
    pub fn state(self) -> &'static str {
        match self {
            TurnEnd::Idle => "idle",
            TurnEnd::Interrupted => "interrupted",
            TurnEnd::Error(_) => "error",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use serde_json::json;

    /// Each fault's event, read back: its reason and retriability as the engine maps them, and
    /// a sentence of its own. The match is exhaustive, so a new fault fails to compile here
    /// until its row is written.
    #[test]
    fn every_fault_has_its_reason_retriability_and_own_message() {
        let mut reasons = BTreeSet::new();
        let mut messages = BTreeSet::new();
        for fault in TurnFault::ALL {
            let (reason, retriable) = match fault {
                TurnFault::SetupFailed => ("turn_setup_failed", false),
                TurnFault::Interrupted => ("turn_interrupted", true),
                TurnFault::Timeout => ("turn_timeout", true),
                TurnFault::UnitLost => ("turn_unit_lost", true),
                TurnFault::AgentKilled => ("turn_agent_killed", true),
                TurnFault::AgentExited => ("turn_agent_exited", false),
                TurnFault::ConfinementUnavailable => ("confinement_unavailable", false),
                TurnFault::DaemonStopping => ("confinement.daemon_stopping", true),
                TurnFault::IdentityMissing => ("confinement.identity_missing", false),
                TurnFault::IdentityQuarantined => ("confinement.identity_quarantined", false),
                TurnFault::UnitRefused => ("confinement.unit_refused", false),
                TurnFault::UnitNonconformant => ("confinement.unit_nonconformant", false),
            };
            let event = serde_json::to_value(fault.event()).unwrap();
            let message = event["message"].as_str().unwrap_or_default().to_owned();
            assert_eq!(
                event,
                json!({"type": "error", "reason": reason, "retriable": retriable, "message": message}),
                "{fault:?}"
            );
            assert!(
                message.starts_with(|c: char| c.is_ascii_uppercase()) && message.ends_with('.'),
                "{fault:?}: a sentence, got {message:?}"
            );
            assert!(reasons.insert(reason), "{fault:?}: its reason is its own");
            assert!(
                messages.insert(message.clone()),
                "{fault:?}: its sentence is its own"
            );
        }
    }

    /// A refused run's fault carries the very reason its HTTP problem would.
    #[test]
    fn a_refused_run_is_named_by_its_problem_reason() {
        let refusals = [
            RunRefusal::DaemonStopping,
            RunRefusal::Unavailable("no shim".to_owned()),
            RunRefusal::IdentityMissing("alpha".to_owned()),
            RunRefusal::Quarantined {
                slug: "alpha".to_owned(),
                unit: "u".to_owned(),
            },
            RunRefusal::Nonconformant("PrivateNetwork".to_owned()),
            RunRefusal::UnitRefused {
                door: atelier_proto::Door::Turn,
                detail: "no hello".to_owned(),
            },
            RunRefusal::Pid1(atelier_systemd::Error::Denied {
                method: "StartUnit",
                unit: "u".to_owned(),
                message: "denied".to_owned(),
            }),
            RunRefusal::Pid1(atelier_systemd::Error::StillAlive {
                unit: "u".to_owned(),
                active_state: "deactivating".to_owned(),
                sub_state: "stop-sigterm".to_owned(),
                processes: None,
            }),
            RunRefusal::Pid1(atelier_systemd::Error::Refused {
                method: "StartUnit",
                unit: "u".to_owned(),
                name: "org.freedesktop.systemd1.NoSuchUnit".to_owned(),
                message: "no".to_owned(),
            }),
        ];
        for refusal in refusals {
            assert_eq!(
                TurnFault::of_refusal(&refusal).reason(),
                refusal.reason().as_str(),
                "{refusal:?}"
            );
        }
    }
}
