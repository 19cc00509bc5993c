//! Reading the daemon's one `S` frame and checking it against what the unit states.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use atelier_proto::{read_frame, Decoder, Door, FrameError, FrameKind, MessageError, Spec};
use tokio::io::{AsyncRead, ReadBuf};

use crate::settings::{is_door_fixed_env_key, Settings};
use crate::ShimError;

/// Why the spec was refused; each reads after "refused — ".
#[derive(Debug, thiserror::Error)]
pub enum SpecRefusal {
    /// The connection ended before any frame.
    #[error("the connection ended before a spec")]
    NoSpec,
    /// No frame within the deadline.
    #[error("no spec within {} s", .0.as_secs())]
    Timeout(Duration),
    /// The bytes are not frames (unknown type, over-cap length, truncated, read error).
    #[error("the spec could not be framed: {0}")]
    Frame(#[source] FrameError),
    /// The first frame is not a spec.
    #[error("the first frame is a {0} frame, not a spec")]
    NotASpec(FrameKind),
    /// The spec's JSON is malformed or breaks a rule of the protocol (this includes the
    /// door-independent fixed keys such as HOME).
    #[error("{0}")]
    Malformed(#[source] MessageError),
    /// The spec is for another door than the unit's.
    #[error("the spec is for the {spec} door but this unit serves the {unit} door")]
    WrongDoor {
        /// The spec's door.
        spec: Door,
        /// The unit's door.
        unit: Door,
    },
    /// The spec sets a key this door's unit fixes.
    #[error("the spec sets {key}, which the {door} unit fixes")]
    FixedKey {
        /// The door.
        door: Door,
        /// The key.
        key: String,
    },
    /// More bytes followed the spec before the program started.
    #[error("a second frame followed the spec")]
    SecondFrame,
}

/// Reads exactly one spec frame (within the settings' deadline) and checks it.
pub async fn read_spec<R>(
    conn_in: &mut R,
    decoder: &mut Decoder,
    settings: &Settings,
) -> Result<Spec, SpecRefusal>
where
    R: AsyncRead + Unpin,
{
    let frame =
        match tokio::time::timeout(settings.spec_timeout, read_frame(conn_in, decoder)).await {
            Err(_) => return Err(SpecRefusal::Timeout(settings.spec_timeout)),
            Ok(Err(e)) => return Err(SpecRefusal::Frame(e)),
            Ok(Ok(None)) => return Err(SpecRefusal::NoSpec),
            Ok(Ok(Some(frame))) => frame,
        };
    if frame.kind != FrameKind::Spec {
        return Err(SpecRefusal::NotASpec(frame.kind));
    }
    let spec = Spec::from_frame(&frame).map_err(SpecRefusal::Malformed)?;
    check(&spec, settings.door)?;
    Ok(spec)
}

/// The checks that need the unit: the door must be the unit's, and no env key may be one the
/// unit fixes on this door. Done for every key even where `atelier-proto` already refused
/// the door-independent ones, so the shim's boundary does not rest on another crate's list.
pub fn check(spec: &Spec, unit_door: Door) -> Result<(), SpecRefusal> {
    if spec.door != unit_door {
        return Err(SpecRefusal::WrongDoor {
            spec: spec.door,
            unit: unit_door,
        });
    }
    match spec
        .env
        .keys()
        .find(|key| is_door_fixed_env_key(unit_door, key))
    {
        Some(key) => Err(SpecRefusal::FixedKey {
            door: unit_door,
            key: key.clone(),
        }),
        None => Ok(()),
    }
}

/// Refuses the run if anything already followed the spec: the daemon sends exactly one frame.
///
/// Looks once without waiting; bytes that arrive later are caught while the program runs. An
/// end of stream here means the daemon hung up before anything started.
pub async fn ensure_nothing_after_spec<R>(conn_in: &mut R) -> Result<(), ShimError>
where
    R: AsyncRead + Unpin,
{
    let mut probe = [0u8; 1];
    let polled = poll_fn(|cx| {
        let mut buf = ReadBuf::new(&mut probe);
        match Pin::new(&mut *conn_in).poll_read(cx, &mut buf) {
            Poll::Ready(result) => Poll::Ready(Some(result.map(|()| buf.filled().len()))),
            Poll::Pending => Poll::Ready(None),
        }
    })
    .await;
    match polled {
        None => Ok(()),
        Some(Ok(0)) => Err(ShimError::DaemonGone(
            "it closed the connection after the spec; nothing was run".to_owned(),
        )),
        Some(Ok(_)) => Err(ShimError::BadSpec(SpecRefusal::SecondFrame)),
        Some(Err(e)) => Err(ShimError::DaemonGone(format!(
            "reading after the spec: {e}; nothing was run"
        ))),
    }
}

#[cfg(test)]
mod tests;
