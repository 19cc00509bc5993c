//! `sd_notify` over `$NOTIFY_SOCKET`: tells systemd we are ready, what we are doing, that we
//! are stopping, and that we are alive (the watchdog).
//!
//! The protocol (`sd_notify(3)`): one datagram of newline-separated `KEY=VALUE` lines sent to
//! the `AF_UNIX` datagram socket named by `$NOTIFY_SOCKET`, a path or, with a leading `@`, an
//! abstract name. A failed notification is logged with `tracing::warn!` and never returned:
//! the daemon's work must not depend on whether PID 1 heard it.
//!
//! Parts:
//! - [`Notifier`]: the sender; a no-op when the process was not started with a notify socket.
//! - [`parse_notify_socket`] and [`watchdog_interval`]: the pure parsers of the variables.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

/// How long a notification may block when the receiver's queue is full. PID 1 drains its
/// queue promptly; a longer stall means it is not listening, and the daemon should go on.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// Why `$NOTIFY_SOCKET` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifySocketError {
    /// The variable is empty, or `@` alone.
    #[error("NOTIFY_SOCKET is empty")]
    Empty,
    /// Neither an absolute path nor `@name` (for example systemd's `vsock:` addresses).
    #[error("NOTIFY_SOCKET {value:?} is neither an absolute path nor an @abstract name")]
    Unsupported {
        /// The variable's value.
        value: String,
    },
    /// The kernel would not take the address (too long, or it contains a NUL).
    #[error("NOTIFY_SOCKET {value:?} is not a valid unix socket address")]
    BadAddress {
        /// The variable's value.
        value: String,
        /// The error from building the address.
        #[source]
        source: io::Error,
    },
    /// The variable is not valid UTF-8.
    #[error("NOTIFY_SOCKET is not valid UTF-8")]
    NotUnicode,
}

/// Parses `$NOTIFY_SOCKET`: an absolute path, or `@name` for an abstract socket.
pub fn parse_notify_socket(value: &str) -> Result<SocketAddr, NotifySocketError> {
    let bad_address = |source| NotifySocketError::BadAddress {
        value: value.to_owned(),
        source,
    };
    if value.is_empty() || value == "@" {
        Err(NotifySocketError::Empty)
    } else if let Some(name) = value.strip_prefix('@') {
        SocketAddr::from_abstract_name(name).map_err(bad_address)
    } else if value.starts_with('/') {
        SocketAddr::from_pathname(value).map_err(bad_address)
    } else {
        Err(NotifySocketError::Unsupported {
            value: value.to_owned(),
        })
    }
}

/// The watchdog ping interval for `own_pid`: half of `WATCHDOG_USEC`, as `sd_watchdog_enabled(3)`
/// recommends, so one late ping does not kill the service.
///
/// `None` (no pinging) when `WATCHDOG_USEC` is absent, not a positive number, or when
/// `WATCHDOG_PID` is set to anything but `own_pid` (the watchdog is another process's). An
/// absent `WATCHDOG_PID` means the watchdog is ours.
pub fn watchdog_interval(
    watchdog_usec: Option<&str>,
    watchdog_pid: Option<&str>,
    own_pid: u32,
) -> Option<Duration> {
    let usec = watchdog_usec?
        .parse::<u64>()
        .ok()
        .filter(|&usec| usec > 0)?;
    if let Some(pid) = watchdog_pid {
        if pid.parse::<u32>().ok()? != own_pid {
            return None;
        }
    }
    // At least 1 µs: a zero period would make the pinging loop spin.
    Some(Duration::from_micros((usec / 2).max(1)))
}

/// Sends `sd_notify` messages to systemd. Cheap to clone; every clone shares one socket.
///
/// Every method returns `()`: a failure is logged as a warning and otherwise ignored.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    target: Option<Arc<Target>>,
}

#[derive(Debug)]
struct Target {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `$NOTIFY_SOCKET` as given, for log lines.
    display: String,
    watchdog: Option<Duration>,
}

// === impl Notifier ===

