//! Frame types, their size caps, the frame value, encoding, and the codec's error type.

use std::fmt;

use bytes::Bytes;

/// Length of a frame header: one type byte and a big-endian `u32` payload length.
pub const HEADER_LEN: usize = 5;

/// Cap of every frame type except the spec.
const KIB_64: usize = 64 * 1024; // 64 KiB

/// Cap of the spec frame: it carries a whole argv and environment.
const MIB_1: usize = 1024 * 1024; // 1 MiB

/// The type of a frame, sent as one ASCII byte at the start of its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// `H`: the shim's hello (JSON [`Hello`](crate::Hello)), sent first.
    Hello,
    /// `S`: the daemon's run spec (JSON [`Spec`](crate::Spec)), sent once.
    Spec,
    /// `O`: a raw chunk of the child's stdout.
    Stdout,
    /// `E`: a raw chunk of the child's stderr.
    Stderr,
    /// `X`: the exit record (JSON [`ExitRecord`](crate::ExitRecord)), sent last.
    Exit,
    /// `T`: a typed JSON event ([`BuildEvent`](crate::BuildEvent)).
    Event,
}

// === impl FrameKind ===

impl FrameKind {
    /// Every frame kind, in wire-byte order of the reference table.
    pub const ALL: [FrameKind; 6] = [
        FrameKind::Hello,
        FrameKind::Spec,
        FrameKind::Stdout,
        FrameKind::Stderr,
        FrameKind::Exit,
        FrameKind::Event,
    ];

    /// The ASCII type byte that starts this kind's header.
    pub const fn as_byte(self) -> u8 {
        match self {
            FrameKind::Hello => b'H',
            FrameKind::Spec => b'S',
            FrameKind::Stdout => b'O',
            FrameKind::Stderr => b'E',
            FrameKind::Exit => b'X',
            FrameKind::Event => b'T',
        }
    }

    /// The kind whose type byte is `byte`, or `None` for a byte no frame uses.
    pub const fn from_byte(byte: u8) -> Option<FrameKind> {
        match byte {
            b'H' => Some(FrameKind::Hello),
            b'S' => Some(FrameKind::Spec),
            b'O' => Some(FrameKind::Stdout),
            b'E' => Some(FrameKind::Stderr),
            b'X' => Some(FrameKind::Exit),
            b'T' => Some(FrameKind::Event),
            _ => None,
        }
    }

    /// The largest payload, in bytes, a frame of this kind may carry.
    pub const fn max_len(self) -> usize {
        match self {
            FrameKind::Spec => MIB_1,
            FrameKind::Hello
            | FrameKind::Stdout
            | FrameKind::Stderr
            | FrameKind::Exit
            | FrameKind::Event => KIB_64,
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FrameKind::Hello => "hello",
            FrameKind::Spec => "spec",
            FrameKind::Stdout => "stdout",
            FrameKind::Stderr => "stderr",
            FrameKind::Exit => "exit",
            FrameKind::Event => "event",
        };
        write!(f, "{name} ({})", char::from(self.as_byte()))
    }
}

/// One frame: its kind and its payload.
///
/// The cap is not enforced on construction; [`encode`] refuses an over-cap payload and the
/// [`Decoder`](crate::Decoder) never produces one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's type.
    pub kind: FrameKind,
    /// The frame's payload: JSON for `H`, `S`, `X`, `T`; raw bytes for `O`, `E`.
    pub payload: Bytes,
}

// === impl Frame ===

impl Frame {
    /// A frame of `kind` carrying `payload`.
    pub fn new(kind: FrameKind, payload: impl Into<Bytes>) -> Frame {
        Frame {
            kind,
            payload: payload.into(),
        }
    }

    /// A stdout (`O`) chunk.
    pub fn stdout(chunk: impl Into<Bytes>) -> Frame {
        Frame::new(FrameKind::Stdout, chunk)
    }

    /// A stderr (`E`) chunk.
    pub fn stderr(chunk: impl Into<Bytes>) -> Frame {
        Frame::new(FrameKind::Stderr, chunk)
    }

    /// A frame of `kind` whose payload is `value` as JSON, refused if it exceeds the cap.
    pub fn json<T: serde::Serialize>(kind: FrameKind, value: &T) -> Result<Frame, FrameError> {
        let payload = serde_json::to_vec(value)?;
        check_len(kind, payload.len())?;
        Ok(Frame::new(kind, payload))
    }

    /// Length of this frame on the wire: header plus payload.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

/// Encodes `frame` as header and payload, refusing a payload over its kind's cap.
pub fn encode(frame: &Frame) -> Result<Vec<u8>, FrameError> {
    let len = check_len(frame.kind, frame.payload.len())?;
    let mut out = Vec::with_capacity(frame.encoded_len());
    out.push(frame.kind.as_byte());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&frame.payload);
    Ok(out)
}

