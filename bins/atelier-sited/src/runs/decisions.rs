//! One run's egress decisions: sited's subscription to its site's gate for the door the run
//! goes through, opened before the run and drained after its program ends.
//!
//! A site runs one thing at a time (its doors' targets conflict), so what the gate decides on
//! a door between the subscription and the run's end is that run's. The gate records every
//! decision into its subscriptions before it answers the client, so once the program has
//! ended, a half-close asks the gate for the rest and its end of stream says there is no more.

use std::path::Path;
use std::time::Duration;

use atelier_proto::egress::{Decision, Subscribe, MAX_DECISION_LINE};
use atelier_proto::Door;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// How long the gate has to hand over the rest once the program has ended. It holds them
/// already; this only bounds a gate that has stopped answering.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// How long the gate (started by this very connection, if it was not running) has to confirm
/// a subscription.
const CONFIRM_DEADLINE: Duration = Duration::from_secs(10);

/// The subscription of one run.
#[derive(Debug)]
pub struct Decisions {
    reader: BufReader<OwnedReadHalf>,
    writer: Option<OwnedWriteHalf>,
    /// The line being read; kept across cancelled reads, which may have filled part of it.
    line: Vec<u8>,
}

impl Decisions {
    /// Subscribes to the decisions about `door` at the gate's decisions socket `path`, and
    /// waits for the gate to confirm: only from then on does it record for this run.
    pub async fn subscribe(path: &Path, door: Door) -> Result<Decisions, String> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| format!("connecting to {}: {e}", path.display()))?;
        let (reader, mut writer) = stream.into_split();
        let subscribe = Subscribe::new(door);
        let line = subscribe
            .to_line()
            .map_err(|e| format!("subscribing: {e}"))?;
        writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("subscribing at {}: {e}", path.display()))?;
        let mut decisions = Decisions {
            reader: BufReader::new(reader),
            writer: Some(writer),
            line: Vec::new(),
        };
        let confirmed = tokio::time::timeout(CONFIRM_DEADLINE, decisions.read_line())
            .await
            .map_err(|_| {
                format!(
                    "the gate did not confirm within {} s",
                    CONFIRM_DEADLINE.as_secs()
                )
            })?
            .map_err(|e| format!("reading the gate's confirmation: {e}"))?;
        match confirmed.as_deref().map(Subscribe::parse_line) {
            Some(Ok(echo)) if echo == subscribe => Ok(decisions),
            Some(Ok(echo)) => Err(format!("the gate confirmed another subscription: {echo:?}")),
            Some(Err(e)) => Err(format!("the gate's confirmation: {e}")),
            None => Err("the gate closed the subscription unconfirmed".to_owned()),
        }
    }

    /// The next decision; `None` once the gate has closed the stream (or broke it, which is
    /// logged). Cancel safe: a partial line is kept for the next call.
    pub async fn next(&mut self) -> Option<Decision> {
        match self.read_line().await {
            Ok(Some(line)) => match Decision::parse_line(&line) {
                Ok(decision) => Some(decision),
                Err(error) => {
                    tracing::warn!(%error, "the gate sent a decision sited cannot read; the stream is closed");
                    None
                }
            },
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%error, "reading the gate's decisions failed");
                None
            }
        }
    }

    /// One whole line, at most [`MAX_DECISION_LINE`] bytes (a longer one is returned cut, for
    /// the parser to refuse); `None` at the end of the stream. Cancel safe.
    async fn read_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            let room = (MAX_DECISION_LINE + 1).saturating_sub(self.line.len());
            let read = (&mut self.reader)
                .take(u64::try_from(room).unwrap_or(u64::MAX))
                .read_until(b'\n', &mut self.line)
                .await?;
            if read == 0 {
                if !self.line.is_empty() {
                    tracing::warn!("the gate's decision stream ended inside a line");
                }
                return Ok(None);
            }
            if self.line.ends_with(b"\n") || self.line.len() > MAX_DECISION_LINE {
                return Ok(Some(std::mem::take(&mut self.line)));
            }
        }
    }

    /// Tells the gate the run has ended: it sends what it holds for this run, then closes.
    pub async fn finish(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            let _ = writer.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use atelier_proto::egress::Verdict;
    use tokio::net::UnixListener;

    /// A gate stand-in that confirms, sends `decisions` at once and the `after_end` ones only
    /// once the subscriber has half-closed, then closes.
    async fn gate(listener: UnixListener, decisions: Vec<Decision>, after_end: Vec<Decision>) {
        let (stream, _) = listener.accept().await.unwrap();
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::new(reader);
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line).await.unwrap();
        let subscribe = Subscribe::parse_line(&line).unwrap();
        writer
            .write_all(subscribe.to_line().unwrap().as_bytes())
            .await
            .unwrap();
        for decision in decisions {
            writer
                .write_all(decision.to_line().unwrap().as_bytes())
                .await
                .unwrap();
        }
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.unwrap();
        for decision in after_end {
            writer
                .write_all(decision.to_line().unwrap().as_bytes())
                .await
                .unwrap();
        }
    }

    fn decision(host: &str, verdict: Verdict, reason: &str) -> Decision {
        Decision::new(Door::Turn, host, Some(443), verdict, reason)
    }

    #[tokio::test]
    async fn a_subscription_is_confirmed_then_streams_until_the_gate_has_sent_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("decisions.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let during = vec![decision(
            "model.example.com",
            Verdict::Allowed,
            "via 192.0.2.1:443",
        )];
        let after = vec![decision(
            "evil.example.com",
            Verdict::Refused,
            "not_in_plan",
        )];
        let served = tokio::spawn(gate(listener, during.clone(), after.clone()));
        let mut decisions = Decisions::subscribe(&path, Door::Turn).await.unwrap();
        assert_eq!(decisions.next().await, Some(during[0].clone()));
        decisions.finish().await;
        assert_eq!(decisions.next().await, Some(after[0].clone()));
        assert_eq!(decisions.next().await, None, "the gate closed: no more");
        served.await.unwrap();
    }

    #[tokio::test]
    async fn a_gate_that_does_not_confirm_refuses_the_subscription() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("decisions.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let served = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            drop(stream);
        });
        let refused = Decisions::subscribe(&path, Door::Turn).await.unwrap_err();
        assert!(refused.contains("confirm"), "{refused}");
        served.await.unwrap();
        let missing = Decisions::subscribe(&dir.path().join("absent.sock"), Door::Turn)
            .await
            .unwrap_err();
        assert!(missing.contains("connecting to"), "{missing}");
    }
}
