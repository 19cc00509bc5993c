//! Async reader and writer tests over a tokio duplex pipe and a real unix socket pair.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::*;
use crate::frame::{FrameKind, FramePart};

/// Fails the test instead of hanging when a read would wait for bytes that never come.
const READ_DEADLINE: Duration = Duration::from_secs(5);

fn sample_frames() -> Vec<Frame> {
    vec![
        Frame::new(FrameKind::Hello, &br#"{"v":1,"door":"git","unit":"u"}"#[..]),
        Frame::stdout(bytes::Bytes::new()),
        Frame::stdout(vec![7u8; FrameKind::Stdout.max_len()]),
        Frame::stderr(&b"warning\n"[..]),
        Frame::new(FrameKind::Exit, &br#"{"code":1,"signal":null}"#[..]),
    ]
}

async fn read_all<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Vec<Frame>, FrameError> {
    let mut decoder = Decoder::new();
    let mut frames = Vec::new();
    while let Some(frame) = tokio::time::timeout(READ_DEADLINE, read_frame(reader, &mut decoder))
        .await
        .expect("read_frame hung")?
    {
        frames.push(frame);
    }
    Ok(frames)
}

#[tokio::test]
async fn frames_written_to_a_duplex_pipe_are_read_back_then_clean_eof() {
    // A pipe smaller than one frame forces partial reads and writes.
    let (mut client, mut server) = tokio::io::duplex(1000);
    let frames = sample_frames();
    let expected = frames.clone();
    let writer = tokio::spawn(async move {
        for frame in &frames {
            write_frame(&mut client, frame).await.unwrap();
        }
    });
    assert_eq!(read_all(&mut server).await.unwrap(), expected);
    writer.await.unwrap();
}

#[tokio::test]
async fn frames_over_a_unix_socket_pair_round_trip() {
    let (mut shim, mut daemon) = UnixStream::pair().unwrap();
    let frames = sample_frames();
    let expected = frames.clone();
    let writer = tokio::spawn(async move {
        for frame in &frames {
            write_frame(&mut shim, frame).await.unwrap();
        }
        shim.shutdown().await.unwrap();
    });
    assert_eq!(read_all(&mut daemon).await.unwrap(), expected);
    writer.await.unwrap();
}

#[tokio::test]
async fn eof_inside_the_header_is_a_truncation() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    client.write_all(b"O\x00\x00").await.unwrap();
    drop(client);
    let err = read_all(&mut server).await.unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::Truncated {
                part: FramePart::Header,
                received: 3,
                expected: 5
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn eof_inside_the_payload_is_a_truncation() {
    let (mut client, mut server) = tokio::io::duplex(64);
    let whole = encode(&Frame::stdout(&b"first"[..])).unwrap();
    client.write_all(&whole).await.unwrap();
    client.write_all(b"E\x00\x00\x00\x09part").await.unwrap();
    drop(client);
    let mut decoder = Decoder::new();
    let first = read_frame(&mut server, &mut decoder).await.unwrap();
    assert_eq!(first, Some(Frame::stdout(&b"first"[..])));
    let err = read_frame(&mut server, &mut decoder).await.unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::Truncated {
                part: FramePart::Payload,
                received: 9,
                expected: 14
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn eof_before_any_byte_is_clean() {
    let (client, mut server) = UnixStream::pair().unwrap();
    drop(client);
    assert_eq!(read_all(&mut server).await.unwrap(), []);
}

#[tokio::test]
async fn oversize_header_is_refused_while_the_writer_is_still_open() {
    // The peer keeps the connection open and sends no payload: a reader waiting for the
    // payload would hang until the deadline.
    let (mut client, mut server) = UnixStream::pair().unwrap();
    client.write_all(b"S\x7f\xff\xff\xff").await.unwrap();
    let mut decoder = Decoder::new();
    let err = tokio::time::timeout(READ_DEADLINE, read_frame(&mut server, &mut decoder))
        .await
        .expect("refusal waited for payload")
        .unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::TooLarge {
                kind: FrameKind::Spec,
                ..
            }
        ),
        "{err}"
    );
    let again = read_frame(&mut server, &mut decoder).await.unwrap_err();
    assert!(matches!(again, FrameError::Failed(_)), "{again}");
    drop(client);
}

#[tokio::test]
async fn read_frame_leaves_the_next_frame_in_the_stream() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    let second = encode(&Frame::stderr(&b"second"[..])).unwrap();
    write_frame(&mut client, &Frame::stdout(&b"first"[..]))
        .await
        .unwrap();
    client.write_all(&second).await.unwrap();
    drop(client);

    let mut decoder = Decoder::new();
    let first = read_frame(&mut server, &mut decoder).await.unwrap();
    assert_eq!(first, Some(Frame::stdout(&b"first"[..])));
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, second);
}

#[tokio::test]
async fn write_frame_refuses_an_over_cap_payload_and_writes_nothing() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    let err = write_frame(
        &mut client,
        &Frame::new(FrameKind::Hello, vec![0u8; 65_537]),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::TooLarge {
                kind: FrameKind::Hello,
                len: 65_537,
                ..
            }
        ),
        "{err}"
    );
    drop(client);
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}
