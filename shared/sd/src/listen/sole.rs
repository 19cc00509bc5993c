//! The one listening socket a single-surface daemon serves: the one systemd passed, or the
//! development fallback path bound by the daemon itself.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::Path;

use super::{bind_unix, listeners_from_env, ActivatedSocket, BindError, ListenError, NamedSocket};

/// The listener a daemon serves on.
#[derive(Debug)]
pub enum SoleListener {
    /// A unix stream listener (systemd's, or the fallback).
    Unix(UnixListener),
    /// A TCP listener systemd passed.
    Tcp(TcpListener),
}

/// Why no single listener could be had.
#[derive(Debug, thiserror::Error)]
pub enum SoleListenerError {
    /// systemd passed sockets we cannot use.
    #[error("socket activation: {0}")]
    Activation(#[from] ListenError),
    /// systemd passed no socket and no fallback path was given.
    #[error("no listening socket: not socket-activated and no fallback path given")]
    NoListener,
    /// systemd passed more than one socket, or one that is not a listener.
    #[error(
        "unexpected activated socket {name:?}: this daemon takes exactly one listening socket"
    )]
    UnexpectedSocket {
        /// The socket's `FileDescriptorName=`.
        name: String,
    },
    /// The development fallback could not be bound.
    #[error("binding the fallback socket: {0}")]
    Bind(#[from] BindError),
}

/// Takes the one listening socket systemd passed, or binds `fallback` with `mode` when the
/// process was not socket-activated.
pub fn sole_listener(
    fallback: Option<&Path>,
    mode: u32,
) -> Result<SoleListener, SoleListenerError> {
    pick_sole_listener(listeners_from_env()?, fallback, mode)
}

/// [`sole_listener`] over sockets already taken from the environment.
pub fn pick_sole_listener(
    mut sockets: Vec<NamedSocket>,
    fallback: Option<&Path>,
    mode: u32,
) -> Result<SoleListener, SoleListenerError> {
    if sockets.len() > 1 {
        let NamedSocket { name, .. } = sockets.swap_remove(1);
        return Err(SoleListenerError::UnexpectedSocket { name });
    }
    let Some(NamedSocket { name, socket }) = sockets.pop() else {
        let path = fallback.ok_or(SoleListenerError::NoListener)?;
        return Ok(SoleListener::Unix(bind_unix(path, mode)?));
    };
    match socket {
        ActivatedSocket::UnixListener(l) => Ok(SoleListener::Unix(l)),
        ActivatedSocket::TcpListener(l) => Ok(SoleListener::Tcp(l)),
        _ => Err(SoleListenerError::UnexpectedSocket { name }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    fn named(name: &str, socket: ActivatedSocket) -> NamedSocket {
        NamedSocket {
            name: name.into(),
            socket,
        }
    }

    #[test]
    fn picks_the_one_listener_or_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let passed = UnixListener::bind(dir.path().join("passed.sock")).unwrap();
        let other = UnixListener::bind(dir.path().join("other.sock")).unwrap();
        let (stream, _peer) = UnixStream::pair().unwrap();
        let fallback = dir.path().join("fallback.sock");

        let picked = pick_sole_listener(
            vec![named("web", ActivatedSocket::UnixListener(passed))],
            Some(&fallback),
            0o600,
        )
        .unwrap();
        assert!(matches!(picked, SoleListener::Unix(_)));
        assert!(
            !fallback.exists(),
            "an activated socket is used, nothing is bound"
        );

        let err = pick_sole_listener(vec![], None, 0o600).unwrap_err();
        assert!(matches!(err, SoleListenerError::NoListener), "{err:?}");

        let err = pick_sole_listener(
            vec![named("conn", ActivatedSocket::UnixStream(stream))],
            None,
            0o600,
        )
        .unwrap_err();
        assert!(
            matches!(&err, SoleListenerError::UnexpectedSocket { name } if name == "conn"),
            "{err:?}"
        );

        let first = UnixListener::bind(dir.path().join("first.sock")).unwrap();
        let err = pick_sole_listener(
            vec![
                named("first", ActivatedSocket::UnixListener(first)),
                named("second", ActivatedSocket::UnixListener(other)),
            ],
            None,
            0o600,
        )
        .unwrap_err();
        assert!(
            matches!(&err, SoleListenerError::UnexpectedSocket { name } if name == "second"),
            "{err:?}"
        );

        let bound = pick_sole_listener(vec![], Some(&fallback), 0o600).unwrap();
        assert!(matches!(bound, SoleListener::Unix(_)));
        UnixStream::connect(&fallback).expect("the fallback answers");
    }
}
