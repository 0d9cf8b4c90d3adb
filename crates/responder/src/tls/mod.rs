//! Server TLS for DoT, DoH, DoH/3 and DoQ: the certificate (from PEM files, or a CA and a
//! leaf generated at start with a chosen key type) and the rustls server configurations
//! built from it, one per ALPN set, with tickets, session cache and 0-RTT as configured.
//!
//! One crypto provider, ring, as in the generator. ring cannot generate RSA keys, so RSA
//! keys come from the pure-Rust `rsa` crate and are handed to rcgen (which signs with ring)
//! as PKCS#8.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{NoServerSessionStorage, ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;

pub(crate) mod handshaker;
pub(crate) use handshaker::Handshaker;

/// Key type of a generated certificate (and of its CA): the ones study 004 compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyType {
    /// RSA 2048-bit, signatures RSA-PSS/PKCS#1 with SHA-256.
    Rsa2048,
    /// RSA 3072-bit.
    Rsa3072,
    /// ECDSA P-256 with SHA-256 (the default).
    #[default]
    P256,
    /// Ed25519.
    Ed25519,
}

impl KeyType {
    /// The flag value: `rsa2048`, `rsa3072`, `p256`, `ed25519`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::Rsa2048 => "rsa2048",
            KeyType::Rsa3072 => "rsa3072",
            KeyType::P256 => "p256",
            KeyType::Ed25519 => "ed25519",
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyType {
    type Err = String;
    fn from_str(s: &str) -> Result<KeyType, String> {
        match s.to_ascii_lowercase().as_str() {
            "rsa2048" | "rsa-2048" => Ok(KeyType::Rsa2048),
            "rsa3072" | "rsa-3072" => Ok(KeyType::Rsa3072),
            "p256" | "p-256" | "ecdsa" => Ok(KeyType::P256),
            "ed25519" => Ok(KeyType::Ed25519),
            _ => Err(format!("'{s}': expected one of rsa2048, rsa3072, p256, ed25519")),
        }
    }
}

/// Where the server certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// A CA and a leaf generated at start (in memory), keys of this type.
    Generate(KeyType),
    /// A CA, an intermediate it signs and a leaf the intermediate signs, generated at start,
    /// the leaf carrying extra names until the chain served (leaf and intermediate) is at least
    /// `bytes` long (DER): a large chain, as the servers of seeds/002 had, whose first QUIC
    /// flight exceeds three times the client's Initial (`--cert-chain-bytes`).
    GenerateChain {
        /// Key type of all three.
        key: KeyType,
        /// The least size of the chain served, DER bytes.
        bytes: usize,
    },
    /// PEM files: the certificate chain (leaf first) and its private key (PKCS#8, PKCS#1 or SEC1).
    Files {
        /// Certificate chain, PEM.
        cert: PathBuf,
        /// Private key, PEM.
        key: PathBuf,
    },
}

impl Default for CertSource {
    fn default() -> Self {
        CertSource::Generate(KeyType::default())
    }
}

/// TLS settings shared by DoT, DoH, DoH/3 and DoQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate (default: generated, P-256).
    pub cert: CertSource,
    /// Write the generated CA certificate (PEM) here, for clients to trust (`--ca-out`).
    pub ca_out: Option<PathBuf>,
    /// Session resumption: TLS 1.3 tickets (stateless, or stateful with 0-RTT) and the TLS 1.2
    /// session cache. Off: no tickets, no cache, every handshake is a full one (default on).
    pub tickets: bool,
    /// Accept TLS 1.3 early data and QUIC 0-RTT (needs `tickets`; resumption then uses a
    /// server-side session cache, as rustls allows 0-RTT only with stateful resumption).
    pub zero_rtt: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig { cert: CertSource::default(), ca_out: None, tickets: true, zero_rtt: false }
    }
}

/// The certificate chain and key served, and the CA that signed it when generated.
pub(crate) struct Material {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The generated CA certificate, PEM; None with certificates from files.
    pub ca_pem: Option<String>,
}

/// Handshakes counted by the rustls hooks of the QUIC configurations (quinn does not say
/// whether a server handshake resumed).
#[derive(Debug, Default)]
pub(crate) struct TlsCounters {
    pub quic_resumed: AtomicU64,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads or generates the certificate. `listen` is added to the generated leaf's SANs.
pub(crate) fn material(cfg: &TlsConfig, listen: IpAddr) -> Result<Material, String> {
    match &cfg.cert {
        CertSource::Files { cert, key } => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("--cert {}: {e}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("--cert {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!("--cert {}: no PEM certificate in it", cert.display()));
            }
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--key {}: {e}", key.display()))?;
            Ok(Material { chain, key, ca_pem: None })
        }
        CertSource::Generate(kt) => generate(*kt, listen, None),
        CertSource::GenerateChain { key, bytes } => generate(*key, listen, Some(*bytes)),
    }
}

