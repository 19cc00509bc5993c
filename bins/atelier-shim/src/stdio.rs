//! stdin and stdout as the async connection to sited: the accepted socket under systemd, one
//! end of a socketpair under `none`, or a pipe when run by hand.
//!
//! Both are duplicated (close-on-exec) rather than taken over, so fds 0 and 1 stay valid for
//! the rest of the process; the program gets `/dev/null` and its own pipes there instead.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use rustix::fs::FileType;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;

use crate::ShimError;

/// The read side of the connection.
#[derive(Debug)]
pub enum ConnReader {
    /// A socket (systemd's accepted connection, sited's socketpair).
    Socket(UnixStream),
    /// A pipe.
    Pipe(pipe::Receiver),
}

/// The write side of the connection.
#[derive(Debug)]
pub enum ConnWriter {
    /// A socket.
    Socket(UnixStream),
    /// A pipe.
    Pipe(pipe::Sender),
}

/// stdin and stdout as the connection; must run inside a tokio runtime.
pub fn connection() -> Result<(ConnReader, ConnWriter), ShimError> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let reader = match kind_of(stdin.as_fd(), "stdin")? {
        Kind::Socket => ConnReader::Socket(socket(dup(stdin.as_fd(), "stdin")?)?),
        Kind::Pipe => ConnReader::Pipe(
            pipe::Receiver::from_owned_fd(dup(stdin.as_fd(), "stdin")?).map_err(internal)?,
        ),
    };
    let writer = match kind_of(stdout.as_fd(), "stdout")? {
        Kind::Socket => ConnWriter::Socket(socket(dup(stdout.as_fd(), "stdout")?)?),
        Kind::Pipe => ConnWriter::Pipe(
            pipe::Sender::from_owned_fd(dup(stdout.as_fd(), "stdout")?).map_err(internal)?,
        ),
    };
    Ok((reader, writer))
}

enum Kind {
    Socket,
    Pipe,
}

fn kind_of(fd: BorrowedFd<'_>, name: &str) -> Result<Kind, ShimError> {
    let stat = rustix::fs::fstat(fd)
        .map_err(|e| ShimError::NotAConnection(format!("{name} cannot be examined: {e}")))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Socket => Ok(Kind::Socket),
        FileType::Fifo => Ok(Kind::Pipe),
        other => Err(ShimError::NotAConnection(format!("{name} is a {other:?}"))),
    }
}

fn dup(fd: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, ShimError> {
    fd.try_clone_to_owned()
        .map_err(|e| ShimError::Internal(format!("duplicating {name}: {e}")))
}

fn socket(fd: OwnedFd) -> Result<UnixStream, ShimError> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true).map_err(internal)?;
    UnixStream::from_std(stream).map_err(internal)
}

fn internal(e: io::Error) -> ShimError {
    ShimError::Internal(format!("registering the connection: {e}"))
}

// === impl ConnReader ===

impl AsyncRead for ConnReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnReader::Socket(s) => Pin::new(s).poll_read(cx, buf),
            ConnReader::Pipe(p) => Pin::new(p).poll_read(cx, buf),
        }
    }
}

// === impl ConnWriter ===

impl AsyncWrite for ConnWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnWriter::Socket(s) => Pin::new(s).poll_write(cx, buf),
            ConnWriter::Pipe(p) => Pin::new(p).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnWriter::Socket(s) => Pin::new(s).poll_flush(cx),
            ConnWriter::Pipe(p) => Pin::new(p).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnWriter::Socket(s) => Pin::new(s).poll_shutdown(cx),
            ConnWriter::Pipe(p) => Pin::new(p).poll_shutdown(cx),
        }
    }
}
