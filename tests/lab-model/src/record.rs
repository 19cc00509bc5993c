//! The request log: one JSON line per request received, appended whole in one write so a test
//! can read the file at any moment; credential headers are redacted. And, for the stand-ins a
//! test runs in process, [`RecordedRequest`]: one request kept whole, credentials too, since it
//! never leaves the test.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use bytes::Bytes;
use hyper::http::request::Parts;
use hyper::{HeaderMap, Method, Uri};
use serde_json::{Map, Value};

/// The headers whose values never reach the log.
const REDACTED_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "x-api-key"];

/// What a redacted header's value becomes.
pub const REDACTED: &str = "[redacted]";

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Its method.
    pub method: Method,
    /// Its path (without the query).
    pub path: String,
    /// Every header, names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte.
    pub body: Bytes,
}

impl RecordedRequest {
    /// The request of `parts` and `body`.
    pub fn new(parts: &Parts, body: Bytes) -> RecordedRequest {
        RecordedRequest {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body,
        }
    }

    /// The value of header `name` (lower case), if it came once or more (the first).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; `null` when it is empty or not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// The open log.
#[derive(Debug)]
pub struct Recorder {
    file: Mutex<File>,
}

impl Recorder {
    /// Opens `path` for appending, creating it if needed.
    pub fn open(path: &Path) -> std::io::Result<Recorder> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder {
            file: Mutex::new(file),
        })
    }

    /// Appends the line of one request.
    pub fn record(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> std::io::Result<()> {
        self.write(&entry(method, uri, headers, body))
    }

    /// Appends `entry` (one request's, as [`entry`] makes it, perhaps with more fields),
    /// stamped `received_unix_us` (the wall clock, microseconds) so a benchmark in the same
    /// box can time a request against its own clock.
    pub fn write(&self, entry: &Value) -> std::io::Result<()> {
        let mut entry = entry.clone();
        if let Value::Object(fields) = &mut entry {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| {
                    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
                });
            fields.insert("received_unix_us".to_owned(), Value::from(now));
        }
        let mut line = entry.to_string();
        line.push('\n');
        // A poisoned lock only means another line's write panicked; the file is still fine.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(line.as_bytes())?;
        file.flush()
    }
}

/// One request as a log entry: `method`, `path`, `query` (`null` without one), `headers`
/// (lowercase names; repeated ones joined with `", "`; credentials [`REDACTED`]) and `body`
/// (the parsed JSON, else the text; `null` when empty).
pub fn entry(method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Value {
    let mut recorded = Map::new();
    for (name, value) in headers {
        let value = if REDACTED_HEADERS.contains(&name.as_str()) {
            REDACTED.to_owned()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        match recorded.get_mut(name.as_str()) {
            Some(Value::String(joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            _ => {
                recorded.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    serde_json::json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "headers": recorded,
        "body": body,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyper::header::HeaderValue;
    use serde_json::json;

    use super::*;

    #[test]
    fn credentials_are_redacted_and_the_rest_kept() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("sk-ant-secret"));
        headers.insert("Authorization", HeaderValue::from_static("Bearer secret"));
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        headers.append("anthropic-beta", HeaderValue::from_static("a"));
        headers.append("anthropic-beta", HeaderValue::from_static("b"));
        let uri: Uri = "/v1/messages?beta=true".parse().unwrap();
        let entry = entry(&Method::POST, &uri, &headers, br#"{"model":"m"}"#);
        assert_eq!(
            entry,
            json!({
                "method": "POST",
                "path": "/v1/messages",
                "query": "beta=true",
                "headers": {
                    "x-api-key": "[redacted]",
                    "authorization": "[redacted]",
                    "anthropic-version": "2023-06-01",
                    "anthropic-beta": "a, b",
                },
                "body": { "model": "m" },
            })
        );
        assert!(!entry.to_string().contains("secret"));
    }

    #[test]
    fn a_body_that_is_not_json_is_kept_as_text() {
        let uri: Uri = "/x".parse().unwrap();
        let headers = HeaderMap::new();
        assert_eq!(
            entry(&Method::GET, &uri, &headers, b"not json")["body"],
            "not json"
        );
        assert_eq!(
            entry(&Method::GET, &uri, &headers, b"")["body"],
            Value::Null
        );
        assert_eq!(
            entry(&Method::GET, &uri, &headers, b"")["query"],
            Value::Null
        );
    }

    #[test]
    fn lines_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.jsonl");
        std::fs::write(&path, "earlier\n").unwrap();
        let recorder = Recorder::open(&path).unwrap();
        let uri: Uri = "/a".parse().unwrap();
        recorder
            .record(&Method::GET, &uri, &HeaderMap::new(), b"")
            .unwrap();
        recorder
            .record(&Method::POST, &uri, &HeaderMap::new(), b"1")
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "earlier");
        let last: Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(last["body"], 1);
    }
}