/// A key pair of this type, for rcgen.
fn key_pair(kt: KeyType) -> Result<rcgen::KeyPair, String> {
    let bits = match kt {
        KeyType::P256 => {
            return rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())
        }
        KeyType::Ed25519 => return rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| e.to_string()),
        KeyType::Rsa2048 => 2048,
        KeyType::Rsa3072 => 3072,
    };
    use rsa::pkcs8::EncodePrivateKey;
    let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, bits).map_err(|e| format!("RSA key: {e}"))?;
    let der = key.to_pkcs8_der().map_err(|e| format!("RSA key: {e}"))?;
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(der.as_bytes()), &rcgen::PKCS_RSA_SHA256)
        .map_err(|e| format!("RSA key: {e}"))
}

/// The most a chain may be (a TLS handshake message is at most 16 MB, but rustls's clients
/// take at most 64 KB).
pub const MAX_CHAIN_BYTES: usize = 60_000;

/// A CA (CA:TRUE) and a leaf it signs (CA:FALSE, serverAuth, SANs localhost, the listen
/// address, 127.0.0.1, ::1), both with keys of type `kt`. With `chain_bytes`, an intermediate
/// CA between them, and the leaf padded with names (`pad-N-HEX.volley.invalid`, hex of a hash:
/// not compressible) until leaf and intermediate together are at least that many bytes.
fn generate(kt: KeyType, listen: IpAddr, chain_bytes: Option<usize>) -> Result<Material, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyUsagePurpose, SanType,
    };
    let err = |e: rcgen::Error| format!("generating the {kt} certificate: {e}");
    // RSA key generation takes a while: make both keys at once.
    let (ca_key, leaf_key) = std::thread::scope(|s| {
        let ca = s.spawn(|| key_pair(kt));
        let leaf = key_pair(kt);
        (ca.join().unwrap_or_else(|_| Err("key generation panicked".into())), leaf)
    });
    let (ca_key, leaf_key) = (ca_key?, leaf_key?);

    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, format!("volley responder CA ({kt})"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_before = rcgen::date_time_ymd(2024, 1, 1);
    ca.not_after = rcgen::date_time_ymd(2099, 12, 31);
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    let root = Issuer::new(ca, ca_key);
    let mut intermediate_der = None;
    let issuer = match chain_bytes {
        None => root,
        Some(n) => {
            if n > MAX_CHAIN_BYTES {
                return Err(format!("a certificate chain of {n} bytes: at most {MAX_CHAIN_BYTES}"));
            }
            let key = key_pair(kt)?;
            let mut p = CertificateParams::default();
            p.distinguished_name.push(DnType::CommonName, format!("volley responder intermediate ({kt})"));
            p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
            p.not_before = rcgen::date_time_ymd(2024, 1, 1);
            p.not_after = rcgen::date_time_ymd(2099, 12, 31);
            intermediate_der = Some(p.signed_by(&key, &root).map_err(err)?.der().clone());
            Issuer::new(p, key)
        }
    };

    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).map_err(err)?;
    leaf.distinguished_name.push(DnType::CommonName, "localhost");
    let mut ips = vec![listen, IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)];
    ips.retain(|ip| !ip.is_unspecified());
    ips.dedup();
    leaf.subject_alt_names.extend(ips.into_iter().map(SanType::IpAddress));
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if matches!(kt, KeyType::Rsa2048 | KeyType::Rsa3072) {
        leaf.key_usages.push(KeyUsagePurpose::KeyEncipherment);
    }
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = rcgen::date_time_ymd(2024, 1, 1);
    leaf.not_after = rcgen::date_time_ymd(2099, 12, 31);
    let mut leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(err)?;
    let mut chain = vec![leaf_cert.der().clone()];
    if let (Some(n), Some(inter)) = (chain_bytes, intermediate_der) {
        // Each name adds about its length and a few bytes of DER; add, sign, measure, again.
        let mut pads = 0usize;
        loop {
            let size = leaf_cert.der().len() + inter.len();
            if size >= n {
                break;
            }
            pads += (n - size).div_ceil(60).max(1);
            let mut p = leaf.clone();
            p.subject_alt_names.extend((0..pads).map(|i| {
                SanType::DnsName(
                    format!("pad-{i}-{:016x}{:016x}.volley.invalid", pad_hash(i as u64), pad_hash(!(i as u64)))
                        .try_into()
                        .expect("a valid name"),
                )
            }));
            leaf_cert = p.signed_by(&leaf_key, &issuer).map_err(err)?;
        }
        chain = vec![leaf_cert.der().clone(), inter];
    }
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    Ok(Material { chain, key, ca_pem: Some(ca_cert.pem()) })
}

