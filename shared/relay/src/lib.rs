//! Moving a tunnel's bytes both ways between a unix socket and a TCP socket, as the gate does
//! between a door and a host and the shim does between a program and the gate. Toward the unix
//! side the bytes go with `splice(2)` through a pipe, so they never cross into user space;
//! toward TCP they are copied through a buffer, which measured faster there (below); and they
//! are copied wherever the kernel refuses to splice.
//!
//! A spliced direction alternates two steps: fill the empty pipe from the source socket (at
//! most the pipe's size, so the pipe is never what blocks), then drain the pipe into the sink
//! until it is empty. The pipe starts at the kernel's default size and doubles after a fill
//! that took all of it, up to 1 MiB. Readiness comes from tokio's reactor; a `WouldBlock` from
//! `splice` therefore always means the socket, never the pipe. A copied direction reads what
//! the source has into a buffer that starts small and doubles while reads fill it, up to
//! [`COPY_BUFFER_MAX`], then writes it all. A source's end of stream half-closes the sink, and
//! the other direction goes on until its own end; an error in one direction shuts both sockets
//! down, which ends the other. Once the unix side has stopped sending, the tunnel also ends
//! when that side is closed for good (its program exited): nothing could be delivered to it
//! any more, and a TCP peer that never closes after a half-close must not hold the tunnel.
//!
//! Why the directions differ: on a 2-core machine `scripts/bench-gate` moved 1 GiB
//! unix-to-TCP at 0.46-0.58 of a direct connection's speed spliced and at 0.65-0.74 copied,
//! while TCP-to-unix splicing matched the direct connection (0.93-1.21). Splicing toward TCP
//! hands the kernel the unix socket's own pages, and freeing and uncharging them cost the
//! relaying thread more than the copy it saves; that thread, which on loopback also does the
//! receiver's protocol work, was busy for most of the transfer. Splicing from two threads at
//! once (one filling the pipe, one draining it) measured no faster. In the shim's forward
//! (`cargo bench -p atelier-relay`), splicing the program's downloads toward its TCP socket
//! ran at 0.49 of a direct connection, against 0.70 copied.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use atelier_layout::services::GATE_LEG_SEND_BUFFER;
use rustix::event::{PollFd, PollFlags};
use rustix::net::Shutdown;
use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// How often a tunnel whose unix side stopped sending looks whether that side is gone.
const HANG_UP_CHECK: Duration = Duration::from_secs(1);

/// The most a spliced direction's pipe grows to; the kernel may grant less (pipe-max-size).
const PIPE_SIZE: usize = 1024 * 1024; // 1 MiB

/// A copied direction's first buffer: a request or a TLS record or two.
const COPY_BUFFER_START: usize = 64 * 1024; // 64 KiB

/// The most a copied direction's buffer grows to, as much as the pipe it stands in for.
pub const COPY_BUFFER_MAX: usize = PIPE_SIZE;

/// How a tunnel moves its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each direction the way measured fastest: spliced toward the unix socket, copied toward
    /// TCP. What the gate and the shim use.
    Measured,
    /// `splice(2)` through a pipe both ways, falling back to a copy per direction if the
    /// kernel refuses.
    Splice,
    /// A copy through a user-space buffer both ways.
    Copy,
}

/// What one tunnel moved, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// Bytes read from the unix socket and written to the TCP socket.
    pub to_tcp: Flow,
    /// Bytes read from the TCP socket and written to the unix socket.
    pub to_unix: Flow,
}

/// Bytes moved one way, by how they moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flow {
    /// Moved with `splice(2)`, never entering user space.
    pub spliced: u64,
    /// Copied through a buffer.
    pub copied: u64,
}

impl Flow {
    /// Every byte moved.
    pub fn total(self) -> u64 {
        self.spliced + self.copied
    }
}

/// Told of every write's bytes as it completes, so a count read during a long tunnel sees them
/// move: the gate's metrics. `()` counts nothing.
pub trait Tally: Sync {
    /// `bytes` more were written to the TCP socket.
    fn to_tcp(&self, bytes: u64);
    /// `bytes` more were written to the unix socket.
    fn to_unix(&self, bytes: u64);
}

impl Tally for () {
    fn to_tcp(&self, _: u64) {}
    fn to_unix(&self, _: u64) {}
}

/// A socket of the tunnel, as far as moving bytes needs it.
trait Socket: AsFd {
    async fn ready_for(&self, interest: Interest) -> io::Result<()>;
    fn try_io_for<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>)
        -> io::Result<R>;
}

