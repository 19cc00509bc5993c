//! A recording proxy in front of sited's socket: every connection to it is relayed byte for
//! byte to sited, and what the client sent is kept, so a test can say which requests reached
//! sited at all.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

/// The bytes each client connection sent, in the order the connections were accepted.
type Sent = Arc<Mutex<Vec<Arc<Mutex<Vec<u8>>>>>>;

/// A proxy listening on its own socket until the test's runtime ends.
pub struct RecordingProxy {
    socket: PathBuf,
    sent: Sent,
}

impl RecordingProxy {
    /// Listens on `socket` and relays every connection to `upstream`.
    pub fn start(socket: &Path, upstream: &Path) -> RecordingProxy {
        let listener = UnixListener::bind(socket).expect("binding the proxy's socket");
        let sent: Sent = Arc::default();
        let log = Arc::clone(&sent);
        let upstream = upstream.to_owned();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let record = Arc::new(Mutex::new(Vec::new()));
                log.lock()
                    .expect("the proxy's log")
                    .push(Arc::clone(&record));
                tokio::spawn(relay(client, upstream.clone(), record));
            }
        });
        RecordingProxy {
            socket: socket.to_owned(),
            sent,
        }
    }

    /// The proxy's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Every request sent through the proxy so far, as `METHOD path`, in order.
    pub fn requests(&self) -> Vec<String> {
        let connections = self.sent.lock().expect("the proxy's log").clone();
        connections
            .iter()
            .flat_map(|record| request_lines(&record.lock().expect("a connection's bytes")))
            .collect()
    }
}

/// Relays one connection both ways, recording what the client sends.
async fn relay(mut client: UnixStream, upstream: PathBuf, record: Arc<Mutex<Vec<u8>>>) {
    let Ok(mut server) = UnixStream::connect(&upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let upward = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            record
                .lock()
                .expect("a connection's bytes")
                .extend_from_slice(&buf[..n]);
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let downward = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upward, downward);
}

/// The request lines of an HTTP/1.1 byte stream (`METHOD path`), each request's body skipped
/// by its `Content-Length`.
fn request_lines(bytes: &[u8]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rest = bytes;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..end]);
        let mut head_lines = head.split("\r\n");
        let request = head_lines.next().unwrap_or_default();
        let mut parts = request.split(' ');
        let (method, path) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        lines.push(format!("{method} {path}"));
        let length = head_lines
            .filter_map(|h| h.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let next = (end + 4 + length).min(rest.len());
        rest = &rest[next..];
    }
    lines
}
