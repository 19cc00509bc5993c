//! Binding our own listeners when systemd passed none: the development fallback.
//!
//! [`bind_unix`] never takes a path away from a live server and never deletes anything but a
//! stale socket. The socket is bound and given its mode inside a private (0700) staging
//! directory next to the target, then hard-linked into place, so no client can ever connect
//! to it while it still has the umask's mode, and a path that appeared meanwhile is never
//! overwritten.
//!
//! Known limits, acceptable for a development fallback:
//! - It assumes one binder per path at a time. Two processes racing on the same stale path
//!   may both find it stale; the second may then remove the first one's fresh socket, or fail
//!   to link (`EEXIST`, reported as [`BindError::Io`]).
//! - The listener's `local_addr()` reports the staging path it was bound at, not `path`.

use std::fs;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::{chmod, Mode};

/// The longest socket path the kernel accepts (`sizeof(sun_path)` minus the NUL).
const SUN_PATH_MAX: usize = 107;

/// Leftover staging directories (from a crash) are skipped; this bounds how many we try.
const STAGING_ATTEMPTS: u32 = 16;

static STAGING_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Why a development listener could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Something other than a socket is at the path; it is left untouched.
    #[error("{} exists and is not a socket", path.display())]
    NotASocket {
        /// The path asked for.
        path: PathBuf,
    },
    /// A live server answers at the path; it is left untouched.
    #[error("{} is already served by another process", path.display())]
    AlreadyServed {
        /// The path asked for.
        path: PathBuf,
    },
    /// The path (or the staging path next to it) is too long for a unix socket address.
    #[error("{} is longer than the {max} bytes a unix socket path may have", path.display())]
    PathTooLong {
        /// The path that is too long.
        path: PathBuf,
        /// The limit.
        max: usize,
    },
    /// The path has no file name (it is `/` or ends in `..`).
    #[error("{} has no file name to bind", path.display())]
    NoFileName {
        /// The path asked for.
        path: PathBuf,
    },
    /// A filesystem or socket call failed.
    #[error("failed to {action} {}", path.display())]
    Io {
        /// What we were doing, as a verb phrase ("bind", "link into place", …).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Binding a TCP listener failed.
    #[error("failed to bind tcp {addr}")]
    Tcp {
        /// The address asked for.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BindError + 'a {
    move |source| BindError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Binds a unix stream listener at `path` with permission bits `mode` (e.g. `0o660`).
///
/// If something exists at `path`: a non-socket is refused ([`BindError::NotASocket`]); a socket
/// that accepts a connection is refused ([`BindError::AlreadyServed`]); a socket that refuses
/// connections (`ECONNREFUSED`, left behind by a dead server) is removed and replaced. The
/// returned listener is in blocking mode.
pub fn bind_unix(path: &Path, mode: u32) -> Result<UnixListener, BindError> {
    if path.file_name().is_none() {
        return Err(BindError::NoFileName {
            path: path.to_owned(),
        });
    }
    check_length(path)?;
    clear_stale(path)?;

    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let staging = StagingDir::create(parent)?;
    let staged = staging.socket_path();
    check_length(&staged)?;
    let listener = UnixListener::bind(&staged).map_err(io_error("bind", &staged))?;
    chmod(&staged, Mode::from_raw_mode(mode & 0o7777))
        .map_err(|errno| io_error("chmod", &staged)(errno.into()))?;
    // link(2) never replaces an existing path, unlike rename(2).
    fs::hard_link(&staged, path).map_err(io_error("link into place", path))?;
    Ok(listener)
}

fn check_length(path: &Path) -> Result<(), BindError> {
    if path.as_os_str().len() > SUN_PATH_MAX {
        return Err(BindError::PathTooLong {
            path: path.to_owned(),
            max: SUN_PATH_MAX,
        });
    }
    Ok(())
}

/// Refuses what must not be replaced at `path` and removes a stale socket.
fn clear_stale(path: &Path) -> Result<(), BindError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("inspect", path)(e)),
    };
    if !metadata.file_type().is_socket() {
        return Err(BindError::NotASocket {
            path: path.to_owned(),
        });
    }
    match UnixStream::connect(path) {
        Ok(_probe) => Err(BindError::AlreadyServed {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("remove the stale socket", path)(e)),
        },
        // Removed between our lstat and connect: nothing is in the way any more.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("probe the existing socket", path)(e)),
    }
}

/// A private directory next to the target, removed with whatever it holds on drop.
struct StagingDir {
    path: PathBuf,
}

// === impl StagingDir ===

impl StagingDir {
    fn create(parent: &Path) -> Result<Self, BindError> {
        use std::os::unix::fs::DirBuilderExt;

        let pid = std::process::id();
        let mut last_error = None;
        for _ in 0..STAGING_ATTEMPTS {
            let n = STAGING_COUNTER.fetch_add(1, Ordering::Relaxed);
            // Short on purpose: the socket path inside must fit in sun_path.
            let path = parent.join(format!(".sd{pid:x}-{n:x}"));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(StagingDir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(io_error("create a staging directory", &path)(e)),
            }
        }
        let source = last_error.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
        Err(io_error("create a staging directory in", parent)(source))
    }

    fn socket_path(&self) -> PathBuf {
        self.path.join("s")
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        // Best effort: a leftover empty directory is harmless and skipped next time.
        let _ = fs::remove_file(self.socket_path());
        let _ = fs::remove_dir(&self.path);
    }
}

/// Binds a TCP listener at `addr` (development fallback; no stale-socket handling is needed).
pub fn bind_tcp(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).map_err(|source| BindError::Tcp { addr, source })
}
