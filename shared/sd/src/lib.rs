//! How an Atelier daemon lives under systemd: activated sockets, readiness, credentials, logs.
//!
//! Every protocol here is small and implemented in this crate, so each failure has a named
//! error of ours rather than a third-party crate's.
//!
//! Parts:
//! - [`listen`]: sockets passed by socket activation (`LISTEN_PID`, `LISTEN_FDS`,
//!   `LISTEN_FDNAMES`), classified by kind, and a bind fallback for development.
//! - [`notify`]: `sd_notify` over `$NOTIFY_SOCKET` (`READY=1`, `STATUS=`, `STOPPING=1`,
//!   `WATCHDOG=1`); a failed notification is logged, never fatal.
//! - [`credentials`]: secrets from `$CREDENTIALS_DIRECTORY`, wrapped so they never print.
//! - [`logging`]: one `tracing` setup: structured journal entries when stderr is the journal
//!   (`JOURNAL_STREAM`), human-readable lines on stderr otherwise.

pub mod credentials;
pub mod listen;
pub mod logging;
pub mod notify;
