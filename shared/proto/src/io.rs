//! Reading and writing frames over tokio's `AsyncRead` and `AsyncWrite`.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::decoder::Decoder;
use crate::frame::{encode, Frame, FrameError};

/// Reads the next frame from `reader`, keeping partial-frame state in `decoder`.
///
/// Returns `Ok(None)` when the stream ends cleanly between frames, and
/// [`FrameError::Truncated`] when it ends inside a header or payload. Reads go straight into
/// the decoder's header or payload buffer and never past the end of the current frame, so the
/// bytes of the next frame stay in `reader`. Wrap an unbuffered reader in a
/// `tokio::io::BufReader` to save system calls.
///
/// Cancel safety: dropping the future loses no bytes; the decoder keeps everything read so
/// far, so calling again with the same `decoder` resumes the frame.
pub async fn read_frame<R>(
    reader: &mut R,
    decoder: &mut Decoder,
) -> Result<Option<Frame>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    loop {
        if let Some(frame) = decoder.next_frame()? {
            return Ok(Some(frame));
        }
        // Not failed and no frame waiting, so the spare buffer is never empty here and a
        // zero-length read can only mean end of stream.
        let read = reader.read(decoder.spare()?).await?;
        if read == 0 {
            decoder.finish()?;
            return Ok(None);
        }
        decoder.commit(read)?;
    }
}

/// Writes `frame` to `writer` and flushes it, refusing a payload over its kind's cap.
pub async fn write_frame<W>(writer: &mut W, frame: &Frame) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    let bytes = encode(frame)?;
    writer.write_all(&bytes).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests;
