//! Reading a request body into memory under a size limit.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Body as HttpBody;
use http_body_util::BodyExt;
use hyper::StatusCode;

use crate::BoxError;

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is (or announced it would be) longer than `limit` bytes.
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit that was exceeded, in bytes.
        limit: usize,
    },
    /// The connection failed or the body's framing was invalid while reading.
    #[error("failed to read the request body")]
    Read(#[source] BoxError),
}

// === impl BodyError ===

impl BodyError {
    /// The status to answer with: 413 for [`BodyError::TooLarge`], 400 for [`BodyError::Read`].
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Reads the whole of `body`, refusing it once it exceeds `limit` bytes.
///
/// A body whose `Content-Length` is above `limit` is refused before a byte of it is read; a
/// chunked body is refused as soon as what arrived passes `limit`, without waiting for its
/// end. Trailers are ignored.
///
/// After a refusal the caller answers (413, say) as usual: hyper still sends that response,
/// then closes the connection instead of keeping it alive if the rest of the body was not
/// already received.
pub async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: HttpBody,
    B::Error: Into<BoxError>,
{
    let read = read_limited(body, limit).await;
    if let Err(BodyError::TooLarge { .. }) = &read {
        // The body is dropped by now. Yielding once lets hyper's connection task notice that
        // before the handler's response is written: it then drains what was already received
        // and keeps the connection alive, or, if more is still to come, answers with
        // `Connection: close` instead of closing a connection the client thinks is reusable.
        tokio::task::yield_now().await;
    }
    read
}

async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: HttpBody,
    B::Error: Into<BoxError>,
{
    let announced = body.size_hint().lower();
    if announced > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(BodyError::TooLarge { limit });
    }
    let mut body = std::pin::pin!(body);
    // `announced <= limit` here, so this allocation is bounded by the caller's limit.
    let mut collected = BytesMut::with_capacity(usize::try_from(announced).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| BodyError::Read(error.into()))?;
        if let Ok(mut data) = frame.into_data() {
            if data.remaining() > limit - collected.len() {
                return Err(BodyError::TooLarge { limit });
            }
            while data.has_remaining() {
                let chunk = data.chunk();
                let len = chunk.len();
                collected.put_slice(chunk);
                data.advance(len);
            }
        }
    }
    Ok(collected.freeze())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures_util::stream;
    use http_body::Frame;
    use http_body_util::StreamBody;
    use hyper::{Method, StatusCode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::test_support::{body_of, collect, connect, request, TestServer};
    use crate::{full_body, Problem, Response};

    const LIMIT: usize = 16;

    /// Echoes the body, or answers the refusal as a problem (as a daemon would).
    fn echo_server() -> TestServer {
        TestServer::start(|req: crate::Request| async move {
            match read_body(req.into_body(), LIMIT).await {
                Ok(bytes) => Response::new(full_body(bytes)),
                Err(error) => Problem::new(
                    error.status(),
                    "https://example.test/problems/too-large",
                    "Payload Too Large",
                )
                .with_detail(error.to_string())
                .into_response(),
            }
        })
    }

    /// Name, chunks sent, and the bytes read or the limit reported.
    type Case = (
        &'static str,
        Vec<&'static [u8]>,
        Result<&'static [u8], usize>,
    );

    #[tokio::test]
    async fn in_memory_bodies_table() {
        let cases: [Case; 5] = [
            ("empty", vec![], Ok(b"")),
            (
                "exactly the limit",
                vec![b"0123456789abcdef"],
                Ok(b"0123456789abcdef"),
            ),
            (
                "chunks up to the limit",
                vec![b"01234567", b"89abcdef"],
                Ok(b"0123456789abcdef"),
            ),
            (
                "one byte over in one chunk",
                vec![b"0123456789abcdefg"],
                Err(LIMIT),
            ),
            (
                "one byte over across chunks",
                vec![b"0123456789abcdef", b"g"],
                Err(LIMIT),
            ),
        ];
        for (name, chunks, expected) in cases {
            let body =
                StreamBody::new(stream::iter(chunks.into_iter().map(|c| {
                    Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(c)))
                })));
            match (read_body(body, LIMIT).await, expected) {
                (Ok(bytes), Ok(want)) => assert_eq!(&bytes[..], want, "{name}"),
                (Err(BodyError::TooLarge { limit }), Err(want)) => {
                    assert_eq!(limit, want, "{name}")
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// A body announcing `len` bytes that fails if it is ever polled.
    struct Unreadable {
        len: u64,
    }

    impl http_body::Body for Unreadable {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            std::task::Poll::Ready(Some(Err("polled".into())))
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.len)
        }
    }

    #[tokio::test]
    async fn announced_length_is_checked_before_reading() {
        assert!(matches!(
            read_body(
                Unreadable {
                    len: LIMIT as u64 + 1
                },
                LIMIT
            )
            .await,
            Err(BodyError::TooLarge { limit: LIMIT })
        ));
        // At the limit the body is read, which this one refuses.
        assert!(matches!(
            read_body(Unreadable { len: LIMIT as u64 }, LIMIT).await,
            Err(BodyError::Read(_))
        ));
    }

    #[test]
    fn statuses() {
        assert_eq!(
            BodyError::TooLarge { limit: 1 }.status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            BodyError::Read("boom".into()).status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[tokio::test]
    async fn body_within_the_limit_is_echoed() {
        let server = echo_server();
        let mut client = connect(&server.path).await;
        let response = client
            .send_request(request(Method::POST, "/", body_of("hello")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(collect(response).await, "hello");
    }

    #[tokio::test]
    async fn small_content_length_over_the_limit_gets_413_and_the_connection_is_reused() {
        let server = echo_server();
        let mut client = connect(&server.path).await;
        let response = client
            .send_request(request(Method::POST, "/", body_of("x".repeat(LIMIT + 1))))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            collect(response).await,
            concat!(
                r#"{"type":"https://example.test/problems/too-large","title":"Payload Too Large","#,
                r#""status":413,"detail":"request body is larger than the limit of 16 bytes"}"#
            )
        );
        // The unread body was already buffered, so hyper drains it and keeps the connection.
        client.ready().await.unwrap();
        let response = client
            .send_request(request(Method::POST, "/", body_of("again")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(collect(response).await, "again");
    }

    #[tokio::test]
    async fn huge_content_length_gets_413_before_the_body_is_sent() {
        let server = echo_server();
        let mut stream = tokio::net::UnixStream::connect(&server.path).await.unwrap();
        // Announce 100 MB but send only a few bytes: the answer must not wait for the rest.
        stream
            .write_all(
                b"POST /upload HTTP/1.1\r\nhost: test\r\ncontent-length: 100000000\r\n\r\nabc",
            )
            .await
            .unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        let head_and_body = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                }
            }
            String::from_utf8(received).unwrap()
        })
        .await
        .expect("the server answers and closes without waiting for the announced body");
        assert!(
            head_and_body.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
            "{head_and_body}"
        );
        // The server will not read the announced body, so it says it closes the connection.
        assert!(
            head_and_body.contains("\r\nconnection: close\r\n"),
            "{head_and_body}"
        );
        assert!(
            head_and_body.ends_with(
                r#""status":413,"detail":"request body is larger than the limit of 16 bytes"}"#
            ),
            "{head_and_body}"
        );
    }

    #[tokio::test]
    async fn chunked_body_is_cut_off_once_past_the_limit() {
        let server = echo_server();
        let mut client = connect(&server.path).await;
        // A chunked body the client never finishes: the server must answer from the prefix.
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
        let chunks = stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|chunk| (Ok::<_, BoxError>(Frame::data(chunk)), rx))
        });
        let body = http_body_util::combinators::BoxBody::new(StreamBody::new(chunks));
        tx.send(Bytes::from_static(b"0123456789")).await.unwrap();
        tx.send(Bytes::from_static(b"0123456789")).await.unwrap();
        let response = tokio::time::timeout(
            Duration::from_secs(5),
            client.send_request(request(Method::POST, "/", body)),
        )
        .await
        .expect("answered while the body is still open")
        .unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(collect(response).await.contains(r#""status":413"#));
        drop(tx);
    }
}
