//! JSON and NDJSON response builders and plain body constructors.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::StatusCode;
use serde::Serialize;

use crate::frames::ChunkBody;
use crate::{Body, BoxError, Problem, Response, NO_STORE};

const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json; charset=utf-8");
const APPLICATION_NDJSON: HeaderValue = HeaderValue::from_static("application/x-ndjson");
/// Asks nginx (and proxies that honour it) not to buffer a streamed response.
const X_ACCEL_BUFFERING: &str = "x-accel-buffering";

/// A body holding `bytes` in a single frame.
pub fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A body with no bytes.
pub fn empty_body() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// A `status` response whose body is `value` as compact JSON, with
/// `Content-Type: application/json; charset=utf-8` and `Cache-Control: no-store`.
///
/// If `value` cannot be serialized (a map with non-string keys, a failing `Serialize` impl),
/// the error is logged and the answer is a 500 `about:blank` problem instead.
pub fn json_response<T>(status: StatusCode, value: &T) -> Response
where
    T: Serialize + ?Sized,
{
    match serde_json::to_vec(value) {
        Ok(json) => json_bytes_response(status, json.into()),
        Err(error) => {
            tracing::error!(%error, "failed to serialize a JSON response body");
            Problem::internal_error().into_response()
        }
    }
}

/// A `status` response whose body is `json`, a value already serialized as compact JSON (one
/// kept between requests), with the headers of [`json_response`].
pub fn json_bytes_response(status: StatusCode, json: Bytes) -> Response {
    let mut response = Response::new(full_body(json));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, APPLICATION_JSON);
    headers.insert(CACHE_CONTROL, NO_STORE);
    response
}

/// A 200 response streaming `items` as NDJSON: one compact JSON document per line, each line
/// written as its own body frame so it reaches the client as soon as the item is produced.
///
/// Headers: `Content-Type: application/x-ndjson`, `Cache-Control: no-store`,
/// `X-Accel-Buffering: no`. Replace any of them on the returned response if a surface needs
/// another value. The body ends when `items` ends. An item that fails to serialize is logged
/// and ends the body with an error, so the client sees a truncated stream (no final chunk)
/// rather than a silently missing line.
pub fn ndjson_response<S>(items: S) -> Response
where
    S: Stream + Send + 'static,
    S::Item: Serialize,
{
    let lines = items.map(|item| {
        let mut line = serde_json::to_vec(&item).map_err(|error| {
            tracing::error!(%error, "failed to serialize an NDJSON line; ending the stream");
            BoxError::from(error)
        })?;
        line.push(b'\n');
        Ok(Bytes::from(line))
    });
    let mut response = Response::new(ChunkBody::boxed(lines));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, APPLICATION_NDJSON);
    headers.insert(CACHE_CONTROL, NO_STORE);
    headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use futures_util::stream;
    use http_body_util::BodyExt;
    use hyper::StatusCode;
    use serde_json::json;

    use super::*;
    use crate::test_support::{collect, get, next_data, TestServer};

    #[tokio::test]
    async fn json_response_is_compact_with_json_headers() {
        let server = TestServer::start(|_req| async {
            json_response(StatusCode::CREATED, &json!({"b": [1, 2], "a": "x y"}))
        });
        let response = get(&server.path, "/").await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(
            response.headers()["content-type"],
            "application/json; charset=utf-8"
        );
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(collect(response).await, r#"{"a":"x y","b":[1,2]}"#);
    }

    #[tokio::test]
    async fn json_serialization_failure_is_a_500_problem() {
        // serde_json refuses maps whose keys are not strings.
        let mut bad = BTreeMap::new();
        bad.insert((1, 2), "tuple key");
        let response = json_response(StatusCode::OK, &bad);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json; charset=utf-8"
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            body,
            r#"{"type":"about:blank","title":"Internal Server Error","status":500}"#
        );
    }

    #[tokio::test]
    async fn ndjson_lines_arrive_as_separate_frames() {
        let server = TestServer::start(|_req| async {
            ndjson_response(stream::iter(vec![
                json!({"type": "text", "delta": "a\nb"}),
                json!({"type": "done"}),
            ]))
        });
        let response = get(&server.path, "/").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/x-ndjson");
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(response.headers()["x-accel-buffering"], "no");
        let mut body = response.into_body();
        assert_eq!(
            next_data(&mut body).await.as_deref(),
            Some(&b"{\"delta\":\"a\\nb\",\"type\":\"text\"}\n"[..])
        );
        assert_eq!(
            next_data(&mut body).await.as_deref(),
            Some(&b"{\"type\":\"done\"}\n"[..])
        );
        assert_eq!(next_data(&mut body).await, None);
    }

    #[tokio::test]
    async fn ndjson_item_that_fails_to_serialize_truncates_the_stream() {
        let server = TestServer::start(|_req| async {
            let good = BTreeMap::<(i32, i32), i32>::new();
            let bad = BTreeMap::from([((1, 2), 3)]);
            ndjson_response(stream::iter(vec![good, bad.clone(), bad]))
        });
        let mut body = get(&server.path, "/").await.into_body();
        assert_eq!(next_data(&mut body).await.as_deref(), Some(&b"{}\n"[..]));
        let rest = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the stream ends at the failing item");
        assert!(
            matches!(rest, Some(Err(_))),
            "no clean end of body after a failed line: {rest:?}"
        );
    }

    #[tokio::test]
    async fn ndjson_line_is_delivered_before_the_next_item_exists() {
        let (tx, rx) = tokio::sync::mpsc::channel::<serde_json::Value>(4);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
        let server = TestServer::start(move |_req| {
            let rx = rx.lock().unwrap().take().expect("one request");
            async move {
                ndjson_response(stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|item| (item, rx))
                }))
            }
        });
        tx.send(json!({"n": 1})).await.unwrap();
        let mut body = get(&server.path, "/").await.into_body();
        let first = tokio::time::timeout(Duration::from_secs(5), next_data(&mut body))
            .await
            .expect("first line flushed while the stream is still open");
        assert_eq!(first.as_deref(), Some(&b"{\"n\":1}\n"[..]));
        drop(tx);
        assert_eq!(next_data(&mut body).await, None);
    }
}
