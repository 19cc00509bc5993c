//! Why a question to PID 1 failed, and which kind of refusal that is.

use atelier_site_api::Reason as Refusal;

use crate::names::NameError;
use crate::property::Nonconformant;

/// The kind of refusal a failure is; sited's HTTP layer names each with its wire reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The host cannot confine: no bus, PID 1 too old or unreadable, the polkit grant absent.
    Unavailable,
    /// A run of the site will not die; the site waits until PID 1 reports it gone.
    IdentityQuarantined,
    /// PID 1 loaded a door's unit differently from what Atelier rendered.
    UnitNonconformant,
    /// PID 1 refused what was asked of a unit, or the unit name itself was refused.
    UnitRefused,
}

// === impl Reason ===

impl Reason {
    /// The contract's refusal this is, as sited answers it.
    pub fn refusal(self) -> Refusal {
        match self {
            Reason::Unavailable => Refusal::ConfinementUnavailable,
            Reason::IdentityQuarantined => Refusal::ConfinementIdentityQuarantined,
            Reason::UnitNonconformant => Refusal::ConfinementUnitNonconformant,
            Reason::UnitRefused => Refusal::ConfinementUnitRefused,
        }
    }

    /// Returns true if and only if the condition clears by itself, so a client may retry.
    pub fn is_retryable(self) -> bool {
        match self {
            Reason::IdentityQuarantined => true,
            Reason::Unavailable | Reason::UnitNonconformant | Reason::UnitRefused => false,
        }
    }
}

/// A failed question to PID 1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bus could not be reached.
    #[error("cannot reach PID 1 over D-Bus at {address}: {source}")]
    BusUnavailable {
        /// The bus address tried.
        address: String,
        /// Why.
        #[source]
        source: zbus::Error,
    },
    /// PID 1's `Version` is not a release number.
    #[error("PID 1 reports version {version:?}, which names no release")]
    VersionUnreadable {
        /// What PID 1 said.
        version: String,
    },
    /// PID 1 is older than Atelier's floor.
    #[error("PID 1 is systemd {found}; Atelier's door units need systemd {min} or newer")]
    TooOld {
        /// PID 1's release.
        found: u32,
        /// The oldest accepted.
        min: u32,
    },
    /// A property or state could not be read.
    #[error("cannot read {what} of {unit} from PID 1: {source}")]
    Unreadable {
        /// The unit (or `Manager`).
        unit: String,
        /// What was read.
        what: &'static str,
        /// Why.
        #[source]
        source: zbus::Error,
    },
    /// polkit (or the bus) refused the caller.
    #[error("PID 1 refused {method} of {unit}: not authorized ({message})")]
    Denied {
        /// The Manager method.
        method: &'static str,
        /// The unit.
        unit: String,
        /// PID 1's words.
        message: String,
    },
    /// PID 1 refused the call for another reason.
    #[error("PID 1 refused {method} of {unit}: {name}: {message}")]
    Refused {
        /// The Manager method.
        method: &'static str,
        /// The unit.
        unit: String,
        /// The D-Bus error name.
        name: String,
        /// PID 1's words.
        message: String,
    },
    /// A unit name, pattern or signal that is not sent.
    #[error(transparent)]
    BadName(#[from] NameError),
    /// The unit was still running (or held processes) when the deadline passed.
    #[error(
        "{unit} is still alive ({active_state}/{sub_state}{}) at the deadline",
        processes_text(*.processes)
    )]
    StillAlive {
        /// The unit.
        unit: String,
        /// Its `ActiveState` at the deadline.
        active_state: String,
        /// Its `SubState` at the deadline.
        sub_state: String,
        /// The processes left in its cgroup, when it was stopped.
        processes: Option<u64>,
    },
    /// A property PID 1 loaded differs from what Atelier expects.
    #[error(transparent)]
    Nonconformant(Box<Nonconformant>),
}

fn processes_text(processes: Option<u64>) -> String {
    processes
        .map(|n| format!(", {n} processes left"))
        .unwrap_or_default()
}

// === impl Error ===

impl Error {
    /// The refusal sited makes of this failure.
    pub fn reason(&self) -> Reason {
        match self {
            Error::BusUnavailable { .. }
            | Error::VersionUnreadable { .. }
            | Error::TooOld { .. }
            | Error::Unreadable { .. }
            | Error::Denied { .. } => Reason::Unavailable,
            Error::StillAlive { .. } => Reason::IdentityQuarantined,
            Error::Nonconformant(_) => Reason::UnitNonconformant,
            Error::Refused { .. } | Error::BadName(_) => Reason::UnitRefused,
        }
    }

    /// The nonconformant property, for a conformance refusal.
    pub fn nonconformant(&self) -> Option<&Nonconformant> {
        match self {
            Error::Nonconformant(refusal) => Some(refusal),
            _ => None,
        }
    }
}

impl From<Nonconformant> for Error {
    fn from(refusal: Nonconformant) -> Self {
        Error::Nonconformant(Box::new(refusal))
    }
}

/// A result of a question to PID 1.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::property::{Expected, Property};
    use crate::value::Value;

    #[test]
    fn reasons_on_the_wire() {
        let cases: Vec<(&str, Error, &str, bool)> = vec![
            (
                "too old",
                Error::TooOld {
                    found: 247,
                    min: 248,
                },
                "confinement_unavailable",
                false,
            ),
            (
                "unreadable version",
                Error::VersionUnreadable {
                    version: "x".into(),
                },
                "confinement_unavailable",
                false,
            ),
            (
                "polkit refusal",
                Error::Denied {
                    method: "StopUnit",
                    unit: "a.service".into(),
                    message: "Interactive authentication required.".into(),
                },
                "confinement_unavailable",
                false,
            ),
            (
                "still alive",
                Error::StillAlive {
                    unit: "a.service".into(),
                    active_state: "deactivating".into(),
                    sub_state: "stop-sigterm".into(),
                    processes: None,
                },
                "confinement.identity_quarantined",
                true,
            ),
            (
                "nonconformant",
                Error::from(Nonconformant {
                    unit: "a.service".into(),
                    property: Property::service("PrivateNetwork"),
                    expected: Expected::Is(Value::Bool(true)),
                    loaded: Some(Value::Bool(false)),
                }),
                "confinement.unit_nonconformant",
                false,
            ),
            (
                "refused",
                Error::Refused {
                    method: "KillUnit",
                    unit: "a.service".into(),
                    name: "org.freedesktop.systemd1.NoSuchProcess".into(),
                    message: "No process".into(),
                },
                "confinement.unit_refused",
                false,
            ),
            (
                "bad name",
                Error::BadName(NameError::BadSignal(0)),
                "confinement.unit_refused",
                false,
            ),
        ];
        for (case, error, reason, retryable) in cases {
            assert_eq!(error.reason().refusal().as_str(), reason, "{case}");
            assert_eq!(error.reason().is_retryable(), retryable, "{case}");
        }
    }

    #[test]
    fn refusal_names_the_property() {
        let error = Error::from(Nonconformant {
            unit: "atelier-example-s1-turn@probe.service".into(),
            property: Property::service("PrivateNetwork"),
            expected: Expected::Is(Value::Bool(true)),
            loaded: Some(Value::Bool(false)),
        });
        assert_eq!(
            error.to_string(),
            "atelier-example-s1-turn@probe.service: PrivateNetwork is no, expected yes"
        );
        assert_eq!(
            error.nonconformant().map(|n| n.property.name),
            Some("PrivateNetwork")
        );
    }
}
