//! The loopback forwards: each TCP connection to `127.0.0.1:3128` (and `:3129` on the turn
//! door) is relayed to a fresh connection to the gate's unix socket, bytes both ways, each
//! direction's end passed on as a half-close.
//!
//! The forwards are pure byte pumps: what may go out is the gate's decision, not the shim's.
//! They move bytes as the gate does ([`atelier_relay`]): the program's uploads spliced into
//! the gate's socket, its downloads copied through a buffer that grows to a megabyte. A copy
//! through small fixed buffers (`tokio::io::copy_bidirectional`) held a door's connections to
//! about a third of a direct connection's speed both ways (`cargo bench -p atelier-relay`).

use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use crate::settings::Forward;
use crate::ShimError;

/// Forwarded connections open at once per listener. The gate allows 128 tunnels per run; this
/// only keeps a runaway program from exhausting the shim's descriptors.
const MAX_CONNECTIONS: usize = 256;

/// Pause after a failed accept (e.g. out of descriptors) before accepting again, so the loop
/// does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The bound forwards; dropping this stops them and every relay they carry.
#[derive(Debug)]
pub struct Forwards {
    local: Vec<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

// === impl Forwards ===

impl Forwards {
    /// No forwards (unconfined runs, the git door).
    pub fn none() -> Forwards {
        Forwards {
            local: Vec::new(),
            tasks: Vec::new(),
        }
    }

    /// Binds every forward's listener, then starts accepting on the current tokio runtime.
    /// All are bound before this returns, so they exist before the program starts.
    pub fn bind(forwards: &[Forward]) -> Result<Forwards, ShimError> {
        let mut listeners = Vec::with_capacity(forwards.len());
        for forward in forwards {
            let cannot = |source: io::Error| ShimError::CannotListen {
                name: forward.name,
                addr: forward.listen,
                source,
            };
            let listener = std::net::TcpListener::bind(forward.listen).map_err(cannot)?;
            listener.set_nonblocking(true).map_err(cannot)?;
            let listener = TcpListener::from_std(listener).map_err(cannot)?;
            let local = listener.local_addr().map_err(cannot)?;
            listeners.push((listener, local, forward.target.clone()));
        }
        let local = listeners.iter().map(|(_, addr, _)| *addr).collect();
        let tasks = listeners
            .into_iter()
            .map(|(listener, _, target)| tokio::spawn(accept_loop(listener, target)))
            .collect();
        Ok(Forwards { local, tasks })
    }

    /// The bound addresses, in the order the forwards were given.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }
}

impl Drop for Forwards {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: PathBuf) {
    let target: Arc<Path> = target.into();
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Owned here so that aborting this task drops every relay with it.
    let mut relays = JoinSet::new();
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished relays so the set does not grow with the run's lifetime.
            Some(_) = relays.join_next(), if !relays.is_empty() => continue,
        };
        match accepted {
            Ok((tcp, _peer)) => {
                let target = Arc::clone(&target);
                relays.spawn(async move {
                    relay(tcp, &target).await;
                    drop(permit);
                });
            }
            Err(_) => {
                drop(permit);
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Relays one TCP connection to a fresh connection to `target` until both directions ended.
///
/// A gate that cannot be reached is worth a line in the journal; a peer resetting its end
/// mid-relay is how connections end and is not.
async fn relay(tcp: TcpStream, target: &Path) {
    let unix = match UnixStream::connect(target).await {
        Ok(unix) => unix,
        Err(e) => {
            note(&format!(
                "[egress] shim: cannot reach the gate socket {}: {e}",
                target.display()
            ));
            return;
        }
    };
    // The program's uploads queue on this socket's send buffer; the gate widens its own end
    // for downloads.
    atelier_relay::widen_send_buffer(&unix);
    let _ = atelier_relay::run(&unix, &tcp, atelier_relay::Mode::Measured, &()).await;
}

/// A diagnostic line on the shim's stderr (the unit's journal).
fn note(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", line.replace(['\n', '\r'], " "));
}

#[cfg(test)]
mod tests;
