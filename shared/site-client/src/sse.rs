//! A session's event stream as a client reads it: [`EventStream`], a `Stream` of a session's
//! typed events over a response body, read with the shared SSE reader (`atelier-sse`).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use hyper::body::Body;

pub use atelier_sse::{SseFrame, SseItem, SseParser};

use crate::error::Error;
use crate::model::StoredEvent;

/// One item of a session's event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A stored event, with its `data:` text exactly as sent.
    Event {
        /// The event.
        event: StoredEvent,
        /// The frame's data, as received.
        raw: String,
    },
    /// An `event: error` frame (the replay failed); sited closes the stream after it.
    Error {
        /// Its data, as received.
        raw: String,
        /// Its data as JSON (`null` when it is not JSON).
        payload: serde_json::Value,
    },
}

/// A session's events over a response body, as a `Stream`. It ends when sited closes the
/// stream (after a `turn_end`, or at once when no turn is running after the replay); a stream
/// that breaks off mid-frame or with a transport error ends with [`Error::StreamLost`].
pub struct EventStream<B = hyper::body::Incoming> {
    body: B,
    parser: SseParser,
    ready: VecDeque<SseItem>,
    comments: u64,
    status: u16,
    done: bool,
}

impl<B> EventStream<B> {
    /// Reads `body`, the answer (with `status`) to `GET /v1/sessions/:id/events`.
    pub fn new(body: B, status: u16) -> Self {
        EventStream {
            body,
            parser: SseParser::new(),
            ready: VecDeque::new(),
            comments: 0,
            status,
            done: false,
        }
    }

    /// How many comments (keep-alives) were read so far.
    pub fn comments(&self) -> u64 {
        self.comments
    }

    /// The frame as an item; `None` for a frame of another event type.
    fn item(&self, frame: SseFrame) -> Option<Result<StreamItem, Error>> {
        let bad = |why: String| Error::BadResponse {
            status: self.status,
            why,
        };
        match frame.event.as_deref() {
            None | Some("message") => {}
            Some("error") => {
                let payload = serde_json::from_str(&frame.data).unwrap_or(serde_json::Value::Null);
                return Some(Ok(StreamItem::Error {
                    raw: frame.data,
                    payload,
                }));
            }
            Some(_) => return None,
        }
        let event: StoredEvent = match serde_json::from_str(&frame.data) {
            Ok(event) => event,
            Err(e) => {
                return Some(Err(bad(format!(
                    "a frame's data is not a stored event: {e}"
                ))))
            }
        };
        if let Some(id) = &frame.id {
            if *id != event.seq.to_string() {
                return Some(Err(bad(format!(
                    "a frame's id {id:?} is not its event's seq {}",
                    event.seq
                ))));
            }
        }
        Some(Ok(StreamItem::Event {
            event,
            raw: frame.data,
        }))
    }
}

impl<B> Stream for EventStream<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Item = Result<StreamItem, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            while let Some(item) = this.ready.pop_front() {
                match item {
                    SseItem::Comment(_) => this.comments += 1,
                    SseItem::Frame(frame) => {
                        if let Some(item) = this.item(frame) {
                            if item.is_err() {
                                this.done = true;
                                this.ready.clear();
                            }
                            return Poll::Ready(Some(item));
                        }
                    }
                }
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    if let Err(e) = this.parser.finish() {
                        return Poll::Ready(Some(Err(Error::StreamLost(e.to_string()))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(Error::StreamLost(e.to_string()))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers
                    };
                    match this.parser.push(&data) {
                        Ok(items) => this.ready.extend(items),
                        Err(e) => {
                            this.done = true;
                            return Poll::Ready(Some(Err(Error::StreamLost(e.to_string()))));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;

    /// A body that yields the given chunks, then ends (or fails).
    struct Chunks {
        chunks: VecDeque<Bytes>,
        fail_at_end: bool,
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = String;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, String>>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk)))),
                None if self.fail_at_end => {
                    self.fail_at_end = false;
                    Poll::Ready(Some(Err("connection reset".into())))
                }
                None => Poll::Ready(None),
            }
        }
    }

    fn stream(chunks: &[&str], fail_at_end: bool) -> EventStream<Chunks> {
        EventStream::new(
            Chunks {
                chunks: chunks.iter().map(|c| Bytes::from(c.to_string())).collect(),
                fail_at_end,
            },
            200,
        )
    }

    #[tokio::test]
    async fn the_stream_yields_stored_events_and_error_frames() {
        let mut events = stream(
            &[
                ": ping\n\nid: 0\ndata: {\"seq\":0,\"ts\":\"t\",\"body\":{\"type\":\"text\",",
                "\"text\":\"hi\"}}\n\nevent: other\ndata: x\n\nevent: error\ndata: {\"reason\":\"replay_failed\"}\n\n",
            ],
            false,
        );
        let first = events.next().await.unwrap().unwrap();
        let StreamItem::Event { event, raw } = first else {
            panic!("{first:?}");
        };
        assert_eq!(event.seq, 0);
        assert_eq!(event.kind(), Some("text"));
        assert_eq!(
            raw,
            r#"{"seq":0,"ts":"t","body":{"type":"text","text":"hi"}}"#
        );
        let second = events.next().await.unwrap().unwrap();
        assert_eq!(
            second,
            StreamItem::Error {
                raw: r#"{"reason":"replay_failed"}"#.into(),
                payload: serde_json::json!({"reason": "replay_failed"}),
            }
        );
        assert!(events.next().await.is_none());
        assert_eq!(events.comments(), 1);
    }

    #[tokio::test]
    async fn a_broken_stream_ends_in_stream_lost() {
        let cases: &[(&str, &[&str], bool)] = &[
            ("cut mid frame", &["id: 0\ndata: {\"seq\":0"], false),
            ("transport error", &["id: 0\n"], true),
        ];
        for (name, chunks, fail) in cases {
            let mut events = stream(chunks, *fail);
            let item = events.next().await.unwrap();
            assert!(
                matches!(item, Err(Error::StreamLost(_))),
                "{name}: {item:?}"
            );
            assert!(events.next().await.is_none(), "{name}");
        }
    }

    #[tokio::test]
    async fn frames_that_break_the_contract_are_refused() {
        let cases: &[(&str, &str)] = &[
            ("data not JSON", "id: 0\ndata: hello\n\n"),
            ("not a stored event", "id: 0\ndata: {\"seq\":0}\n\n"),
            (
                "id differs from seq",
                "id: 5\ndata: {\"seq\":0,\"ts\":\"t\",\"body\":{}}\n\n",
            ),
        ];
        for (name, text) in cases {
            let mut events = stream(&[text], false);
            let item = events.next().await.unwrap();
            assert!(
                matches!(item, Err(Error::BadResponse { .. })),
                "{name}: {item:?}"
            );
            assert!(events.next().await.is_none(), "{name}");
        }
    }
}