/// Checks `len` against `kind`'s cap and returns it as the header's `u32`.
pub(crate) fn check_len(kind: FrameKind, len: usize) -> Result<u32, FrameError> {
    let max = kind.max_len();
    if len > max {
        return Err(FrameError::TooLarge { kind, len, max });
    }
    // Every cap fits in a u32, so this only fails if a cap were raised past 4 GiB.
    u32::try_from(len).map_err(|_| FrameError::TooLarge { kind, len, max })
}

/// Which part of a frame a stream ended inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramePart {
    /// Inside the 5-byte header.
    Header,
    /// Inside the payload, after a complete header.
    Payload,
}

impl fmt::Display for FramePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FramePart::Header => "header",
            FramePart::Payload => "payload",
        })
    }
}

/// Why a frame could not be encoded, decoded, read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The header's type byte is not one of `H S O E X T`.
    #[error("unknown frame type byte 0x{0:02x}")]
    UnknownKind(u8),
    /// The payload length exceeds the cap of its frame type.
    #[error("{kind} frame of {len} bytes exceeds its cap of {max} bytes")]
    TooLarge {
        /// The frame's type.
        kind: FrameKind,
        /// The declared (decoding) or actual (encoding) payload length.
        len: usize,
        /// The cap of `kind`.
        max: usize,
    },
    /// The stream ended inside a frame rather than between two frames.
    #[error("stream ended inside a frame {part}: {received} of {expected} bytes received")]
    Truncated {
        /// The part of the frame the stream ended inside.
        part: FramePart,
        /// Bytes of the frame (header included) received before the end.
        received: usize,
        /// Bytes the frame needed: the header length while inside the header, else the whole
        /// frame's length.
        expected: usize,
    },
    /// The decoder refused an earlier header and decodes nothing more; carries that refusal.
    #[error("decoder already failed: {0}")]
    Failed(Box<FrameError>),
    /// Reading or writing the stream failed.
    #[error("frame I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// A value could not be serialized as a JSON payload.
    #[error("frame JSON failed: {0}")]
    Json(#[from] serde_json::Error),
}

// === impl FrameError ===

impl FrameError {
    /// The refusal that failed a decoder, unwrapped from any [`FrameError::Failed`] layer.
    pub fn root(&self) -> &FrameError {
        match self {
            FrameError::Failed(cause) => cause.root(),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_bytes_round_trip_and_other_bytes_are_unknown() {
        for kind in FrameKind::ALL {
            assert_eq!(FrameKind::from_byte(kind.as_byte()), Some(kind));
        }
        let known: Vec<u8> = FrameKind::ALL.iter().map(|k| k.as_byte()).collect();
        assert_eq!(known, b"HSOEXT");
        for byte in 0..=u8::MAX {
            if !known.contains(&byte) {
                assert_eq!(FrameKind::from_byte(byte), None, "byte {byte:#04x}");
            }
        }
    }

    #[test]
    fn caps_match_the_reference() {
        assert_eq!(FrameKind::Hello.max_len(), 65_536);
        assert_eq!(FrameKind::Spec.max_len(), 1_048_576);
        assert_eq!(FrameKind::Stdout.max_len(), 65_536);
        assert_eq!(FrameKind::Stderr.max_len(), 65_536);
        assert_eq!(FrameKind::Exit.max_len(), 65_536);
        assert_eq!(FrameKind::Event.max_len(), 65_536);
    }

    #[test]
    fn encode_writes_type_byte_and_big_endian_length() {
        let bytes = encode(&Frame::stdout(&b"hi"[..])).unwrap();
        assert_eq!(bytes, b"O\x00\x00\x00\x02hi");
        let empty = encode(&Frame::stderr(Bytes::new())).unwrap();
        assert_eq!(empty, b"E\x00\x00\x00\x00");
        let big = encode(&Frame::new(FrameKind::Spec, vec![0u8; 0x0001_0203])).unwrap();
        assert_eq!(&big[..HEADER_LEN], b"S\x00\x01\x02\x03");
    }

    #[test]
    fn encode_refuses_one_byte_over_each_cap() {
        for kind in FrameKind::ALL {
            let max = kind.max_len();
            assert!(encode(&Frame::new(kind, vec![0u8; max])).is_ok(), "{kind}");
            let err = encode(&Frame::new(kind, vec![0u8; max + 1])).unwrap_err();
            assert!(
                matches!(err, FrameError::TooLarge { kind: k, len, max: m }
                    if k == kind && len == max + 1 && m == max),
                "{kind}: {err}"
            );
        }
    }

    #[test]
    fn json_frame_refuses_an_over_cap_value() {
        let long = "x".repeat(FrameKind::Exit.max_len());
        let err = Frame::json(FrameKind::Exit, &long).unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::TooLarge {
                    kind: FrameKind::Exit,
                    ..
                }
            ),
            "{err}"
        );
        let ok = Frame::json(FrameKind::Spec, &long).unwrap();
        assert_eq!(ok.payload.len(), long.len() + 2);
    }
}
