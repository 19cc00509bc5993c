//! Sockets passed by systemd socket activation, and a bind fallback for development.
//!
//! The protocol (`sd_listen_fds(3)`): systemd passes `count` descriptors starting at fd 3, sets
//! `LISTEN_FDS=count`, `LISTEN_PID=<pid they are meant for>` and, optionally,
//! `LISTEN_FDNAMES=name1:name2:…` (from `FileDescriptorName=`).
//!
//! Parts:
//! - [`parse_activation`]: the pure parser of the three variables into an [`Activation`].
//! - [`listeners_from_env`]: reads the variables, takes ownership of the descriptors, marks them
//!   close-on-exec and [`classify`]s each into an [`ActivatedSocket`].
//! - [`take_by_name`], [`take_unix_listener`], [`take_tcp_listener`], [`take_unix_stream`]: pick
//!   the socket a daemon expects, with an error naming what is missing.
//! - [`bind_unix`] and [`bind_tcp`]: the development fallback when nothing was passed.
//! - [`sole_listener`]: the one listener of a single-surface daemon, activated or bound.
//!
//! The variables are left in the environment (removing them is not thread-safe); the
//! descriptors are close-on-exec, so a child never inherits them. A process that spawns an
//! Atelier binary should still `env_remove` the [`ACTIVATION_ENV_VARS`], because a child that
//! sees another process's `LISTEN_PID` refuses to start ([`ListenError::WrongPid`]).

mod bind;
mod sole;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::io::{fcntl_setfd, FdFlags};
use rustix::net::{ipproto, sockopt, AddressFamily, SocketType};

pub use bind::{bind_tcp, bind_unix, BindError};
pub use sole::{pick_sole_listener, sole_listener, SoleListener, SoleListenerError};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
pub const FIRST_FD: RawFd = 3;

/// The most descriptors we accept from `LISTEN_FDS`. systemd has no fixed limit; a count above
/// this is far more than any Atelier socket unit declares, so it means the variable is wrong.
pub const MAX_FDS: usize = 512;

/// The longest name systemd accepts in `FileDescriptorName=` (`FDNAME_MAX`).
pub const FDNAME_MAX: usize = 255;

/// The name systemd gives a descriptor when `LISTEN_FDNAMES` is absent.
pub const UNKNOWN_NAME: &str = "unknown";

/// The variables of the protocol, for a spawner to `env_remove` from a child's environment.
pub const ACTIVATION_ENV_VARS: [&str; 3] = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"];

/// Set by the first [`listeners_from_env`] that adopts descriptors: a second adoption would
/// make two owners of the same fds.
static ADOPTED: AtomicBool = AtomicBool::new(false);

/// Why the activation variables or the passed descriptors were refused.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// `LISTEN_FDS` is set but `LISTEN_PID` is not, so we cannot tell whom they are for.
    #[error("LISTEN_FDS is set but LISTEN_PID is not")]
    MissingPid,
    /// `LISTEN_PID` is not a process id.
    #[error("LISTEN_PID is not a process id: {value:?}")]
    BadPid {
        /// The variable's value.
        value: String,
    },
    /// `LISTEN_PID` names another process: the variables were meant for it, not for us
    /// (typically inherited from a parent that was activated).
    #[error("LISTEN_PID is {found}, not our pid {expected}: the sockets are another process's")]
    WrongPid {
        /// Our own pid.
        expected: u32,
        /// The pid in `LISTEN_PID`.
        found: u32,
    },
    /// `LISTEN_FDS` is not a non-negative number.
    #[error("LISTEN_FDS is not a descriptor count: {value:?}")]
    BadFdCount {
        /// The variable's value.
        value: String,
    },
    /// `LISTEN_FDS` is above [`MAX_FDS`].
    #[error("LISTEN_FDS is {count}, more than the {max} we accept")]
    TooManyFds {
        /// The count in `LISTEN_FDS`.
        count: u64,
        /// [`MAX_FDS`].
        max: usize,
    },
    /// `LISTEN_FDNAMES` does not name every descriptor exactly once.
    #[error("LISTEN_FDNAMES has {names} names for {fds} descriptors")]
    NameCountMismatch {
        /// The count in `LISTEN_FDS`.
        fds: usize,
        /// The number of `:`-separated names in `LISTEN_FDNAMES`.
        names: usize,
    },
    /// A name in `LISTEN_FDNAMES` is not one systemd would produce.
    #[error("LISTEN_FDNAMES name {index} {name:?} {reason}")]
    BadName {
        /// The name's position (0-based) in `LISTEN_FDNAMES`.
        index: usize,
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// One of the activation variables is not valid UTF-8.
    #[error("{var} is not valid UTF-8")]
    NotUnicode {
        /// The variable.
        var: &'static str,
    },
    /// The descriptors were already adopted by an earlier call in this process.
    #[error("the activated sockets were already taken by an earlier call")]
    AlreadyTaken,
    /// A descriptor the variables announce is not open.
    #[error("fd {fd} announced by LISTEN_FDS is not open")]
    NotOpen {
        /// The descriptor number.
        fd: RawFd,
        /// The error from `fcntl(F_GETFD)`.
        #[source]
        source: io::Error,
    },
    /// Marking a descriptor close-on-exec failed.
    #[error("failed to set FD_CLOEXEC on fd {fd}")]
    Cloexec {
        /// The descriptor number.
        fd: RawFd,
        /// The error from `fcntl(F_SETFD)`.
        #[source]
        source: io::Error,
    },
    /// No passed socket has the name the daemon expects.
    #[error("no socket named {name:?} was passed (passed: {})", list_names(passed))]
    NotPassed {
        /// The name asked for.
        name: String,
        /// The names of the sockets still available.
        passed: Vec<String>,
    },
    /// The socket with that name is not of the kind the daemon expects.
    #[error("the socket named {name:?} is a {found}, not a {expected}")]
    WrongKind {
        /// The name asked for.
        name: String,
        /// The kind the caller wanted.
        expected: SocketKind,
        /// The kind that was passed.
        found: SocketKind,
    },
}

