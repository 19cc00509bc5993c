//! The sans-IO frame decoder: feed it bytes, take whole frames, and check the stream's end.

use bytes::Bytes;

use crate::frame::{Frame, FrameError, FrameKind, FramePart, HEADER_LEN};

/// Decodes a byte stream into [`Frame`]s without doing any I/O.
///
/// The decoder holds at most one frame: the 5-byte header, then a payload buffer of exactly
/// the declared length, allocated only after the header's type and length passed their cap.
/// [`Decoder::feed`] therefore takes bytes only up to the end of the current frame and says how
/// many it took; the caller offers the rest after taking the frame with
/// [`Decoder::next_frame`] ([`Decoder::decode`] runs that loop over a slice).
///
/// An unknown type byte or an over-cap length fails the decoder for good: the call that read
/// the header returns the refusal, and every later call returns [`FrameError::Failed`]
/// carrying it. A peer that sends a bad header is not speaking our protocol, and nothing after
/// it can be framed reliably.
///
/// ```
/// use atelier_proto::{encode, Decoder, Frame};
///
/// let wire = [encode(&Frame::stdout(&b"a"[..]))?, encode(&Frame::stderr(&b"b"[..]))?].concat();
/// let mut decoder = Decoder::new();
/// let mut input = &wire[..];
/// let mut frames = Vec::new();
/// while let Some(frame) = decoder.decode(&mut input)? {
///     frames.push(frame);
/// }
/// decoder.finish()?; // the stream ended between frames
/// assert_eq!(frames, [Frame::stdout(&b"a"[..]), Frame::stderr(&b"b"[..])]);
/// # Ok::<(), atelier_proto::FrameError>(())
/// ```
#[derive(Debug, Default)]
pub struct Decoder {
    header: [u8; HEADER_LEN],
    header_filled: usize,
    body: Option<Body>,
    ready: Option<Frame>,
    failure: Option<Refusal>,
}

/// The payload of a frame whose header was accepted.
#[derive(Debug)]
struct Body {
    kind: FrameKind,
    buf: Vec<u8>,
    filled: usize,
}

/// A refused header, kept so every later call can report it.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    UnknownKind(u8),
    TooLarge {
        kind: FrameKind,
        len: usize,
        max: usize,
    },
}

// === impl Refusal ===

impl Refusal {
    fn to_error(self) -> FrameError {
        match self {
            Refusal::UnknownKind(byte) => FrameError::UnknownKind(byte),
            Refusal::TooLarge { kind, len, max } => FrameError::TooLarge { kind, len, max },
        }
    }
}

// === impl Decoder ===

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Takes bytes from `input` up to the end of the current frame and returns how many it
    /// took.
    ///
    /// It takes nothing while a whole frame waits for [`Decoder::next_frame`]. When `input`
    /// completes a header, the header is checked at once, so a refused type or length is
    /// returned here without any payload being buffered.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, FrameError> {
        let mut taken = 0;
        loop {
            let spare = self.spare()?;
            let count = spare.len().min(input.len() - taken);
            if count == 0 {
                return Ok(taken);
            }
            spare[..count].copy_from_slice(&input[taken..taken + count]);
            taken += count;
            self.commit(count)?;
        }
    }

    /// Takes the frame completed by the bytes fed so far, if there is one.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        self.check_failed()?;
        Ok(self.ready.take())
    }

    /// Feeds from `input`, advancing it past the bytes taken, and returns the next whole frame.
    ///
    /// `Ok(None)` means `input` is used up without completing a frame.
    pub fn decode(&mut self, input: &mut &[u8]) -> Result<Option<Frame>, FrameError> {
        loop {
            if let Some(frame) = self.next_frame()? {
                return Ok(Some(frame));
            }
            if input.is_empty() {
                return Ok(None);
            }
            let taken = self.feed(input)?;
            *input = &input[taken..];
        }
    }

    /// Checks that the stream may end here: between frames, with nothing of a frame buffered.
    ///
    /// Call it at end of stream, after [`Decoder::next_frame`] returned `None`. A whole frame
    /// still waiting to be taken is not a truncation.
    pub fn finish(&self) -> Result<(), FrameError> {
        self.check_failed()?;
        if let Some(body) = &self.body {
            return Err(FrameError::Truncated {
                part: FramePart::Payload,
                received: HEADER_LEN + body.filled,
                expected: HEADER_LEN + body.buf.len(),
            });
        }
        if self.header_filled > 0 {
            return Err(FrameError::Truncated {
                part: FramePart::Header,
                received: self.header_filled,
                expected: HEADER_LEN,
            });
        }
        Ok(())
    }

    /// How many more bytes the current header or frame needs: 0 while a whole frame waits to
    /// be taken or after the decoder failed.
    pub fn wanted(&self) -> usize {
        if self.failure.is_some() || self.ready.is_some() {
            return 0;
        }
        match &self.body {
            Some(body) => body.buf.len() - body.filled,
            None => HEADER_LEN - self.header_filled,
        }
    }

    /// Returns true if and only if a refused header failed this decoder.
    pub fn is_failed(&self) -> bool {
        self.failure.is_some()
    }

    /// The unfilled part of the header or payload; empty while a whole frame waits.
    ///
    /// Readers copy into it directly and then [`Decoder::commit`] what they wrote.
    pub(crate) fn spare(&mut self) -> Result<&mut [u8], FrameError> {
        self.check_failed()?;
        if self.ready.is_some() {
            return Ok(&mut []);
        }
        Ok(match &mut self.body {
            Some(body) => &mut body.buf[body.filled..],
            None => &mut self.header[self.header_filled..],
        })
    }

    /// Records that the first `count` bytes of [`Decoder::spare`] were filled.
    pub(crate) fn commit(&mut self, count: usize) -> Result<(), FrameError> {
        match &mut self.body {
            Some(body) => {
                body.filled = (body.filled + count).min(body.buf.len());
                if body.filled == body.buf.len() {
                    self.complete_body();
                }
                Ok(())
            }
            None => {
                self.header_filled = (self.header_filled + count).min(HEADER_LEN);
                if self.header_filled == HEADER_LEN {
                    self.accept_header()?;
                }
                Ok(())
            }
        }
    }

    /// Checks the complete header and prepares the payload buffer, or fails the decoder.
    fn accept_header(&mut self) -> Result<(), FrameError> {
        let [type_byte, len @ ..] = self.header;
        let len = u32::from_be_bytes(len);
        let Some(kind) = FrameKind::from_byte(type_byte) else {
            return Err(self.fail(Refusal::UnknownKind(type_byte)));
        };
        let max = kind.max_len();
        // A length beyond usize cannot fit in memory anyway; saturating keeps it over the cap.
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > max {
            return Err(self.fail(Refusal::TooLarge { kind, len, max }));
        }
        self.header_filled = 0;
        self.body = Some(Body {
            kind,
            buf: vec![0; len],
            filled: 0,
        });
        if len == 0 {
            self.complete_body();
        }
        Ok(())
    }

    fn complete_body(&mut self) {
        if let Some(body) = self.body.take() {
            self.ready = Some(Frame {
                kind: body.kind,
                payload: Bytes::from(body.buf),
            });
        }
    }

    fn fail(&mut self, refusal: Refusal) -> FrameError {
        self.failure = Some(refusal);
        refusal.to_error()
    }

    fn check_failed(&self) -> Result<(), FrameError> {
        match self.failure {
            Some(refusal) => Err(FrameError::Failed(Box::new(refusal.to_error()))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
