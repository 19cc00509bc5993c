//! The decisions socket: sited subscribes to one door's decisions for the length of one run
//! (the lines are [`atelier_proto::egress`]'s).
//!
//! Per accepted connection, in order: read one [`Subscribe`] line, at most
//! [`MAX_SUBSCRIBE_LINE`] bytes within [`Subscriptions::subscribe_timeout`] (a bad, late or
//! unserved subscription gets nothing written and the connection closed, the error logged by
//! name); subscribe to the door's [`DecisionLog`]; echo the subscribe line, which tells sited
//! the gate records for it from now on (only then does it start the run); write each decision
//! recorded from then on as one JSON line. When the subscriber half-closes (or sends anything more), the subscription
//! ends: the decisions already recorded for it are written, then the connection is closed. At
//! most [`Subscriptions::max_subscribers`] connections are served at once; one more is closed
//! unread.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use atelier_proto::egress::{EgressError, Subscribe, MAX_SUBSCRIBE_LINE};
use atelier_proto::Door as DoorName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

use crate::serve::{accept, DecisionLog, Subscription};

/// How long the subscribe line may take to arrive (the CONNECT head's bound).
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Subscribers served at once. sited holds one per run and a site runs one thing at a time;
/// the rest is room for a subscriber whose previous connection is still draining.
pub const MAX_SUBSCRIBERS: usize = 16;

/// What the decisions socket serves: the doors' logs and its bounds.
#[derive(Debug)]
pub struct Subscriptions {
    /// The log of every door this gate serves.
    pub doors: HashMap<DoorName, Arc<DecisionLog>>,
    /// How long the subscribe line may take.
    pub subscribe_timeout: Duration,
    /// Connections served at once.
    pub max_subscribers: usize,
}

/// Why a connection to the decisions socket gets no subscription.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// No whole line within the timeout.
    #[error("no subscribe line within {0:?}")]
    Timeout(Duration),
    /// The subscriber closed its side before a whole line.
    #[error("the subscriber closed before a whole subscribe line")]
    Closed,
    /// Reading failed.
    #[error("reading the subscribe line: {0}")]
    Read(#[source] io::Error),
    /// Bytes followed the line; the subscriber says nothing after it.
    #[error("bytes follow the subscribe line")]
    TrailingBytes,
    /// The line is not a valid subscription (too long, malformed, the git door, ...).
    #[error(transparent)]
    Line(#[from] EgressError),
    /// The door is not one this gate serves.
    #[error("this gate serves no {0} door")]
    NotServed(DoorName),
}

// === impl SubscribeError ===

impl SubscribeError {
    /// The stable snake_case name used in logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            SubscribeError::Timeout(_) => "subscribe_timeout",
            SubscribeError::Closed => "closed",
            SubscribeError::Read(_) => "read_failed",
            SubscribeError::TrailingBytes => "trailing_bytes",
            SubscribeError::Line(error) => error.as_str(),
            SubscribeError::NotServed(_) => "not_served",
        }
    }
}

// === impl Subscriptions ===

impl Subscriptions {
    /// The production bounds over `doors`.
    pub fn new(doors: HashMap<DoorName, Arc<DecisionLog>>) -> Subscriptions {
        Subscriptions {
            doors,
            subscribe_timeout: SUBSCRIBE_TIMEOUT,
            max_subscribers: MAX_SUBSCRIBERS,
        }
    }
}

/// Accepts subscribers on `listener` forever, each served on its own task. Returns only if
/// accepting fails for good.
pub async fn serve(listener: UnixListener, subscriptions: Arc<Subscriptions>) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(subscriptions.max_subscribers));
    loop {
        let stream = accept(&listener, "a decisions subscriber").await?;
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                let subscriptions = Arc::clone(&subscriptions);
                tokio::spawn(async move {
                    handle(stream, &subscriptions).await;
                    drop(slot);
                });
            }
            Err(_) => tracing::warn!(
                "refused a decisions subscriber: {} are connected",
                subscriptions.max_subscribers
            ),
        }
    }
}

