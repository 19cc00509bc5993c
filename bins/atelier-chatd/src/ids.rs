//! Ids for bridges and tool requests: 21 characters of the URL-safe alphabet, like `nanoid()`.

use std::io::Read as _;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A fresh random id of 21 URL-safe characters (126 bits).
pub fn new_id() -> String {
    let mut bytes = [0_u8; 21];
    if let Err(error) =
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))
    {
        // Ids are not secrets (bridges check their owner), but they must not collide: fall back
        // to the standard library's per-process random keys mixed with a counter.
        tracing::warn!(%error, "reading /dev/urandom failed; using the fallback id source");
        fallback(&mut bytes);
    }
    bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 63)]))
        .collect()
}

fn fallback(bytes: &mut [u8; 21]) {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = std::collections::hash_map::RandomState::new();
    for chunk in bytes.chunks_mut(8) {
        let mut hasher = state.build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let word = hasher.finish().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_21_url_safe_characters_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..200).map(|_| new_id()).collect();
        assert_eq!(ids.len(), 200);
        assert!(ids.iter().all(|id| id.len() == 21
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')));
        let mut bytes = [0_u8; 21];
        fallback(&mut bytes);
        assert_ne!(bytes, [0_u8; 21]);
    }
}
