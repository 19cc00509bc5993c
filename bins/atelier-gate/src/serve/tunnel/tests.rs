//! Every mode over real sockets (a unix pair for the client, TCP on loopback upstream): every
//! byte arrives in order both ways, splice moves them without a copy, the measured mode splices
//! toward the client and copies toward upstream, half-closes carry over.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const LEN: usize = 4 * 1024 * 1024;

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

struct Pair {
    /// The test's end of the client side.
    client: UnixStream,
    /// The test's end of the upstream side.
    upstream: TcpStream,
    tunnel: JoinHandle<io::Result<Moved>>,
    /// The byte counters the tunnel adds to.
    relayed: Relayed,
}

async fn open(mode: Mode) -> Pair {
    let (client, gate_client) = UnixStream::pair().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (gate_upstream, _) = listener.accept().await.unwrap();
    let relayed = Relayed::default();
    let counters = relayed.clone();
    let tunnel =
        tokio::spawn(async move { run(&gate_client, &gate_upstream, mode, &counters).await });
    Pair {
        client,
        upstream,
        tunnel,
        relayed,
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
    let (up, down) = (pattern(1), pattern(2));
    let at_client = tokio::spawn(exchange(pair.client, up.clone()));
    let at_upstream = tokio::spawn(exchange(pair.upstream, down.clone()));
    assert!(at_upstream.await.unwrap() == up, "client to upstream");
    assert!(at_client.await.unwrap() == down, "upstream to client");
    pair.tunnel.await.unwrap().unwrap()
}

#[tokio::test]
async fn splice_moves_every_byte_both_ways_without_a_copy() {
    let moved = both_ways(Mode::Splice).await;
    assert_eq!(
        moved,
        Moved {
            up: Flow {
                spliced: LEN as u64,
                copied: 0
            },
            down: Flow {
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
        moved.up,
        Flow {
            spliced: 0,
            copied: LEN as u64
        }
    );
    assert_eq!(
        moved.down,
        Flow {
            spliced: 0,
            copied: LEN as u64
        }
    );
}

#[tokio::test]
async fn the_measured_mode_copies_toward_upstream_and_splices_toward_the_client() {
    let moved = both_ways(Mode::Measured).await;
    assert_eq!(
        moved,
        Moved {
            up: Flow {
                spliced: 0,
                copied: LEN as u64
            },
            down: Flow {
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

#[tokio::test]
async fn a_half_close_reaches_the_other_side_while_the_other_way_goes_on() {
    for mode in [Mode::Measured, Mode::Splice, Mode::Copy] {
        let mut pair = open(mode).await;
        pair.client.write_all(b"request").await.unwrap();
        pair.client.shutdown().await.unwrap();
        let mut request = Vec::new();
        pair.upstream.read_to_end(&mut request).await.unwrap();
        assert_eq!(request, b"request", "{mode:?}");
        // The client stopped sending; it still receives.
        pair.upstream.write_all(b"late answer").await.unwrap();
        pair.upstream.shutdown().await.unwrap();
        let mut answer = Vec::new();
        pair.client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"late answer", "{mode:?}");
        let moved = pair.tunnel.await.unwrap().unwrap();
        assert_eq!((moved.up.total(), moved.down.total()), (7, 11), "{mode:?}");
        let counted = (pair.relayed.upstream.get(), pair.relayed.downstream.get());
        assert_eq!(
            counted,
            (7, 11),
            "the counters moved with the bytes ({mode:?})"
        );
    }
}

#[tokio::test]
async fn an_upstream_reset_ends_the_tunnel_and_closes_the_client() {
    let pair = open(Mode::Splice).await;
    let Pair {
        mut client,
        upstream,
        tunnel,
        ..
    } = pair;
    // SO_LINGER 0: close sends RST instead of FIN.
    rustix::net::sockopt::set_socket_linger(&upstream, Some(std::time::Duration::ZERO)).unwrap();
    drop(upstream);
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), tunnel)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_err(), "{ended:?}");
}

/// The client's unix leg gets the send buffer asked for, as far as `net.core.wmem_max` allows
/// (Linux reports twice what it granted).
#[test]
fn the_client_leg_gets_a_wide_send_buffer() {
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
