//! sited's way to talk to PID 1 over D-Bus (`org.freedesktop.systemd1`), never by parsing
//! `systemctl` output.
//!
//! - [`client`]: [`Systemd`], the connection: PID 1's release, unit states, `stop`, `kill`,
//!   [`Systemd::wait_gone`], and the properties PID 1 loaded for a unit.
//! - [`value`]: the comparable form of a property ([`Value`]).
//! - [`property`]: expectations as data ([`Property`], [`Expected`]) and the check that names
//!   the first nonconformant property ([`Nonconformant`]).
//! - [`door`]: what Atelier requires of a door's socket, target and service
//!   ([`door_expectations`]), derived from the layout.
//! - [`unit_file`]: a unit file read into the same properties, to check rendered units.
//! - [`names`]: unit names, patterns and signals checked before they are sent.
//! - [`error`]: [`Error`] and the kind of refusal ([`Reason`]) each failure is.

pub mod client;
pub mod door;
pub mod error;
pub mod names;
pub mod property;
pub mod unit_file;
pub mod value;

pub use client::{Killed, Stopped, Systemd, UnitStatus};
pub use door::{door_expectations, DoorExpectations, DoorFacts, PROBE_INSTANCE};
pub use error::{Error, Reason, Result};
pub use names::{NameError, Signal};
pub use property::{
    Expected, Interface, LoadedUnit, Nonconformant, Property, UnitExpectations, UnitKind,
};
pub use value::{ExecCommand, Value};
