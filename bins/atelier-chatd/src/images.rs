//! User images: the server trusts nothing the browser did. A cheap
//! preflight checks the message shape, canonical base64, the decoded size and the JPEG magic;
//! then, under the conversation's writer lease, each image's structure and dimensions are read
//! before any pixel is decoded, and the image is fully decoded (EXIF orientation applied) and
//! re-encoded, which drops every metadata segment and refuses truncated data.
//!
//! Parts: [`preflight`], [`canonicalize`], [`reencode`], [`jpeg_info`] (the structure walk),
//! [`decode_canonical_base64`].

use std::io::Cursor;

use base64::Engine as _;
use image::codecs::jpeg::{JpegDecoder, JpegEncoder};
use image::{DynamicImage, ImageDecoder, Limits};

use crate::store::ContentBlock;

/// The most images one message may carry.
pub const MAX_IMAGES_PER_MESSAGE: usize = 8;

/// The largest image, decoded, in bytes.
pub const MAX_IMAGE_BYTES: usize = 1_500_000;

/// The longest edge of an image, in pixels.
pub const MAX_IMAGE_EDGE: u32 = 1568;

/// The most pixels of an image.
pub const MAX_IMAGE_PIXELS: u64 = 1_500_000;

/// The JPEG qualities tried in turn when re-encoding.
const QUALITIES: [u8; 4] = [85, 74, 64, 55];

/// How many sizes are tried (the original's, then smaller ones) before giving up.
const SIZE_PASSES: usize = 3;

/// The decoder's allocation ceiling: a full-size RGB image with room for the decoder's own
/// buffers; a header that lies about its size cannot make it allocate more.
const DECODE_ALLOC_LIMIT: u64 = 64 * 1024 * 1024;

/// Why a message's images are refused; `Display` is the answer's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// More than one text block.
    #[error("A message can contain at most one text block.")]
    TooManyTexts,
    /// More than eight images.
    #[error("A message can contain at most 8 images.")]
    TooManyImages,
    /// Neither text nor an image.
    #[error("Message must contain text or an image.")]
    Empty,
    /// The base64 is not canonical.
    #[error("Image data must be canonical base64.")]
    NotCanonical,
    /// Over 1.5 MB once decoded (413).
    #[error("Image exceeds the 1.5 MB limit.")]
    TooLarge,
    /// The bytes do not start like a JPEG.
    #[error("Image data is not a JPEG.")]
    NotJpeg,
    /// The JPEG structure cannot be read.
    #[error("Image data could not be decoded.")]
    Undecodable,
    /// The JPEG has no usable frame header.
    #[error("Image data is not a valid JPEG.")]
    NotValidJpeg,
    /// Over 1568 px on an edge or 1,500,000 pixels (413).
    #[error("Image dimensions exceed the 1568px / 1,500,000px limit.")]
    DimensionsTooLarge,
    /// The pixel data is truncated or corrupt.
    #[error("Image data could not be fully decoded.")]
    NotFullyDecodable,
    /// Even smaller re-encodings stay over 1.5 MB (413).
    #[error("Image could not be reduced below the 1.5 MB limit.")]
    Irreducible,
}

impl ImageError {
    /// Returns true if and only if the refusal is answered 413 rather than 400.
    pub fn is_too_large(self) -> bool {
        matches!(
            self,
            ImageError::TooLarge | ImageError::DimensionsTooLarge | ImageError::Irreducible
        )
    }
}

/// Decodes standard padded base64, refusing anything that would not re-encode to the same
/// text (missing or stray padding, non-zero unused bits, other alphabets, whitespace).
pub fn decode_canonical_base64(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || text.len() % 4 != 0 {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    (base64::engine::general_purpose::STANDARD.encode(&bytes) == text).then_some(bytes)
}

/// The message's blocks after the cheap checks, text first and blank text dropped.
pub fn preflight(content: Vec<ContentBlock>) -> Result<Vec<ContentBlock>, ImageError> {
    let mut text = None;
    let mut images = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text { text: t } => {
                if text.is_some() {
                    return Err(ImageError::TooManyTexts);
                }
                text = Some(t);
            }
            ContentBlock::Image { mime_type, data } => images.push((mime_type, data)),
            // The chat body's schema admits neither; a stored message never starts this way.
            ContentBlock::ToolCall { .. } | ContentBlock::ToolResult { .. } => {
                return Err(ImageError::Empty)
            }
        }
    }
    if images.len() > MAX_IMAGES_PER_MESSAGE {
        return Err(ImageError::TooManyImages);
    }
    let text = text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    if text.is_none() && images.is_empty() {
        return Err(ImageError::Empty);
    }
    for (_, data) in &images {
        check_bytes(data)?;
    }
    let mut out: Vec<ContentBlock> = text
        .map(|text| ContentBlock::Text { text })
        .into_iter()
        .collect();
    out.extend(
        images
            .into_iter()
            .map(|(mime_type, data)| ContentBlock::Image { mime_type, data }),
    );
    Ok(out)
}

