//! A response body fed by a stream of byte chunks, one body frame per chunk.

use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use http_body::Frame;
use http_body_util::BodyExt;

use crate::{Body, BoxError};

type ChunkStream = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send>>;

/// Adapts a `Send`-only stream to the `Send + Sync` [`Body`].
///
/// [`Body`] is a `BoxBody`, which must be `Sync`, while the streams callers build (channels,
/// `async` blocks) usually are not. The stream sits behind a `Mutex` that is never locked:
/// polling goes through `Pin<&mut Self>` and `Mutex::get_mut`, so the mutex only lends its
/// `Sync` to the type and costs nothing at run time.
pub(crate) struct ChunkBody {
    chunks: Mutex<ChunkStream>,
    /// A stream error held back for one poll, see `poll_frame`.
    failure: Option<BoxError>,
}

impl ChunkBody {
    /// Boxes `chunks` into a [`Body`] that ends when the stream ends and fails (cutting the
    /// response short, after the chunks before the error were sent) when it yields an error.
    pub(crate) fn boxed<S>(chunks: S) -> Body
    where
        S: Stream<Item = Result<Bytes, BoxError>> + Send + 'static,
    {
        ChunkBody {
            chunks: Mutex::new(Box::pin(chunks)),
            failure: None,
        }
        .boxed()
    }
}

impl http_body::Body for ChunkBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(failure) = this.failure.take() {
            return Poll::Ready(Some(Err(failure)));
        }
        // Never locked, so never poisoned; `into_inner` keeps this panic-free regardless.
        let chunks = this
            .chunks
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        match chunks.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            Poll::Ready(Some(Err(failure))) => {
                // hyper drops the connection on a body error without flushing what it has
                // buffered. Returning `Pending` once first lets it write out the chunks that
                // came before the failure; the error follows on the next poll.
                this.failure = Some(failure);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
