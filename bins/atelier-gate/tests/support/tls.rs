//! TLS for the lab: a CA and server certificates made by rcgen, recording TLS servers
//! (tokio-rustls) that greet and echo, and a rustls client driven by hand over the gate's
//! tunnel so a test can send the real ClientHello as it is, edited, or re-framed.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;

use super::lab::WAIT;

#[allow(
    deprecated,
    reason = "the lab's TLS needs no post-quantum key exchange, and ring is the provider the workspace builds; rustls deprecates ring's provider for lacking it"
)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The lab's certificate authority.
pub struct LabCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl LabCa {
    /// A fresh CA.
    pub fn new() -> LabCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Atelier lab CA");
        let cert = params.self_signed(&key).unwrap();
        LabCa { cert, key }
    }

    /// A server configuration whose certificate names `hosts`.
    pub fn server_config(&self, hosts: &[&str]) -> Arc<ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        Arc::new(config)
    }

    /// A client configuration trusting this CA alone; `sni` false sends no server name.
    pub fn client_config(&self, sni: bool) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.cert.der().to_vec()))
            .unwrap();
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.enable_sni = sni;
        Arc::new(config)
    }
}

impl Default for LabCa {
    fn default() -> Self {
        LabCa::new()
    }
}

/// What a lab TLS server saw on one connection, recorded when it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Bytes received on the TCP connection, TLS records included.
    pub bytes_in: u64,
    /// The server name of a completed handshake; `None` if there was none.
    pub handshake_sni: Option<String>,
}

/// A TLS server that greets each client with `hello <sni>\n` and echoes what it reads.
#[derive(Clone, Default)]
pub struct TlsServer {
    /// Every connection that ended, in order.
    pub ended: Arc<Mutex<Vec<Connection>>>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
}

impl TlsServer {
    /// Serves `listener` with `config` on the current tokio runtime.
    pub fn start(listener: std::net::TcpListener, config: Arc<ServerConfig>) -> TlsServer {
        listener.set_nonblocking(true).unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let server = TlsServer::default();
        let state = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                state.accepted.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let state = state.clone();
                tokio::spawn(async move {
                    let counted = Arc::new(AtomicU64::new(0));
                    let stream = Counting {
                        inner: stream,
                        read: Arc::clone(&counted),
                    };
                    let sni = match acceptor.accept(stream).await {
                        Ok(mut tls) => {
                            let sni = tls.get_ref().1.server_name().map(str::to_owned);
                            let greeting = format!("hello {}\n", sni.as_deref().unwrap_or("-"));
                            if tls.write_all(greeting.as_bytes()).await.is_ok() {
                                let mut chunk = [0u8; 16 * 1024];
                                while let Ok(n) = tls.read(&mut chunk).await {
                                    if n == 0 || tls.write_all(&chunk[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                            let _ = tls.shutdown().await;
                            sni
                        }
                        Err(_) => None,
                    };
                    state.ended.lock().unwrap().push(Connection {
                        bytes_in: counted.load(Ordering::SeqCst),
                        handshake_sni: sni,
                    });
                });
            }
        });
        server
    }

    /// Waits until `count` connections have ended; them.
    pub fn wait_ended(&self, count: usize) -> Vec<Connection> {
        let deadline = Instant::now() + WAIT;
        loop {
            let ended = self.ended.lock().unwrap().clone();
            if ended.len() >= count {
                return ended;
            }
            assert!(
                Instant::now() < deadline,
                "only {} connections ended",
                ended.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

struct Counting<S> {
    inner: S,
    read: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counting<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.read.fetch_add(read, Ordering::SeqCst);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counting<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A client connection to `server_name` and its first flight (the ClientHello record).
pub fn client_hello(config: &Arc<ClientConfig>, server_name: &str) -> (ClientConnection, Vec<u8>) {
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let mut connection = ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut flight = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut flight).unwrap();
    }
    (connection, flight)
}

/// The handshake message of a one-record first flight.
pub fn handshake_of(flight: &[u8]) -> Vec<u8> {
    assert_eq!(flight[0], 0x16, "a handshake record");
    let len = usize::from(u16::from_be_bytes([flight[3], flight[4]]));
    assert_eq!(flight.len(), 5 + len, "one record");
    flight[5..].to_vec()
}

/// `handshake` framed as TLS records, cut after each offset in `cuts`.
pub fn records(handshake: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in cuts.iter().copied().chain([handshake.len()]) {
        let part = &handshake[start..end];
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&(part.len() as u16).to_be_bytes());
        out.extend_from_slice(part);
        start = end;
    }
    out
}

/// A one-record first flight with extension `(kind, data)` appended to the ClientHello.
pub fn with_extension(flight: &[u8], kind: u16, data: &[u8]) -> Vec<u8> {
    let mut hello = handshake_of(flight);
    assert_eq!(hello[0], 1, "a ClientHello");
    // Walk to the extensions: version, random, session id, cipher suites, compression.
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(hello[at]);
    at += 2 + usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
    at += 1 + usize::from(hello[at]);
    let extensions_len = usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
    assert_eq!(at + 2 + extensions_len, hello.len());
    let mut extension = kind.to_be_bytes().to_vec();
    extension.extend_from_slice(&(data.len() as u16).to_be_bytes());
    extension.extend_from_slice(data);
    let new_len = (extensions_len + extension.len()) as u16;
    hello[at..at + 2].copy_from_slice(&new_len.to_be_bytes());
    hello.extend_from_slice(&extension);
    let body_len = (hello.len() - 4) as u32;
    hello[1..4].copy_from_slice(&body_len.to_be_bytes()[1..]);
    records(&hello, &[])
}

/// The data of a server_name extension naming `host`.
pub fn server_name_extension(host: &str) -> Vec<u8> {
    let mut entry = vec![0u8];
    entry.extend_from_slice(&(host.len() as u16).to_be_bytes());
    entry.extend_from_slice(host.as_bytes());
    let mut data = (entry.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&entry);
    data
}

/// Opens a CONNECT tunnel to `host` through the door at `socket`: the gate's whole reply.
pub fn connect(socket: &std::path::Path, host: &str) -> (UnixStream, Vec<u8>) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
        .write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").as_bytes())
        .unwrap();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => reply.push(byte[0]),
            _ => break,
        }
    }
    (stream, reply)
}

/// The gate's reply opening a tunnel.
pub const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// Finishes the handshake after the first flight was sent by hand, then checks both ways:
/// the server's greeting names `host`, and `payload` comes back.
pub fn finish_and_echo(
    mut connection: ClientConnection,
    mut stream: UnixStream,
    host: &str,
    payload: &[u8],
) {
    let mut tls = rustls::Stream::new(&mut connection, &mut stream);
    let mut greeting = vec![0u8; format!("hello {host}\n").len()];
    tls.read_exact(&mut greeting).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&greeting),
        format!("hello {host}\n")
    );
    // A piece at a time, each echo read before the next piece goes: writing it all before
    // reading could fill every buffer on the echo path and stall both ends, whatever the gate.
    let mut echoed = vec![0u8; ECHO_PIECE];
    for piece in payload.chunks(ECHO_PIECE) {
        tls.write_all(piece).unwrap();
        tls.read_exact(&mut echoed[..piece.len()]).unwrap();
        assert!(&echoed[..piece.len()] == piece, "the echo differs");
    }
}

/// How much of an echo payload is in flight at once.
const ECHO_PIECE: usize = 16 * 1024;

/// Reads until the gate closes the tunnel; what arrived.
pub fn read_to_close(stream: &mut UnixStream) -> Vec<u8> {
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    rest
}