fn check_bytes(data: &str) -> Result<Vec<u8>, ImageError> {
    let bytes = decode_canonical_base64(data).ok_or(ImageError::NotCanonical)?;
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge);
    }
    if !bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Err(ImageError::NotJpeg);
    }
    Ok(bytes)
}

/// Re-encodes every image of a preflighted message, one after the other, each on the blocking
/// pool. Dropping the future between two images stops the rest from starting.
pub async fn canonicalize(content: Vec<ContentBlock>) -> Result<Vec<ContentBlock>, ImageError> {
    let mut out = Vec::with_capacity(content.len());
    for block in content {
        match block {
            ContentBlock::Image { data, .. } => {
                let bytes = check_bytes(&data)?;
                let encoded = tokio::task::spawn_blocking(move || reencode(&bytes))
                    .await
                    .map_err(|_| ImageError::NotFullyDecodable)??;
                out.push(ContentBlock::Image {
                    mime_type: "image/jpeg".to_owned(),
                    data: base64::engine::general_purpose::STANDARD.encode(encoded),
                });
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// What the structure walk read of a JPEG without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JpegInfo {
    /// Width in pixels, from the frame header.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Colour components.
    pub components: u8,
    /// Returns true if and only if the entropy-coded data reaches the end-of-image marker.
    pub complete: bool,
}

/// Why a JPEG's structure cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JpegStructureError {
    /// No start-of-image marker.
    #[error("no start-of-image marker")]
    NoStart,
    /// A segment runs past the end of the data.
    #[error("a segment runs past the end")]
    Truncated,
    /// A segment's length is below its own length field.
    #[error("a segment length is too short")]
    BadLength,
    /// The data ended, or the image ended, before a frame header.
    #[error("no frame header")]
    NoFrame,
    /// Something other than a marker where one must be.
    #[error("expected a marker")]
    NotAMarker,
}

/// Walks a JPEG's marker segments: the frame header's dimensions, and whether the scan data
/// reaches the end-of-image marker. Reads no pixels and allocates nothing.
pub fn jpeg_info(bytes: &[u8]) -> Result<JpegInfo, JpegStructureError> {
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return Err(JpegStructureError::NoStart);
    }
    let mut frame: Option<(u32, u32, u8)> = None;
    let mut at = 2;
    loop {
        // A marker: one or more 0xFF fill bytes, then its code.
        if bytes.get(at) != Some(&0xFF) {
            return match bytes.get(at) {
                None if frame.is_some() => Ok(info(frame, false)),
                None => Err(JpegStructureError::NoFrame),
                Some(_) => Err(JpegStructureError::NotAMarker),
            };
        }
        while bytes.get(at) == Some(&0xFF) {
            at += 1;
        }
        let Some(&code) = bytes.get(at) else {
            return frame
                .map(|f| info(Some(f), false))
                .ok_or(JpegStructureError::NoFrame);
        };
        at += 1;
        match code {
            0xD9 => {
                return frame
                    .map(|f| info(Some(f), true))
                    .ok_or(JpegStructureError::NoFrame)
            }
            // Standalone markers carry no length.
            0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        let length = match bytes.get(at..at + 2) {
            Some(&[high, low]) => usize::from(u16::from_be_bytes([high, low])),
            _ => return Err(JpegStructureError::Truncated),
        };
        if length < 2 {
            return Err(JpegStructureError::BadLength);
        }
        let segment = bytes
            .get(at + 2..at + length)
            .ok_or(JpegStructureError::Truncated)?;
        at += length;
        match code {
            // Start of frame: every SOFn but DHT (C4), JPG (C8) and DAC (CC).
            0xC0..=0xCF if !matches!(code, 0xC4 | 0xC8 | 0xCC) => {
                if let [_precision, h1, h0, w1, w0, components, ..] = *segment {
                    frame = Some((
                        u32::from(u16::from_be_bytes([w1, w0])),
                        u32::from(u16::from_be_bytes([h1, h0])),
                        components,
                    ));
                } else {
                    return Err(JpegStructureError::Truncated);
                }
            }
            // Start of scan: entropy-coded data follows, up to the next real marker.
            0xDA => {
                if frame.is_none() {
                    return Err(JpegStructureError::NoFrame);
                }
                loop {
                    match bytes.get(at..at + 2) {
                        None => return Ok(info(frame, false)),
                        // A stuffed zero or a restart marker stays inside the scan.
                        Some(&[0xFF, next]) if next == 0x00 || (0xD0..=0xD7).contains(&next) => {
                            at += 2
                        }
                        Some(&[0xFF, 0xFF]) => at += 1,
                        Some(&[0xFF, _]) => break,
                        Some(_) => at += 1,
                    }
                }
            }
            _ => {}
        }
    }
}

fn info(frame: Option<(u32, u32, u8)>, complete: bool) -> JpegInfo {
    let (width, height, components) = frame.unwrap_or_default();
    JpegInfo {
        width,
        height,
        components,
        complete,
    }
}

/// Fully decodes a JPEG (EXIF orientation applied) and re-encodes it without metadata, at
/// the first quality that fits 1.5 MB, shrinking it when none does.
pub fn reencode(bytes: &[u8]) -> Result<Vec<u8>, ImageError> {
    let info = jpeg_info(bytes).map_err(|_| ImageError::Undecodable)?;
    if info.width == 0 || info.height == 0 {
        return Err(ImageError::NotValidJpeg);
    }
    if info.width > MAX_IMAGE_EDGE
        || info.height > MAX_IMAGE_EDGE
        || u64::from(info.width) * u64::from(info.height) > MAX_IMAGE_PIXELS
    {
        return Err(ImageError::DimensionsTooLarge);
    }
    if !info.complete {
        return Err(ImageError::NotFullyDecodable);
    }
    let mut decoder =
        JpegDecoder::new(Cursor::new(bytes)).map_err(|_| ImageError::NotFullyDecodable)?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_EDGE);
    limits.max_image_height = Some(MAX_IMAGE_EDGE);
    limits.max_alloc = Some(DECODE_ALLOC_LIMIT);
    decoder
        .set_limits(limits)
        .map_err(|_| ImageError::DimensionsTooLarge)?;
    // The decoder's own view must agree with the walk: a second frame header cannot smuggle
    // in other dimensions.
    if decoder.dimensions() != (info.width, info.height) {
        return Err(ImageError::NotFullyDecodable);
    }
    let orientation = decoder
        .orientation()
        .map_err(|_| ImageError::NotFullyDecodable)?;
    let mut image =
        DynamicImage::from_decoder(decoder).map_err(|_| ImageError::NotFullyDecodable)?;
    image.apply_orientation(orientation);
    // JPEG carries no alpha; every decoded colour space becomes plain RGB.
    let mut image = DynamicImage::ImageRgb8(image.to_rgb8());
    let mut last_size = 0;
    for pass in 0..SIZE_PASSES {
        if pass > 0 {
            let scale = ((MAX_IMAGE_BYTES as f64 / last_size as f64).sqrt() * 0.9).max(0.5);
            let width = ((f64::from(image.width()) * scale) as u32).max(1);
            let height = ((f64::from(image.height()) * scale) as u32).max(1);
            image = image.resize(width, height, image::imageops::FilterType::Triangle);
        }
        for quality in QUALITIES {
            let mut out = Vec::new();
            JpegEncoder::new_with_quality(&mut out, quality)
                .encode_image(&image)
                .map_err(|_| ImageError::NotFullyDecodable)?;
            if out.len() <= MAX_IMAGE_BYTES {
                return Ok(out);
            }
            last_size = out.len();
        }
    }
    Err(ImageError::Irreducible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_base64_decodes() {
        assert_eq!(
            decode_canonical_base64("/9j/"),
            Some(vec![0xFF, 0xD8, 0xFF])
        );
        assert_eq!(decode_canonical_base64("TWE="), Some(b"Ma".to_vec()));
        assert_eq!(decode_canonical_base64("TQ=="), Some(b"M".to_vec()));
        for refused in [
            "",
            "/9j",
            "/9j/4B==",
            "/9j/4A=A",
            "TQ==TWFu",
            "/9j/4A===",
            "TW E",
            "_-8=",
        ] {
            assert_eq!(decode_canonical_base64(refused), None, "{refused}");
        }
    }

    #[test]
    fn the_walk_reads_dimensions_and_completeness() {
        let sof = [
            0xFF, 0xC0, 0x00, 0x0B, 8, 0x01, 0x00, 0x02, 0x00, 1, 1, 0x11, 0,
        ];
        let sos = [0xFF, 0xDA, 0x00, 0x08, 1, 1, 0, 0, 63, 0];
        let mut jpeg = vec![0xFF, 0xD8];
        jpeg.extend_from_slice(&sof);
        jpeg.extend_from_slice(&sos);
        jpeg.extend_from_slice(&[0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD3, 0x56]);
        let mut complete = jpeg.clone();
        complete.extend_from_slice(&[0xFF, 0xD9]);
        assert_eq!(
            jpeg_info(&complete),
            Ok(JpegInfo {
                width: 512,
                height: 256,
                components: 1,
                complete: true
            })
        );
        assert!(!jpeg_info(&jpeg).unwrap().complete);
        assert_eq!(
            jpeg_info(&complete[..8]),
            Err(JpegStructureError::Truncated)
        );
        assert_eq!(
            jpeg_info(b"\xFF\xD8\xFF\xD9"),
            Err(JpegStructureError::NoFrame)
        );
        assert_eq!(jpeg_info(b"\x89PNG"), Err(JpegStructureError::NoStart));
        assert_eq!(
            jpeg_info(b"\xFF\xD8\xFF\xE0\x00\x01"),
            Err(JpegStructureError::BadLength)
        );
        assert_eq!(
            jpeg_info(b"\xFF\xD8\x00"),
            Err(JpegStructureError::NotAMarker)
        );
    }
}