macro_rules! socket {
    ($type:ty) => {
        impl Socket for $type {
            async fn ready_for(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(|_| ())
            }
            fn try_io_for<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}

socket!(UnixStream);
socket!(TcpStream);

/// Moves bytes both ways between `unix` and `tcp` until both directions have ended, telling
/// `tally` of each write. Returns what moved, or the first error (after which both sockets are
/// shut down).
pub async fn run(
    unix: &UnixStream,
    tcp: &TcpStream,
    mode: Mode,
    tally: &impl Tally,
) -> io::Result<Moved> {
    let (to_tcp_way, to_unix_way) = match mode {
        Mode::Measured => (Way::Copy, Way::Splice),
        Mode::Splice => (Way::Splice, Way::Splice),
        Mode::Copy => (Way::Copy, Way::Copy),
    };
    let to_tcp = direction(unix, tcp, to_tcp_way, |n| tally.to_tcp(n));
    let to_unix = direction(tcp, unix, to_unix_way, |n| tally.to_unix(n));
    tokio::pin!(to_tcp, to_unix);
    let (to_tcp, to_unix) = tokio::select! {
        to_unix = &mut to_unix => (to_tcp.await, to_unix),
        to_tcp = &mut to_tcp => {
            if to_tcp.is_ok() {
                tokio::select! {
                    to_unix = &mut to_unix => return finish(to_tcp, to_unix),
                    () = hung_up(unix) => {
                        // The read from TCP then ends, and the direction with it.
                        let _ = rustix::net::shutdown(tcp, Shutdown::Both);
                    }
                }
            }
            (to_tcp, to_unix.await)
        }
    };
    finish(to_tcp, to_unix)
}

fn finish(to_tcp: io::Result<Flow>, to_unix: io::Result<Flow>) -> io::Result<Moved> {
    Ok(Moved {
        to_tcp: to_tcp?,
        to_unix: to_unix?,
    })
}

/// Returns once `unix` is closed at both ends' say: its peer is gone, not just done sending.
/// Looked at every [`HANG_UP_CHECK`] by `poll(2)`, apart from the reactor, whose readiness
/// the other direction relies on.
async fn hung_up(unix: &UnixStream) {
    let mut ticks = tokio::time::interval(HANG_UP_CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let mut fds = [PollFd::new(unix, PollFlags::empty())];
        let now = rustix::event::Timespec::default();
        if rustix::event::poll(&mut fds, Some(&now)).is_ok()
            && fds[0].revents().contains(PollFlags::HUP)
        {
            return;
        }
    }
}

/// How one direction moves its bytes.
#[derive(Debug, Clone, Copy)]
enum Way {
    Splice,
    Copy,
}

async fn direction<A: Socket, B: Socket>(
    from: &A,
    to: &B,
    way: Way,
    count: impl Fn(u64),
) -> io::Result<Flow> {
    let mut moved = Flow::default();
    let result = match way {
        Way::Splice => match Pipe::new() {
            Ok(mut pipe) => splice_loop(from, to, &mut pipe, &mut moved, &count).await,
            Err(error) => {
                tracing::debug!(%error, "no pipe for splice; copying");
                Err(Unsupported)
            }
        },
        Way::Copy => Err(Unsupported),
    };
    let result = match result {
        Ok(()) => Ok(()),
        // Nothing was spliced yet when the kernel refused: the copy starts from the start.
        Err(SpliceError::Unsupported) => copy_loop(from, to, &mut moved, &count).await,
        Err(SpliceError::Io(error)) => Err(error),
    };
    match result {
        Ok(()) => {
            // The source ended: the sink learns it, the other direction goes on.
            let _ = rustix::net::shutdown(to, Shutdown::Write);
            Ok(moved)
        }
        Err(error) => {
            let _ = rustix::net::shutdown(from, Shutdown::Both);
            let _ = rustix::net::shutdown(to, Shutdown::Both);
            Err(error)
        }
    }
}

/// Asks for [`GATE_LEG_SEND_BUFFER`] of send buffer on `socket`, an end of the unix leg between
/// a door and its gate: at the default size every pipe's worth of bytes reaches the other end
/// in several trips through the reactor. The kernel caps the request at `net.core.wmem_max`; a
/// refusal keeps the default.
pub fn widen_send_buffer<S: AsFd>(socket: &S) {
    if let Err(error) =
        rustix::net::sockopt::set_socket_send_buffer_size(socket, GATE_LEG_SEND_BUFFER)
    {
        tracing::debug!(%error, "the send buffer keeps its default size");
    }
}

use SpliceError::Unsupported;

enum SpliceError {
    /// The kernel cannot splice this pair; nothing has moved.
    Unsupported,
    Io(io::Error),
}

/// One direction's pipe: both ends non-blocking, the kernel's default size at first.
///
/// A larger pipe means fewer trips through the reactor, but every pipe's pages count against
/// its user's budget (`fs.pipe-user-pages-soft`, 64 MiB by default), which the program's own
/// pipes share in a door: past it, each new pipe the user makes gets two pages. So a pipe
/// grows as a copy buffer does ([`grown`]), and a connection that carries a request and its
/// answer never holds more than the default.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
    /// False once the kernel refused to grow it (pipe-max-size, the budget): not asked again.
    can_grow: bool,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let size = rustix::pipe::fcntl_getpipe_size(&write)?;
        Ok(Pipe {
            read,
            write,
            size,
            can_grow: true,
        })
    }

    /// After a fill of `filled` bytes, now drained: asks for twice the size if the fill took
    /// all of it. A refusal keeps the size the pipe has, which still works.
    fn grow_after(&mut self, filled: usize) {
        let wanted = grown(self.size, filled);
        if !self.can_grow || wanted <= self.size {
            return;
        }
        match fcntl_setpipe_size(&self.write, wanted) {
            Ok(granted) => self.size = granted,
            Err(error) => {
                tracing::debug!(%error, size = self.size, "the pipe keeps its size");
                self.can_grow = false;
            }
        }
    }
}

