//! Fuzzes what chatd does with a user's image bytes: canonical base64, the JPEG structure walk
//! and the full decode and re-encode. None may panic; an accepted image must come out as a
//! complete JPEG within the edge and pixel limits.

#![no_main]

use atelier_chatd::images::{decode_canonical_base64, jpeg_info, reencode, MAX_IMAGE_EDGE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(bytes) = decode_canonical_base64(text) {
            // Canonical means exactly one spelling: the length follows from the bytes.
            assert_eq!(text.len(), bytes.len().div_ceil(3) * 4);
        }
    }
    let walked = jpeg_info(data);
    if let Ok(reencoded) = reencode(data) {
        let info = walked.expect("an accepted image has a readable structure");
        assert!(info.complete && info.width <= MAX_IMAGE_EDGE && info.height <= MAX_IMAGE_EDGE);
        let out = jpeg_info(&reencoded).expect("the re-encoding is a JPEG");
        assert!(out.complete);
    }
});
