//! Test helpers: a server on a tempdir unix socket and a hyper client for it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::Method;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{
    empty_body, full_body, serve, Body, Listener, Request, Response, ServeError, ServeReport,
};

/// A [`serve`] task on a unix socket in its own temp dir.
pub(crate) struct TestServer {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<ServeReport, ServeError>>,
}

impl TestServer {
    pub(crate) fn start<H, F>(handler: H) -> Self
    where
        H: Fn(Request) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response> + Send + 'static,
    {
        Self::start_with_deadline(Duration::from_secs(5), handler)
    }

    pub(crate) fn start_with_deadline<H, F>(drain_deadline: Duration, handler: H) -> Self
    where
        H: Fn(Request) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response> + Send + 'static,
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("http.sock");
        let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let listener = Listener::try_from(std_listener).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(
            listener,
            handler,
            async {
                let _ = stopped.await;
            },
            drain_deadline,
        ));
        TestServer {
            dir,
            path,
            stop: Some(stop),
            served,
        }
    }

    /// Resolves the server's shutdown future now.
    pub(crate) fn trigger_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).unwrap();
        }
    }

    /// Waits for [`serve`] to return (after a [`TestServer::trigger_shutdown`]).
    pub(crate) async fn finish(self) -> Result<ServeReport, ServeError> {
        // Keep the temp dir alive until serving ended.
        let TestServer { dir, served, .. } = self;
        let result = served.await.unwrap();
        drop(dir);
        result
    }

    pub(crate) async fn stop(mut self) -> Result<ServeReport, ServeError> {
        self.trigger_shutdown();
        self.finish().await
    }
}

/// A client on a fresh connection to the unix socket at `path`.
pub(crate) async fn connect(path: &Path) -> SendRequest<Body> {
    connect_io(tokio::net::UnixStream::connect(path).await.unwrap()).await
}

/// A client over any stream; the connection is driven by a spawned task.
pub(crate) async fn connect_io<I>(io: I) -> SendRequest<Body>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

pub(crate) fn body_of(bytes: impl Into<Bytes>) -> Body {
    full_body(bytes)
}

pub(crate) fn request(method: Method, uri: &str, body: Body) -> hyper::Request<Body> {
    hyper::Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "test")
        .body(body)
        .unwrap()
}

pub(crate) fn request_empty(uri: &str) -> hyper::Request<Body> {
    request(Method::GET, uri, empty_body())
}

/// `GET uri` on a fresh connection.
pub(crate) async fn get(path: &Path, uri: &str) -> hyper::Response<Incoming> {
    let mut client = connect(path).await;
    client.send_request(request_empty(uri)).await.unwrap()
}

/// The whole body as text.
pub(crate) async fn collect(response: hyper::Response<Incoming>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The next data frame, `None` at the end of the body; panics on a body error.
pub(crate) async fn next_data(body: &mut Incoming) -> Option<Bytes> {
    loop {
        match body.frame().await? {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    return Some(data);
                }
            }
            Err(error) => panic!("body failed: {error}"),
        }
    }
}