async fn splice_loop<A: Socket, B: Socket>(
    from: &A,
    to: &B,
    pipe: &mut Pipe,
    moved: &mut Flow,
    count: &impl Fn(u64),
) -> Result<(), SpliceError> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        from.ready_for(Interest::READABLE)
            .await
            .map_err(SpliceError::Io)?;
        let filled = from.try_io_for(Interest::READABLE, || {
            splice(fd(from), None, pipe.write.as_fd(), None, pipe.size, flags)
                .map_err(io::Error::from)
        });
        let filled = match filled {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) if moved.spliced == 0 && is_unsupported(&error) => {
                tracing::debug!(%error, "splice refused; copying");
                return Err(Unsupported);
            }
            Err(error) => return Err(SpliceError::Io(error)),
        };
        let mut held = filled;
        while held > 0 {
            to.ready_for(Interest::WRITABLE)
                .await
                .map_err(SpliceError::Io)?;
            let drained = to.try_io_for(Interest::WRITABLE, || {
                splice(pipe.read.as_fd(), None, fd(to), None, held, flags).map_err(io::Error::from)
            });
            match drained {
                Ok(n) => {
                    held -= n;
                    moved.spliced += n as u64;
                    count(n as u64);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                // Bytes already sit in the pipe, so there is no falling back now.
                Err(error) => return Err(SpliceError::Io(error)),
            }
        }
        pipe.grow_after(filled);
    }
}

/// `EINVAL` (a socket type without splice support), `ENOSYS` (no splice at all) or `EPERM`
/// (which `splice` itself never returns: a system call filter refused it, as a unit's
/// `SystemCallFilter=~splice` with `SystemCallErrorNumber=EPERM` would).
fn is_unsupported(error: &io::Error) -> bool {
    matches!(
        rustix::io::Errno::from_io_error(error),
        Some(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::PERM)
    )
}

fn fd<S: AsFd>(socket: &S) -> BorrowedFd<'_> {
    socket.as_fd()
}

async fn copy_loop<A: Socket, B: Socket>(
    from: &A,
    to: &B,
    moved: &mut Flow,
    count: &impl Fn(u64),
) -> io::Result<()> {
    let mut buffer = vec![0u8; COPY_BUFFER_START];
    loop {
        from.ready_for(Interest::READABLE).await?;
        let read = from.try_io_for(Interest::READABLE, || {
            rustix::io::read(fd(from), &mut buffer[..]).map_err(io::Error::from)
        });
        let len = match read {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        };
        let mut written = 0;
        while written < len {
            to.ready_for(Interest::WRITABLE).await?;
            match to.try_io_for(Interest::WRITABLE, || {
                // No SIGPIPE from a peer that already left: the error is enough.
                rustix::net::send(
                    fd(to),
                    &buffer[written..len],
                    rustix::net::SendFlags::NOSIGNAL,
                )
                .map_err(io::Error::from)
            }) {
                Ok(n) => {
                    written += n;
                    count(n as u64);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
        moved.copied += len as u64;
        let size = grown(buffer.len(), len);
        buffer.resize(size, 0);
    }
}

/// A buffer's (or a pipe's) next size after a read of `read` bytes into `size`: doubled when
/// the read filled it (the source had at least as much again waiting), up to
/// [`COPY_BUFFER_MAX`].
fn grown(size: usize, read: usize) -> usize {
    if read == size {
        (size * 2).min(COPY_BUFFER_MAX)
    } else {
        size
    }
}

#[cfg(test)]
mod tests;