fn list_names(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// What the activation variables say: one name per passed descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    /// The names, in descriptor order: `names[i]` is fd `FIRST_FD + i`.
    pub names: Vec<String>,
}

// === impl Activation ===

impl Activation {
    /// The number of passed descriptors.
    pub fn count(&self) -> usize {
        self.names.len()
    }

    /// Each passed descriptor number with its name.
    pub fn fds(&self) -> impl Iterator<Item = (RawFd, &str)> {
        (FIRST_FD..).zip(self.names.iter().map(String::as_str))
    }
}

/// Parses the activation variables for the process `own_pid`.
///
/// Returns `Ok(None)` when `LISTEN_FDS` is absent (not activated), and
/// `Ok(Some(Activation { names: [] }))` for `LISTEN_FDS=0` (activated with nothing). Variables
/// that name another pid, do not parse, or disagree with each other are an error: adopting
/// descriptors on a guess would close or reuse fds that belong to someone else.
pub fn parse_activation(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    listen_fdnames: Option<&str>,
    own_pid: u32,
) -> Result<Option<Activation>, ListenError> {
    let Some(listen_fds) = listen_fds else {
        return Ok(None);
    };
    let listen_pid = listen_pid.ok_or(ListenError::MissingPid)?;
    let pid = match listen_pid.parse::<u32>() {
        Ok(pid) if pid > 0 => pid,
        _ => {
            return Err(ListenError::BadPid {
                value: listen_pid.to_owned(),
            })
        }
    };
    if pid != own_pid {
        return Err(ListenError::WrongPid {
            expected: own_pid,
            found: pid,
        });
    }
    let count = listen_fds
        .parse::<u64>()
        .map_err(|_| ListenError::BadFdCount {
            value: listen_fds.to_owned(),
        })?;
    let count = match usize::try_from(count) {
        Ok(count) if count <= MAX_FDS => count,
        _ => {
            return Err(ListenError::TooManyFds {
                count,
                max: MAX_FDS,
            })
        }
    };
    let names: Vec<String> = match listen_fdnames {
        None => vec![UNKNOWN_NAME.to_owned(); count],
        // systemd splits the empty string into no names at all.
        Some("") => Vec::new(),
        Some(joined) => joined.split(':').map(str::to_owned).collect(),
    };
    if names.len() != count {
        return Err(ListenError::NameCountMismatch {
            fds: count,
            names: names.len(),
        });
    }
    for (index, name) in names.iter().enumerate() {
        if let Some(reason) = fdname_problem(name) {
            return Err(ListenError::BadName {
                index,
                name: name.clone(),
                reason,
            });
        }
    }
    Ok(Some(Activation { names }))
}

/// systemd's `fdname_is_valid()`, except that we also refuse the empty name: every Atelier
/// socket unit names its descriptors.
fn fdname_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > FDNAME_MAX {
        Some("is longer than 255 bytes")
    } else if name.bytes().any(|b| !(b' '..0x7f).contains(&b)) {
        Some("contains a control or non-ASCII character")
    } else {
        None
    }
}

/// What kind of socket a passed descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// A listening `AF_UNIX` stream socket.
    UnixListener,
    /// A listening TCP (or MPTCP) socket.
    TcpListener,
    /// A connected `AF_UNIX` stream socket (an `Accept=yes` connection).
    UnixStream,
    /// A connected TCP (or MPTCP) socket (an `Accept=yes` connection).
    TcpStream,
    /// Anything else: datagram or sequential-packet sockets, FIFOs, files.
    Other,
}

