//! Every mode over real sockets (a unix pair, TCP on loopback): every byte arrives in order
//! both ways, splice moves them without a copy, the measured mode splices toward the unix side
//! and copies toward TCP, half-closes carry over, a unix side gone for good ends the tunnel,
//! the tally moves with the bytes.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const LEN: usize = 4 * 1024 * 1024;

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Bytes written each way, as the tunnel reported them.
#[derive(Default)]
struct Counted {
    to_tcp: AtomicU64,
    to_unix: AtomicU64,
}

impl Tally for Arc<Counted> {
    fn to_tcp(&self, bytes: u64) {
        self.to_tcp.fetch_add(bytes, Ordering::Relaxed);
    }
    fn to_unix(&self, bytes: u64) {
        self.to_unix.fetch_add(bytes, Ordering::Relaxed);
    }
}

struct Pair {
    /// The test's end of the unix side.
    unix: UnixStream,
    /// The test's end of the TCP side.
    tcp: TcpStream,
    tunnel: JoinHandle<io::Result<Moved>>,
    /// What the tunnel told its tally.
    counted: Arc<Counted>,
}

async fn open(mode: Mode) -> Pair {
    let (unix, relay_unix) = UnixStream::pair().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (relay_tcp, _) = listener.accept().await.unwrap();
    let counted = Arc::new(Counted::default());
    let tally = Arc::clone(&counted);
    let tunnel = tokio::spawn(async move { run(&relay_unix, &relay_tcp, mode, &tally).await });
    Pair {
        unix,
        tcp,
        tunnel,
        counted,
    }
}

/// Writes `data` then half-closes, while reading everything the other side sends.
async fn exchange<S>(stream: S, data: Vec<u8>) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut read, mut write) = tokio::io::split(stream);
    let writer = tokio::spawn(async move {
        write.write_all(&data).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut received = Vec::new();
    read.read_to_end(&mut received).await.unwrap();
    writer.await.unwrap();
    received
}

async fn both_ways(mode: Mode) -> Moved {
    let pair = open(mode).await;
    let (to_tcp, to_unix) = (pattern(1), pattern(2));
    let at_unix = tokio::spawn(exchange(pair.unix, to_tcp.clone()));
    let at_tcp = tokio::spawn(exchange(pair.tcp, to_unix.clone()));
    assert!(at_tcp.await.unwrap() == to_tcp, "unix to TCP");
    assert!(at_unix.await.unwrap() == to_unix, "TCP to unix");
    pair.tunnel.await.unwrap().unwrap()
}

#[tokio::test]
async fn splice_moves_every_byte_both_ways_without_a_copy() {
    let moved = both_ways(Mode::Splice).await;
    assert_eq!(
        moved,
        Moved {
            to_tcp: Flow {
                spliced: LEN as u64,
                copied: 0
            },
            to_unix: Flow {
                spliced: LEN as u64,
                copied: 0
            },
        }
    );
}

#[tokio::test]
async fn the_copy_moves_every_byte_both_ways() {
    let moved = both_ways(Mode::Copy).await;
    assert_eq!(
        moved.to_tcp,
        Flow {
            spliced: 0,
            copied: LEN as u64
        }
    );
    assert_eq!(
        moved.to_unix,
        Flow {
            spliced: 0,
            copied: LEN as u64
        }
    );
}

#[tokio::test]
async fn the_measured_mode_copies_toward_tcp_and_splices_toward_unix() {
    let moved = both_ways(Mode::Measured).await;
    assert_eq!(
        moved,
        Moved {
            to_tcp: Flow {
                spliced: 0,
                copied: LEN as u64
            },
            to_unix: Flow {
                spliced: LEN as u64,
                copied: 0
            },
        }
    );
}

#[test]
fn a_copy_buffer_doubles_while_reads_fill_it_up_to_its_cap() {
    let cases = [
        (
            "a full read doubles it",
            COPY_BUFFER_START,
            COPY_BUFFER_START,
            2 * COPY_BUFFER_START,
        ),
        (
            "a partial read keeps it",
            COPY_BUFFER_START,
            100,
            COPY_BUFFER_START,
        ),
        (
            "an end of stream keeps it",
            COPY_BUFFER_START,
            0,
            COPY_BUFFER_START,
        ),
        (
            "the cap is kept",
            COPY_BUFFER_MAX,
            COPY_BUFFER_MAX,
            COPY_BUFFER_MAX,
        ),
        (
            "it never passes the cap",
            COPY_BUFFER_MAX / 2 + 1,
            COPY_BUFFER_MAX / 2 + 1,
            COPY_BUFFER_MAX,
        ),
    ];
    for (name, size, read, next) in cases {
        assert_eq!(grown(size, read), next, "{name}");
    }
}

/// Which errors of a first `splice` fall back to copying, and which end the tunnel.
#[test]
fn a_refused_splice_falls_back_and_a_broken_socket_does_not() {
    use rustix::io::Errno;
    let cases = [
        ("a socket type without splice", Errno::INVAL, true),
        ("a kernel without splice", Errno::NOSYS, true),
        ("a system call filter", Errno::PERM, true),
        ("a reset peer", Errno::CONNRESET, false),
        ("a closed peer", Errno::PIPE, false),
        ("no memory", Errno::NOMEM, false),
        ("a bad descriptor", Errno::BADF, false),
    ];
    for (name, errno, falls_back) in cases {
        let error = io::Error::from(errno);
        assert_eq!(is_unsupported(&error), falls_back, "{name}");
    }
}

/// A pipe starts at the kernel's default, keeps it after a partial fill, doubles after a full
/// one, and stops at its cap (or where the kernel refuses: what the pipe says it is).
#[test]
fn a_pipe_grows_only_while_fills_take_all_of_it() {
    let mut pipe = Pipe::new().unwrap();
    let default = rustix::pipe::fcntl_getpipe_size(&pipe.write).unwrap();
    assert_eq!(pipe.size, default, "a new pipe keeps the kernel's default");
    pipe.grow_after(default - 1);
    assert_eq!(pipe.size, default, "a partial fill keeps it");
    pipe.grow_after(default);
    assert_eq!(pipe.size, 2 * default, "a full fill doubles it");
    for _ in 0..16 {
        let size = pipe.size;
        pipe.grow_after(size);
    }
    assert_eq!(pipe.size, PIPE_SIZE, "it stops at the cap");
    assert_eq!(
        rustix::pipe::fcntl_getpipe_size(&pipe.write).unwrap(),
        pipe.size,
        "the size kept is the kernel's"
    );
}

#[tokio::test]
async fn a_half_close_reaches_the_other_side_while_the_other_way_goes_on() {
    for mode in [Mode::Measured, Mode::Splice, Mode::Copy] {
        let mut pair = open(mode).await;
        pair.unix.write_all(b"request").await.unwrap();
        pair.unix.shutdown().await.unwrap();
        let mut request = Vec::new();
        pair.tcp.read_to_end(&mut request).await.unwrap();
        assert_eq!(request, b"request", "{mode:?}");
        // The unix side stopped sending; it still receives.
        pair.tcp.write_all(b"late answer").await.unwrap();
        pair.tcp.shutdown().await.unwrap();
        let mut answer = Vec::new();
        pair.unix.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"late answer", "{mode:?}");
        let moved = pair.tunnel.await.unwrap().unwrap();
        assert_eq!(
            (moved.to_tcp.total(), moved.to_unix.total()),
            (7, 11),
            "{mode:?}"
        );
        let counted = (
            pair.counted.to_tcp.load(Ordering::Relaxed),
            pair.counted.to_unix.load(Ordering::Relaxed),
        );
        assert_eq!(
            counted,
            (7, 11),
            "the tally moved with the bytes ({mode:?})"
        );
    }
}

