//! Percent-encoding for ids put into URL paths: the image links chatd hands the browser and the
//! CMS routes it reads as the user.

/// `encodeURIComponent`: everything but `A-Za-z0-9-_.!~*'()` percent-encoded.
pub(crate) fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