/// A 64-bit mix (splitmix64) of `i`: the padding names' letters.
fn pad_hash(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Counts successful ticket decryptions (resumed QUIC handshakes with stateless tickets).
#[derive(Debug)]
struct CountingTicketer {
    inner: Arc<dyn ProducesTickets>,
    counters: Arc<TlsCounters>,
}

impl ProducesTickets for CountingTicketer {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }
    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.inner.encrypt(plain)
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let r = self.inner.decrypt(cipher);
        if r.is_some() {
            self.counters.quic_resumed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

/// Counts sessions found in the cache (resumed QUIC handshakes with stateful resumption).
#[derive(Debug)]
struct CountingStore {
    inner: Arc<dyn StoresServerSessions>,
    counters: Arc<TlsCounters>,
}

impl StoresServerSessions for CountingStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let r = self.inner.get(key);
        if r.is_some() {
            self.counters.quic_resumed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let r = self.inner.take(key);
        if r.is_some() {
            self.counters.quic_resumed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

/// A rustls server configuration for `alpn`. QUIC configurations are TLS 1.3 only, take
/// early data of any size when 0-RTT is on (as QUIC requires) and count resumptions.
pub(crate) fn server_config(
    m: &Material,
    cfg: &TlsConfig,
    alpn: &[&[u8]],
    quic: Option<&Arc<TlsCounters>>,
) -> Result<Arc<ServerConfig>, String> {
    let versions: &[&'static rustls::SupportedProtocolVersion] =
        if quic.is_some() { &[&rustls::version::TLS13] } else { &[&rustls::version::TLS13, &rustls::version::TLS12] };
    let mut c = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(m.chain.clone(), m.key.clone_key())
        .map_err(|e| format!("the certificate and key do not make a TLS server: {e}"))?;
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    if !cfg.tickets {
        c.session_storage = Arc::new(NoServerSessionStorage {});
        c.send_tls13_tickets = 0;
    } else if cfg.zero_rtt {
        // 0-RTT needs stateful resumption: no ticketer, sessions in a server-side cache.
        c.session_storage = ServerSessionMemoryCache::new(1 << 16);
        c.max_early_data_size = if quic.is_some() { u32::MAX } else { 1 << 16 };
    } else {
        c.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS ticketer: {e}"))?;
        c.session_storage = ServerSessionMemoryCache::new(1 << 16);
    }
    if let Some(counters) = quic {
        c.session_storage = Arc::new(CountingStore { inner: c.session_storage.clone(), counters: counters.clone() });
        if c.ticketer.enabled() {
            c.ticketer = Arc::new(CountingTicketer { inner: c.ticketer.clone(), counters: counters.clone() });
        }
    }
    Ok(Arc::new(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn key_type_names() {
        for kt in [KeyType::Rsa2048, KeyType::Rsa3072, KeyType::P256, KeyType::Ed25519] {
            assert_eq!(kt.as_str().parse::<KeyType>(), Ok(kt));
        }
        assert!("rsa1024".parse::<KeyType>().is_err());
    }

    /// A chain of a chosen size: leaf and intermediate, at least that long, and valid (a
    /// rustls client that trusts the CA accepts it for localhost).
    #[test]
    fn a_chain_of_a_chosen_size_verifies() {
        let small = material(&TlsConfig::default(), IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let small_len: usize = small.chain.iter().map(|c| c.len()).sum();
        assert!(small_len < 1000, "{small_len}");
        for bytes in [2000, 6000, 12_000] {
            let cfg =
                TlsConfig { cert: CertSource::GenerateChain { key: KeyType::P256, bytes }, ..TlsConfig::default() };
            let m = material(&cfg, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
            let len: usize = m.chain.iter().map(|c| c.len()).sum();
            assert_eq!(m.chain.len(), 2);
            assert!(len >= bytes && len < bytes + 200, "{len} for {bytes}");
            let mut roots = rustls::RootCertStore::empty();
            let ca = CertificateDer::from_pem_slice(m.ca_pem.as_ref().unwrap().as_bytes()).unwrap();
            roots.add(ca).unwrap();
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            verifier
                .verify_server_cert(
                    &m.chain[0],
                    &m.chain[1..],
                    &rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                    &[],
                    rustls::pki_types::UnixTime::now(),
                )
                .unwrap_or_else(|e| panic!("{bytes}: {e}"));
        }
        let too_big = TlsConfig {
            cert: CertSource::GenerateChain { key: KeyType::P256, bytes: MAX_CHAIN_BYTES + 1 },
            ..TlsConfig::default()
        };
        assert!(material(&too_big, IpAddr::V4(Ipv4Addr::LOCALHOST)).is_err());
    }
}