impl Notifier {
    /// A notifier for this process's `$NOTIFY_SOCKET`, pinging the watchdog at the interval
    /// [`watchdog_interval`] derives from `$WATCHDOG_USEC` and `$WATCHDOG_PID`.
    ///
    /// Without `$NOTIFY_SOCKET` (not started by systemd as `Type=notify`) every call is a
    /// no-op. An unusable `$NOTIFY_SOCKET` is logged and also gives a no-op notifier.
    pub fn from_env() -> Notifier {
        let own_pid = std::process::id();
        let watchdog = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            own_pid,
        );
        match std::env::var("NOTIFY_SOCKET") {
            Ok(value) => Notifier::new(Some(&value), watchdog),
            Err(std::env::VarError::NotPresent) => Notifier::disabled(),
            Err(std::env::VarError::NotUnicode(_)) => {
                tracing::warn!(
                    error = %NotifySocketError::NotUnicode,
                    "sd_notify disabled: systemd will not hear from this process"
                );
                Notifier::disabled()
            }
        }
    }

    /// A notifier sending to `notify_socket` (in `$NOTIFY_SOCKET` syntax: a path or `@name`),
    /// pinging the watchdog every `watchdog` (the ping interval, already halved).
    ///
    /// `None`, or an address that cannot be used (logged), gives a no-op notifier.
    pub fn new(notify_socket: Option<&str>, watchdog: Option<Duration>) -> Notifier {
        let Some(value) = notify_socket else {
            return Notifier::disabled();
        };
        match Target::open(value, watchdog) {
            Ok(target) => Notifier {
                target: Some(Arc::new(target)),
            },
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "sd_notify disabled: systemd will not hear from this process"
                );
                Notifier::disabled()
            }
        }
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { target: None }
    }

    /// Returns true if and only if this notifier has a socket to send to.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog ping interval, if the watchdog is enabled for this process.
    pub fn watchdog_ping_interval(&self) -> Option<Duration> {
        self.target.as_ref()?.watchdog
    }

    /// `READY=1`: startup is finished (config validated, listeners held).
    pub fn ready(&self) {
        self.send(&["READY=1"]);
    }

    /// `READY=1` and `STATUS=<status>` in one message.
    pub fn ready_with_status(&self, status: &str) {
        let status = status_line(status);
        self.send(&["READY=1", &status]);
    }

    /// `STATUS=<status>`: a one-line, human-readable state shown by `systemctl status`.
    /// Line breaks and NULs are replaced by spaces, so a status cannot inject other keys.
    pub fn status(&self, status: &str) {
        self.send(&[&status_line(status)]);
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn stopping(&self) {
        self.send(&["STOPPING=1"]);
    }

    /// `WATCHDOG=1`: we are alive.
    pub fn watchdog(&self) {
        self.send(&["WATCHDOG=1"]);
    }

    /// `EXTEND_TIMEOUT_USEC=<timeout>`: startup or shutdown needs `timeout` more from now.
    pub fn extend_timeout(&self, timeout: Duration) {
        self.send(&[&format!("EXTEND_TIMEOUT_USEC={}", timeout.as_micros())]);
    }

    /// Sends `lines` as one message. Each line must be `KEY=VALUE` without a line break or
    /// NUL; a malformed message is logged and not sent. An empty slice sends nothing.
    pub fn send(&self, lines: &[&str]) {
        let Some(target) = &self.target else {
            return;
        };
        if lines.is_empty() {
            return;
        }
        let keys = lines
            .iter()
            .map(|line| line.split_once('=').map_or("", |(key, _)| key))
            .collect::<Vec<_>>()
            .join(",");
        if let Some(bad) = lines
            .iter()
            .position(|line| !line.contains('=') || line.contains(['\n', '\0']))
        {
            tracing::warn!(
                line = bad,
                keys = %keys,
                "sd_notify message not sent: each line must be KEY=VALUE on one line"
            );
            return;
        }
        let message = lines.join("\n");
        if let Err(e) = target.socket.send_to_addr(message.as_bytes(), &target.addr) {
            tracing::warn!(
                error = %e,
                socket = %target.display,
                keys = %keys,
                "sd_notify failed"
            );
        }
    }

    /// Pings the watchdog every [`Notifier::watchdog_ping_interval`] on the current tokio
    /// runtime until the task is aborted or the runtime shuts down.
    ///
    /// `None` when there is no watchdog (or no notify socket), and, with a warning, when called
    /// outside a tokio runtime. Each ping is a non-async send that waits at most a couple of
    /// seconds (only when PID 1's queue is full).
    pub fn spawn_watchdog(&self) -> Option<tokio::task::JoinHandle<()>> {
        let interval = self.watchdog_ping_interval()?;
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::warn!(error = %e, "watchdog not started: no tokio runtime");
                return None;
            }
        };
        let notifier = self.clone();
        Some(runtime.spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                notifier.watchdog();
            }
        }))
    }

    /// Keeps `STATUS=` at what `status` says: asks it every `every` and sends only a change
    /// from what was last shown, starting from `shown` (what READY carried). Abort the task
    /// when another voice takes over, e.g. the stop signal's account of the drain.
    pub fn spawn_status<F>(
        &self,
        every: Duration,
        mut shown: String,
        status: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: Fn() -> String + Send + 'static,
    {
        let notifier = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let now = status();
                if now != shown {
                    notifier.status(&now);
                    shown = now;
                }
            }
        })
    }
}

fn status_line(status: &str) -> String {
    format!("STATUS={}", status.replace(['\n', '\r', '\0'], " "))
}

// === impl Target ===

impl Target {
    fn open(value: &str, watchdog: Option<Duration>) -> io::Result<Target> {
        let addr = parse_notify_socket(value).map_err(io::Error::other)?;
        let socket = UnixDatagram::unbound()?;
        socket.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Target {
            socket,
            addr,
            display: value.to_owned(),
            watchdog,
        })
    }
}

#[cfg(test)]
mod tests;
