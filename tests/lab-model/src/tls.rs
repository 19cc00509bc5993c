//! The lab's TLS: a certificate authority made at start, a server certificate it signs for the
//! lab hostnames, and the rustls server configuration (ring, ALPN `http/1.1` only).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

/// Why the certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused (a host that is not a DNS name or an address, a key failure).
    #[error("{0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the key or the protocol versions.
    #[error("{0}")]
    Config(#[from] rustls::Error),
}

/// The CA a client must trust and the server configuration it vouches for.
pub struct Certificates {
    /// The CA certificate, PEM: what `--ca-out` holds (`NODE_EXTRA_CA_CERTS` for Claude Code).
    pub ca_pem: String,
    /// The server side: the leaf for the hosts, then the CA.
    pub server: Arc<ServerConfig>,
}

/// A fresh CA and a server certificate naming `hosts` (an address becomes an IP SAN).
pub fn issue(hosts: &[String]) -> Result<Certificates, TlsError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Atelier lab model CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key)?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    if let Some(first) = hosts.first() {
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    // Strict verifiers (OpenSSL's X509_STRICT) want the issuer's key named in the leaf.
    params.use_authority_key_identifier_extension = true;
    let leaf = params.signed_by(&key, &ca, &ca_key)?;

    let chain = vec![
        CertificateDer::from(leaf.der().to_vec()),
        CertificateDer::from(ca.der().to_vec()),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    #[allow(
        deprecated,
        reason = "the lab's TLS needs no post-quantum key exchange, and ring is the provider the workspace builds; rustls deprecates ring's provider for lacking it"
    )]
    let mut server =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Certificates {
        ca_pem: pem("CERTIFICATE", ca.der()),
        server: Arc::new(server),
    })
}

/// `der` as PEM (RFC 7468): base64 in lines of 64 between the BEGIN and END lines, `\n`
/// line ends (Node reads either; files on this host use `\n`).
fn pem(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(label, der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn issues_a_pem_ca_and_an_http1_only_server() {
        let certificates = issue(&["lab.test".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        assert!(certificates
            .ca_pem
            .starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            certificates.server.alpn_protocols,
            vec![b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn pem_is_base64_in_lines_of_64() {
        assert_eq!(pem("X", b""), "-----BEGIN X-----\n-----END X-----\n");
        assert_eq!(pem("X", b"f"), "-----BEGIN X-----\nZg==\n-----END X-----\n");
        assert_eq!(
            pem("X", b"fo"),
            "-----BEGIN X-----\nZm8=\n-----END X-----\n"
        );
        assert_eq!(
            pem("X", b"foobar"),
            "-----BEGIN X-----\nZm9vYmFy\n-----END X-----\n"
        );
        let long = pem("X", &[0xff; 60]);
        let lines: Vec<&str> = long.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], "/".repeat(64));
        assert_eq!(lines[2], "/".repeat(16));
    }

    #[test]
    fn refuses_a_host_that_is_not_ascii() {
        assert!(issue(&["läb.test".to_owned()]).is_err());
    }
}