impl fmt::Display for SocketKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SocketKind::UnixListener => "unix listener",
            SocketKind::TcpListener => "tcp listener",
            SocketKind::UnixStream => "unix stream",
            SocketKind::TcpStream => "tcp stream",
            SocketKind::Other => "descriptor of another kind",
        })
    }
}

/// A passed descriptor, typed by what the kernel says it is.
///
/// The std types are in whatever blocking mode systemd left them (blocking); call
/// `set_nonblocking(true)` before handing one to tokio's `from_std`.
#[derive(Debug)]
pub enum ActivatedSocket {
    /// A listening `AF_UNIX` stream socket.
    UnixListener(UnixListener),
    /// A listening TCP socket.
    TcpListener(TcpListener),
    /// A connected `AF_UNIX` stream socket (an `Accept=yes` connection).
    UnixStream(UnixStream),
    /// A connected TCP socket (an `Accept=yes` connection).
    TcpStream(TcpStream),
    /// Any other descriptor, still owned.
    Other(OwnedFd),
}

// === impl ActivatedSocket ===

impl ActivatedSocket {
    /// The kind of this socket.
    pub fn kind(&self) -> SocketKind {
        match self {
            ActivatedSocket::UnixListener(_) => SocketKind::UnixListener,
            ActivatedSocket::TcpListener(_) => SocketKind::TcpListener,
            ActivatedSocket::UnixStream(_) => SocketKind::UnixStream,
            ActivatedSocket::TcpStream(_) => SocketKind::TcpStream,
            ActivatedSocket::Other(_) => SocketKind::Other,
        }
    }
}

/// A passed socket with its `FileDescriptorName=`.
#[derive(Debug)]
pub struct NamedSocket {
    /// The name from `LISTEN_FDNAMES`, or [`UNKNOWN_NAME`].
    pub name: String,
    /// The socket.
    pub socket: ActivatedSocket,
}

/// Types `fd` by asking the kernel (`SO_TYPE`, `SO_DOMAIN`, `SO_PROTOCOL`, `SO_ACCEPTCONN`).
///
/// Never fails: a descriptor that is not a stream socket of a known family, or that the kernel
/// will not describe, is returned as [`ActivatedSocket::Other`].
pub fn classify(fd: OwnedFd) -> ActivatedSocket {
    match stream_kind(&fd) {
        Some(SocketKind::UnixListener) => ActivatedSocket::UnixListener(UnixListener::from(fd)),
        Some(SocketKind::TcpListener) => ActivatedSocket::TcpListener(TcpListener::from(fd)),
        Some(SocketKind::UnixStream) => ActivatedSocket::UnixStream(UnixStream::from(fd)),
        Some(SocketKind::TcpStream) => ActivatedSocket::TcpStream(TcpStream::from(fd)),
        Some(SocketKind::Other) | None => ActivatedSocket::Other(fd),
    }
}

fn stream_kind(fd: &OwnedFd) -> Option<SocketKind> {
    if sockopt::socket_type(fd).ok()? != SocketType::STREAM {
        return None;
    }
    let domain = sockopt::socket_domain(fd).ok()?;
    let listening = sockopt::socket_acceptconn(fd).ok()?;
    if domain == AddressFamily::UNIX {
        return Some(if listening {
            SocketKind::UnixListener
        } else {
            SocketKind::UnixStream
        });
    }
    if domain != AddressFamily::INET && domain != AddressFamily::INET6 {
        return None;
    }
    // A SOCK_STREAM inet socket may be SCTP, which std's TCP types must not wrap.
    let protocol = sockopt::socket_protocol(fd).ok()??;
    if protocol != ipproto::TCP && protocol != ipproto::MPTCP {
        return None;
    }
    Some(if listening {
        SocketKind::TcpListener
    } else {
        SocketKind::TcpStream
    })
}

/// The sockets systemd passed to this process, named and classified.
///
/// Returns an empty `Vec` when the process was not socket-activated. Takes ownership of the
/// descriptors (so it succeeds at most once per process; a second call is
/// [`ListenError::AlreadyTaken`]) and marks each close-on-exec.
pub fn listeners_from_env() -> Result<Vec<NamedSocket>, ListenError> {
    let listen_pid = env_string("LISTEN_PID")?;
    let listen_fds = env_string("LISTEN_FDS")?;
    let listen_fdnames = env_string("LISTEN_FDNAMES")?;
    let activation = parse_activation(
        listen_pid.as_deref(),
        listen_fds.as_deref(),
        listen_fdnames.as_deref(),
        std::process::id(),
    )?;
    match activation {
        None => Ok(Vec::new()),
        Some(activation) => adopt(&activation),
    }
}

fn env_string(var: &'static str) -> Result<Option<String>, ListenError> {
    match std::env::var(var) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ListenError::NotUnicode { var }),
    }
}

