//! Atelier on a real PID 1: every test boots its own systemd in a container and drives the
//! real binaries there. One test binary for all of them (each a module below), linked once.
//!
//! - [`confinement`]: confined runs, the isolation matrix, tampered doors, kill -9, latencies,
//!   the real agent CLIs and the metrics sockets.
//! - [`dbus`]: atelier-systemd against PID 1.
//! - [`gate`]: the provisioned gate.
//! - [`journey`]: the README's demo journey.
//! - [`provision`]: apply, check, remove, TLS, the chat runtime and the Debian package.
//! - [`sited`]: sited socket-activated, its settings refusal and its watchdog.

mod confinement;
mod dbus;
mod gate;
mod journey;
mod provision;
mod sited;
