//! The shim's exit codes (a contract with sited and the units) and how a child's end maps to
//! an exit record and an exit code.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use atelier_proto::ExitRecord;

/// The unit states no door or workdir, or stdin/stdout is not a connection (`EX_USAGE`).
pub const NO_DOOR: u8 = 64;
/// The spec is missing, malformed, doubled, for another door or sets a fixed key
/// (`EX_DATAERR`).
pub const BAD_SPEC: u8 = 65;
/// Something the shim needs from the host failed (`EX_SOFTWARE`).
pub const INTERNAL: u8 = 70;
/// A forward's port could not be bound (`EX_OSERR`).
pub const CANNOT_LISTEN: u8 = 71;
/// The daemon closed the connection or a write to it failed (`EX_IOERR`).
pub const DAEMON_GONE: u8 = 74;
/// The private network namespace is not in effect (`EX_CONFIG`).
pub const NAMESPACE_NOT_IN_EFFECT: u8 = 78;
/// The program could not be started (the shell's convention).
pub const SPAWN_FAILED: u8 = 127;

/// Offset of a signal's number in the exit code of a process it ended (the shell's convention).
const SIGNAL_EXIT_BASE: u8 = 128;

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// It exited with this code.
    Exited(i32),
    /// This signal number ended it.
    Signaled(i32),
}

// === impl ChildEnd ===

impl ChildEnd {
    /// The end a wait status records, or `None` for a status that is neither (a stopped
    /// process, which a plain wait never reports).
    pub fn from_status(status: ExitStatus) -> Option<ChildEnd> {
        match (status.code(), status.signal()) {
            (Some(code), _) => Some(ChildEnd::Exited(code)),
            (None, Some(signal)) => Some(ChildEnd::Signaled(signal)),
            (None, None) => None,
        }
    }

    /// The `X` frame's record: `{code, signal: null}` or `{code: null, signal: "SIGKILL"}`.
    pub fn record(self) -> ExitRecord {
        match self {
            ChildEnd::Exited(code) => ExitRecord::exited(code),
            ChildEnd::Signaled(signal) => ExitRecord::signaled(signal_name(signal)),
        }
    }

    /// The shim's own exit code: the program's code, or 128 + the signal's number.
    pub fn exit_code(self) -> u8 {
        match self {
            // A wait status carries the low 8 bits of the code; anything else is not a code a
            // process can have exited with, and must not read as success.
            ChildEnd::Exited(code) => u8::try_from(code).unwrap_or(INTERNAL),
            ChildEnd::Signaled(signal) => u8::try_from(signal)
                .ok()
                .and_then(|n| SIGNAL_EXIT_BASE.checked_add(n))
                .unwrap_or(INTERNAL),
        }
    }
}

/// The names of the standard signals, by this platform's numbers.
const SIGNAL_NAMES: [(i32, &str); 31] = [
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGPIPE, "SIGPIPE"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGCHLD, "SIGCHLD"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGTSTP, "SIGTSTP"),
    (libc::SIGTTIN, "SIGTTIN"),
    (libc::SIGTTOU, "SIGTTOU"),
    (libc::SIGURG, "SIGURG"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGWINCH, "SIGWINCH"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSYS, "SIGSYS"),
];

/// The name of signal `number` (`SIGKILL`), or `SIG<number>` for one without a standard name
/// (the real-time signals).
pub fn signal_name(number: i32) -> String {
    SIGNAL_NAMES
        .iter()
        .find(|(n, _)| *n == number)
        .map_or_else(|| format!("SIG{number}"), |(_, name)| (*name).to_owned())
}

#[cfg(test)]
mod tests;