fn adopt(activation: &Activation) -> Result<Vec<NamedSocket>, ListenError> {
    if ADOPTED.swap(true, Ordering::SeqCst) {
        return Err(ListenError::AlreadyTaken);
    }
    let mut sockets = Vec::with_capacity(activation.count());
    for (fd, name) in activation.fds() {
        let owned = adopt_fd(fd)?;
        fcntl_setfd(&owned, FdFlags::CLOEXEC).map_err(|errno| ListenError::Cloexec {
            fd,
            source: errno.into(),
        })?;
        sockets.push(NamedSocket {
            name: name.to_owned(),
            socket: classify(owned),
        });
    }
    Ok(sockets)
}

/// Takes ownership of descriptor number `fd`, after checking that it is open (std aborts in
/// debug builds when an `OwnedFd` closes a descriptor that was never open).
#[allow(unsafe_code)]
fn adopt_fd(fd: RawFd) -> Result<OwnedFd, ListenError> {
    // SAFETY: F_GETFD only reads the descriptor flags of `fd`; on a number that is not an open
    // descriptor it fails with EBADF and touches nothing.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags == -1 {
        return Err(ListenError::NotOpen {
            fd,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` is open (checked above) and was handed to this process by systemd under the
    // socket-activation protocol, which `parse_activation` verified is addressed to our pid.
    // Nothing else in the process owns it: the `ADOPTED` flag makes this the only adoption.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Removes and returns the first socket named `name`.
pub fn take_by_name(
    sockets: &mut Vec<NamedSocket>,
    name: &str,
) -> Result<ActivatedSocket, ListenError> {
    let index = position(sockets, name)?;
    Ok(sockets.remove(index).socket)
}

/// Removes and returns every socket named `name` (systemd gives all the sockets of one socket
/// unit the same name when it has several `Listen…=` lines). Empty if there is none.
pub fn take_all_by_name(sockets: &mut Vec<NamedSocket>, name: &str) -> Vec<ActivatedSocket> {
    let (taken, kept): (Vec<NamedSocket>, Vec<NamedSocket>) = std::mem::take(sockets)
        .into_iter()
        .partition(|s| s.name == name);
    *sockets = kept;
    taken.into_iter().map(|s| s.socket).collect()
}

/// Removes and returns the first socket named `name`, which must be a unix listener. A socket
/// of another kind stays in `sockets`.
pub fn take_unix_listener(
    sockets: &mut Vec<NamedSocket>,
    name: &str,
) -> Result<UnixListener, ListenError> {
    match take_of_kind(sockets, name, SocketKind::UnixListener)? {
        ActivatedSocket::UnixListener(listener) => Ok(listener),
        other => Err(wrong_kind(name, SocketKind::UnixListener, &other)),
    }
}

/// Removes and returns the first socket named `name`, which must be a TCP listener. A socket of
/// another kind stays in `sockets`.
pub fn take_tcp_listener(
    sockets: &mut Vec<NamedSocket>,
    name: &str,
) -> Result<TcpListener, ListenError> {
    match take_of_kind(sockets, name, SocketKind::TcpListener)? {
        ActivatedSocket::TcpListener(listener) => Ok(listener),
        other => Err(wrong_kind(name, SocketKind::TcpListener, &other)),
    }
}

/// Removes and returns the first socket named `name`, which must be a connected unix stream
/// (the connection of an `Accept=yes` unit). A socket of another kind stays in `sockets`.
pub fn take_unix_stream(
    sockets: &mut Vec<NamedSocket>,
    name: &str,
) -> Result<UnixStream, ListenError> {
    match take_of_kind(sockets, name, SocketKind::UnixStream)? {
        ActivatedSocket::UnixStream(stream) => Ok(stream),
        other => Err(wrong_kind(name, SocketKind::UnixStream, &other)),
    }
}

fn take_of_kind(
    sockets: &mut Vec<NamedSocket>,
    name: &str,
    expected: SocketKind,
) -> Result<ActivatedSocket, ListenError> {
    let index = position(sockets, name)?;
    let found = sockets[index].socket.kind();
    if found != expected {
        return Err(ListenError::WrongKind {
            name: name.to_owned(),
            expected,
            found,
        });
    }
    Ok(sockets.remove(index).socket)
}

fn wrong_kind(name: &str, expected: SocketKind, found: &ActivatedSocket) -> ListenError {
    ListenError::WrongKind {
        name: name.to_owned(),
        expected,
        found: found.kind(),
    }
}

fn position(sockets: &[NamedSocket], name: &str) -> Result<usize, ListenError> {
    sockets
        .iter()
        .position(|s| s.name == name)
        .ok_or_else(|| ListenError::NotPassed {
            name: name.to_owned(),
            passed: sockets.iter().map(|s| s.name.clone()).collect(),
        })
}