/// Serves one subscriber to its end; see the module documentation.
pub async fn handle(stream: UnixStream, subscriptions: &Subscriptions) {
    let (mut reader, mut writer) = stream.into_split();
    let (subscribe, log) = match read_subscription(&mut reader, subscriptions).await {
        Ok(subscribed) => subscribed,
        Err(error) => {
            tracing::warn!(reason = error.as_str(), %error, "refused a decisions subscription");
            return;
        }
    };
    let door = log.door();
    let subscription = log.subscribe();
    // The subscription records from here: say so, so that the run may start.
    let Ok(confirmation) = subscribe.to_line() else {
        return;
    };
    if writer.write_all(confirmation.as_bytes()).await.is_err() {
        return;
    }
    tracing::info!(door = %door, "a decisions subscription began");
    let end = subscription.end_handle();
    let watching = async move {
        watch_for_end(reader).await;
        end.end();
        // Stay pending: the connection ends when the last decision is written.
        std::future::pending::<()>().await;
    };
    let sent = tokio::select! {
        () = watching => 0,
        sent = write_decisions(subscription, &mut writer) => sent,
    };
    let _ = writer.shutdown().await;
    tracing::info!(door = %door, sent, "a decisions subscription ended");
}

/// Reads the one subscribe line and finds its door's log.
async fn read_subscription<R: AsyncRead + Unpin>(
    reader: &mut R,
    subscriptions: &Subscriptions,
) -> Result<(Subscribe, Arc<DecisionLog>), SubscribeError> {
    let line = timeout(subscriptions.subscribe_timeout, read_line(reader))
        .await
        .map_err(|_| SubscribeError::Timeout(subscriptions.subscribe_timeout))??;
    let subscribe = Subscribe::parse_line(&line)?;
    let log = subscriptions
        .doors
        .get(&subscribe.door)
        .cloned()
        .ok_or(SubscribeError::NotServed(subscribe.door))?;
    Ok((subscribe, log))
}

/// Reads through the first `\n`, and at most one byte past [`MAX_SUBSCRIBE_LINE`]: a longer
/// line is returned as it is, for [`Subscribe::parse_line`] to refuse by its length.
async fn read_line<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, SubscribeError> {
    let mut line = Vec::with_capacity(64);
    let mut chunk = [0u8; 256];
    loop {
        if let Some(end) = line.iter().position(|&byte| byte == b'\n') {
            if end + 1 != line.len() {
                return Err(SubscribeError::TrailingBytes);
            }
            return Ok(line);
        }
        let room = (MAX_SUBSCRIBE_LINE + 1).saturating_sub(line.len());
        if room == 0 {
            return Ok(line);
        }
        let want = room.min(chunk.len());
        match reader.read(&mut chunk[..want]).await {
            Ok(0) => return Err(SubscribeError::Closed),
            Ok(read) => line.extend_from_slice(&chunk[..read]),
            Err(error) => return Err(SubscribeError::Read(error)),
        }
    }
}

/// Waits for the subscriber's end: end of file (its half-close), an error, or any byte.
async fn watch_for_end(mut reader: OwnedReadHalf) {
    let mut byte = [0u8; 1];
    if let Ok(1..) = reader.read(&mut byte).await {
        tracing::warn!("a decisions subscriber sent bytes after its subscription; ending it");
    }
}

/// Writes every decision of `subscription` until it is ended and drained, or the subscriber
/// is gone; how many were written.
async fn write_decisions(mut subscription: Subscription, writer: &mut OwnedWriteHalf) -> usize {
    let mut sent = 0;
    while let Some(decision) = subscription.next().await {
        let line = match decision.to_line() {
            Ok(line) => line,
            // Decision::new makes every decision valid; nothing to send if one is not.
            Err(error) => {
                tracing::warn!(%error, "a decision that cannot be sent");
                continue;
            }
        };
        if writer.write_all(line.as_bytes()).await.is_err() {
            break;
        }
        sent += 1;
    }
    sent
}

#[cfg(test)]
mod tests;
