//! The master key that seals provider secrets at rest: AES-256-GCM with
//! a fresh 12-byte nonce per secret, the 16-byte tag appended to the ciphertext, no associated
//! data. The key arrives as the `CHATD_MASTER_KEY` systemd credential (base64 of 32 bytes) and
//! is identified by a fingerprint — the first 16 hex digits of its SHA-256 — that reveals
//! nothing of it.

use std::fmt;

use aes_gcm::aead::{Aead, KeyInit, OsRng};
use aes_gcm::{AeadCore, Aes256Gcm, Key, Nonce};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The systemd credential that holds the master key.
pub const MASTER_KEY_CREDENTIAL: &str = "CHATD_MASTER_KEY";

/// The key length AES-256 takes.
const KEY_BYTES: usize = 32;

/// The nonce length of AES-GCM.
const NONCE_BYTES: usize = 12;

/// Why a master key or a sealed secret cannot be used. No variant carries key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MasterKeyError {
    /// The credential is not base64 of exactly 32 bytes.
    #[error("the master key must be base64 of exactly 32 bytes")]
    BadKey,
    /// A sealed secret does not open under this key (another key, or corruption).
    #[error("the secret could not be decrypted")]
    Undecryptable,
    /// Encryption failed (only if the cipher itself fails).
    #[error("the secret could not be encrypted")]
    Unsealable,
}

/// A secret as stored: the ciphertext with its tag, and the nonce.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Ciphertext followed by the 16-byte GCM tag.
    pub ciphertext: Vec<u8>,
    /// The 12-byte nonce.
    pub iv: Vec<u8>,
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("ciphertext_len", &self.ciphertext.len())
            .finish()
    }
}

/// The loaded master key.
pub struct MasterKey {
    cipher: Aes256Gcm,
    fingerprint: String,
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterKey")
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl MasterKey {
    /// The key from its credential text: base64 of exactly 32 bytes (surrounding whitespace
    /// ignored), in the standard alphabet an operator's `base64` writes or the unpadded URL-safe
    /// one of a key `atelier-provision` minted.
    pub fn from_base64(text: &str) -> Result<Self, MasterKeyError> {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let text = text.trim();
        let mut bytes = STANDARD
            .decode(text)
            .or_else(|_| URL_SAFE_NO_PAD.decode(text))
            .map_err(|_| MasterKeyError::BadKey)?;
        let key = Self::from_bytes(&bytes);
        bytes.iter_mut().for_each(|b| *b = 0);
        key
    }

    /// The key from its 32 raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, MasterKeyError> {
        if bytes.len() != KEY_BYTES {
            return Err(MasterKeyError::BadKey);
        }
        let digest = Sha256::digest(bytes);
        Ok(MasterKey {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(bytes)),
            fingerprint: hex::encode(&digest[..8]),
        })
    }

    /// The key's fingerprint: 16 hex digits of its SHA-256.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Seals `secret` under a fresh random nonce.
    pub fn seal(&self, secret: &str) -> Result<Sealed, MasterKeyError> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = self
            .cipher
            .encrypt(&nonce, secret.as_bytes())
            .map_err(|_| MasterKeyError::Unsealable)?;
        Ok(Sealed {
            ciphertext,
            iv: nonce.to_vec(),
        })
    }

    /// Opens a sealed secret; any tampering, another key, or bytes that are not UTF-8 fail.
    pub fn open(&self, sealed: &Sealed) -> Result<String, MasterKeyError> {
        if sealed.iv.len() != NONCE_BYTES {
            return Err(MasterKeyError::Undecryptable);
        }
        let plaintext = self
            .cipher
            .decrypt(Nonce::from_slice(&sealed.iv), sealed.ciphertext.as_slice())
            .map_err(|_| MasterKeyError::Undecryptable)?;
        String::from_utf8(plaintext).map_err(|_| MasterKeyError::Undecryptable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> MasterKey {
        MasterKey::from_bytes(&[byte; 32]).unwrap()
    }

    #[test]
    fn secrets_round_trip_under_fresh_nonces_and_nowhere_in_clear() {
        let master = key(7);
        let one = master.seal("sk-canary-123").unwrap();
        let two = master.seal("sk-canary-123").unwrap();
        assert_ne!(one.iv, two.iv);
        assert_ne!(one.ciphertext, two.ciphertext);
        assert_eq!(one.ciphertext.len(), "sk-canary-123".len() + 16);
        assert!(!one.ciphertext.windows(6).any(|w| w == b"canary"));
        assert_eq!(master.open(&one).unwrap(), "sk-canary-123");
        assert!(!format!("{one:?}{master:?}").contains("canary"));
    }

    #[test]
    fn another_key_or_a_flipped_bit_does_not_open() {
        let sealed = key(1).seal("secret").unwrap();
        assert_eq!(key(2).open(&sealed), Err(MasterKeyError::Undecryptable));
        let mut flipped = sealed.clone();
        flipped.ciphertext[0] ^= 1;
        assert_eq!(key(1).open(&flipped), Err(MasterKeyError::Undecryptable));
        let mut short_iv = sealed;
        short_iv.iv.pop();
        assert_eq!(key(1).open(&short_iv), Err(MasterKeyError::Undecryptable));
    }

    #[test]
    fn only_base64_of_32_bytes_is_a_key_and_the_fingerprint_is_stable() {
        let text = base64::engine::general_purpose::STANDARD.encode([9_u8; 32]);
        let master = MasterKey::from_base64(&format!("  {text}\n")).unwrap();
        // The same key as the provisioner mints it: unpadded, URL-safe.
        let minted = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([9_u8; 32]);
        assert_eq!(
            MasterKey::from_base64(&minted).unwrap().fingerprint(),
            master.fingerprint()
        );
        assert_eq!(master.fingerprint(), key(9).fingerprint());
        assert_eq!(master.fingerprint().len(), 16);
        assert_ne!(master.fingerprint(), key(8).fingerprint());
        assert!(!master.fingerprint().contains(&text[..8]));
        let cases = [
            ("empty", String::new()),
            (
                "31 bytes",
                base64::engine::general_purpose::STANDARD.encode([1_u8; 31]),
            ),
            (
                "33 bytes",
                base64::engine::general_purpose::STANDARD.encode([1_u8; 33]),
            ),
            ("not base64", "!".repeat(44)),
        ];
        for (name, text) in cases {
            assert_eq!(
                MasterKey::from_base64(&text).unwrap_err(),
                MasterKeyError::BadKey,
                "{name}"
            );
        }
    }
}
