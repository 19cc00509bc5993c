//! The forwards over real TCP and unix sockets: bytes both ways, half-closes passed on, a bulk
//! transfer whole and in order, one gate connection per TCP connection, an unreachable gate, a
//! port already taken.

use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener};

use super::*;
use crate::settings::Forward;

fn ephemeral(target: &Path) -> Forward {
    Forward {
        name: "proxy",
        listen: "127.0.0.1:0".parse().unwrap(),
        target: target.to_owned(),
    }
}

/// A gate stand-in that, per connection, reads until the client half-closes and answers with
/// the connection's number and what it got.
fn gate(path: &Path) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        let mut number = 0;
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            number += 1;
            tokio::spawn(async move {
                let mut got = Vec::new();
                conn.read_to_end(&mut got).await.unwrap();
                let answer = format!("#{number}:{}", String::from_utf8_lossy(&got));
                conn.write_all(answer.as_bytes()).await.unwrap();
                conn.shutdown().await.unwrap();
            });
        }
    })
}

async fn exchange(addr: SocketAddr, message: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(message.as_bytes()).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn bytes_and_half_closes_cross_in_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.sock");
    let _gate = gate(&path);
    let forwards = Forwards::bind(&[ephemeral(&path)]).unwrap();
    let addr = forwards.local_addrs()[0];
    // The gate answers only after it read the client's end: both half-closes were relayed.
    assert_eq!(exchange(addr, "CONNECT a:443").await, "#1:CONNECT a:443");
    assert_eq!(exchange(addr, "again").await, "#2:again");
}

#[tokio::test]
async fn concurrent_connections_each_get_their_own_gate_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.sock");
    let _gate = gate(&path);
    let forwards = Forwards::bind(&[ephemeral(&path)]).unwrap();
    let addr = forwards.local_addrs()[0];
    let clients: Vec<_> = (0..20)
        .map(|i| tokio::spawn(async move { exchange(addr, &format!("client-{i}")).await }))
        .collect();
    let mut numbers = std::collections::BTreeSet::new();
    for (i, client) in clients.into_iter().enumerate() {
        let answer = client.await.unwrap();
        let (number, got) = answer.split_once(':').unwrap();
        assert_eq!(got, format!("client-{i}"));
        numbers.insert(number.to_owned());
    }
    assert_eq!(numbers.len(), 20, "connections shared a gate connection");
}

#[tokio::test]
async fn an_unreachable_gate_closes_the_tcp_connection() {
    let dir = tempfile::tempdir().unwrap();
    let forwards = Forwards::bind(&[ephemeral(&dir.path().join("absent.sock"))]).unwrap();
    let mut tcp = TcpStream::connect(forwards.local_addrs()[0]).await.unwrap();
    let mut buf = Vec::new();
    // Closed without a byte, or reset.
    match tcp.read_to_end(&mut buf).await {
        Ok(n) => assert_eq!(n, 0),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }
    assert!(buf.is_empty());
}

#[tokio::test]
async fn a_port_already_bound_is_cannot_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let forward = Forward {
        name: "mcp",
        listen: taken.local_addr().unwrap(),
        target: "/nowhere".into(),
    };
    match Forwards::bind(&[forward]) {
        Err(ShimError::CannotListen { name, addr, source }) => {
            assert_eq!(name, "mcp");
            assert_eq!(addr, taken.local_addr().unwrap());
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn dropping_the_forwards_stops_listening() {
    let dir = tempfile::tempdir().unwrap();
    let forwards = Forwards::bind(&[ephemeral(&dir.path().join("g.sock"))]).unwrap();
    let addr = forwards.local_addrs()[0];
    drop(forwards);
    // The accept task is aborted at its next poll; give the runtime a turn.
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_bulk_transfer_arrives_whole_and_in_order_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.sock");
    // A gate stand-in that sends back, reversed, everything it got once the client is done:
    // the answer is as long as the upload and differs from it, so neither way can pass by
    // echoing the other's bytes in place.
    let listener = UnixListener::bind(&path).unwrap();
    let _gate = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).await.unwrap();
        got.reverse();
        conn.write_all(&got).await.unwrap();
        conn.shutdown().await.unwrap();
    });
    let forwards = Forwards::bind(&[ephemeral(&path)]).unwrap();
    let upload: Vec<u8> = (0..8 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut tcp = TcpStream::connect(forwards.local_addrs()[0]).await.unwrap();
    let (mut read, mut write) = tcp.split();
    let sent = async {
        write.write_all(&upload).await.unwrap();
        write.shutdown().await.unwrap();
    };
    let mut answer = Vec::new();
    let (_, received) = tokio::join!(sent, read.read_to_end(&mut answer));
    received.unwrap();
    let mut expected = upload.clone();
    expected.reverse();
    assert!(answer == expected, "{} bytes came back", answer.len());
}