#[tokio::test]
async fn a_unix_side_closed_for_good_ends_the_tunnel_though_tcp_stays_open() {
    for mode in [Mode::Measured, Mode::Splice, Mode::Copy] {
        let Pair {
            unix,
            mut tcp,
            tunnel,
            ..
        } = open(mode).await;
        // The program exits: its socket closes, and the TCP peer keeps its own side open and
        // silent after the half-close, as some servers do until their idle timeout.
        drop(unix);
        let mut request = Vec::new();
        tcp.read_to_end(&mut request).await.unwrap();
        assert!(request.is_empty(), "{mode:?}");
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), tunnel)
            .await
            .unwrap_or_else(|_| panic!("the tunnel outlived its program ({mode:?})"))
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        // The TCP peer learns the tunnel is gone.
        let mut rest = Vec::new();
        assert_eq!(tcp.read_to_end(&mut rest).await.unwrap(), 0, "{mode:?}");
    }
}

#[tokio::test]
async fn a_tcp_reset_ends_the_tunnel_and_closes_the_unix_side() {
    let pair = open(Mode::Splice).await;
    let Pair {
        mut unix,
        tcp,
        tunnel,
        ..
    } = pair;
    // SO_LINGER 0: close sends RST instead of FIN.
    rustix::net::sockopt::set_socket_linger(&tcp, Some(std::time::Duration::ZERO)).unwrap();
    drop(tcp);
    let mut rest = Vec::new();
    let _ = unix.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), tunnel)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_err(), "{ended:?}");
}

/// A unix leg gets the send buffer asked for, as far as `net.core.wmem_max` allows (Linux
/// reports twice what it granted).
#[test]
fn a_unix_leg_gets_a_wide_send_buffer() {
    let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let default = rustix::net::sockopt::socket_send_buffer_size(&ours).unwrap();
    widen_send_buffer(&ours);
    let cap: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let granted = rustix::net::sockopt::socket_send_buffer_size(&ours).unwrap();
    assert_eq!(
        granted,
        2 * GATE_LEG_SEND_BUFFER.min(cap),
        "default {default}"
    );
}
