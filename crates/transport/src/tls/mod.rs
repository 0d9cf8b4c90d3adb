//! Client TLS for DoT, DoH and QUIC: settings as a plain struct, turned into a rustls
//! `ClientConfig` with the transport's ALPN. One config (and so one session store for
//! resumption) per settings and ALPN per worker thread, so a reconnect can resume.
//!
//! One crypto provider, ring, serves rustls and quinn; [`install_crypto_provider`] makes it
//! the process default at start.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use volley_metrics::ErrorKind;

/// Which TLS versions a client offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsVersion {
    /// TLS 1.2 only.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

/// TLS settings of a run, as the flags give them. `Default`: verification against the
/// system roots, TLS 1.3 and 1.2 offered (1.3 preferred), resumption on, 0-RTT off.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsSettings {
    /// Server name sent (SNI) and verified; None: the target's host when it is a name, no
    /// SNI (verification against the IP address SAN) when it is an address.
    pub sni: Option<String>,
    /// Trust these PEM certificates instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Skip certificate verification (signatures are still checked).
    pub insecure: bool,
    /// Only this version; None: TLS 1.3 and 1.2, 1.3 preferred (QUIC: 1.3 always).
    pub version: Option<TlsVersion>,
    /// Keep session tickets and resume with them on reconnects.
    pub resume: bool,
    /// Send queries as early data (TLS 1.3 0-RTT, QUIC 0-RTT) when a ticket allows it.
    pub zero_rtt: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings { sni: None, ca_file: None, insecure: false, version: None, resume: true, zero_rtt: false }
    }
}

/// Why a TLS client configuration could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsConfigError(pub String);

/// Makes ring the process-wide rustls crypto provider. Call once at start, before any TLS
/// or QUIC use; later calls (or a provider installed by someone else) are harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<CryptoProvider> {
    thread_local! {
        static P: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    }
    P.with(Arc::clone)
}

fn system_roots() -> Result<Arc<RootCertStore>, TlsConfigError> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, TlsConfigError>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsConfigError(
                    "no trusted root certificates found in the system store (/etc/ssl/certs): use --ca FILE or --insecure"
                        .into(),
                ));
            }
            Ok(Arc::new(roots))
        })
        .clone()
}

fn file_roots(path: &PathBuf) -> Result<Arc<RootCertStore>, TlsConfigError> {
    let bad = |why: String| TlsConfigError(format!("--ca {}: {why}", path.display()));
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))?;
    for c in certs {
        let c = c.map_err(|e| bad(e.to_string()))?;
        roots.add(c).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(Arc::new(roots))
}

/// Checks that the settings make a usable client configuration (CA file readable, roots
/// present): for the command line, before a run starts.
pub fn check(s: &TlsSettings, quic: bool) -> Result<(), TlsConfigError> {
    build(s, &[], quic).map(|_| ())
}

/// The client configuration for these settings and ALPN protocols, shared by every
/// connection of this thread (one session store, so reconnects resume). QUIC configurations
/// (`quic`) verify certificates through a [`SeenVerify`], so that a connection can tell a
/// full handshake from a resumed one ([`SeenVerify::connection`]).
pub fn client_config(s: &TlsSettings, alpn: &[&[u8]], quic: bool) -> Result<Arc<ClientConfig>, TlsConfigError> {
    type Cache = Vec<((TlsSettings, Vec<Vec<u8>>, bool), Arc<ClientConfig>)>;
    thread_local! {
        static CACHE: RefCell<Cache> = const { RefCell::new(Vec::new()) };
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let hit = c
            .iter()
            .find(|((ks, ka, kq), _)| ks == s && *kq == quic && ka.iter().map(Vec::as_slice).eq(alpn.iter().copied()));
        if let Some((_, v)) = hit {
            return Ok(v.clone());
        }
        let v = Arc::new(build(s, alpn, quic)?);
        c.push(((s.clone(), alpn.iter().map(|a| a.to_vec()).collect(), quic), v.clone()));
        Ok(v)
    })
}

/// The client configuration of one lane: the thread's shared one ([`client_config`]), or,
/// with [`LaneOptions::own_sessions`](crate::LaneOptions::own_sessions) (simulated clients),
/// a copy with a session store of its own, so that a client resumes only the sessions it
/// obtained itself, as a real one does: its first connection is a full handshake.
pub fn lane_config(opts: &crate::LaneOptions, alpn: &[&[u8]], quic: bool) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let shared = client_config(&opts.tls, alpn, quic)?;
    if !opts.own_sessions || !opts.tls.resume {
        return Ok(shared);
    }
    let mut own = (*shared).clone();
    // A client talks to one server: a few tickets are all it keeps.
    own.resumption = Resumption::store(Arc::new(rustls::client::ClientSessionMemoryCache::new(4)));
    Ok(Arc::new(own))
}

fn build(s: &TlsSettings, alpn: &[&[u8]], quic: bool) -> Result<ClientConfig, TlsConfigError> {
    let versions: &[&'static rustls::SupportedProtocolVersion] = match (s.version, quic) {
        (Some(TlsVersion::Tls12), true) => {
            return Err(TlsConfigError("QUIC needs TLS 1.3: --tls-version 1.2 does not apply".into()))
        }
        (Some(TlsVersion::Tls13), _) | (None, true) => &[&rustls::version::TLS13],
        (Some(TlsVersion::Tls12), false) => &[&rustls::version::TLS12],
        (None, false) => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|e| TlsConfigError(format!("TLS versions: {e}")))?;
    let mut verifier: Arc<dyn ServerCertVerifier> = if s.insecure {
        Arc::new(NoVerify(provider()))
    } else {
        let roots = match &s.ca_file {
            Some(p) => file_roots(p)?,
            None => system_roots()?,
        };
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsConfigError(format!("certificate verifier: {e}")))?
    };
    if quic {
        verifier = Arc::new(SeenVerify { inner: verifier });
    }
    let mut cfg = builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    cfg.key_log = Arc::new(rustls::KeyLogFile::new());
    cfg.resumption = if s.resume { Resumption::default() } else { Resumption::disabled() };
    cfg.enable_early_data = s.resume && s.zero_rtt;
    Ok(cfg)
}

/// The name a connection to `target` sends (SNI) and verifies the certificate against.
pub fn server_name(s: &TlsSettings, target: &crate::Target) -> Result<ServerName<'static>, TlsConfigError> {
    let name = s.sni.as_deref().unwrap_or(&target.host);
    ServerName::try_from(name.to_string()).map_err(|_| TlsConfigError(format!("invalid server name '{name}' for SNI")))
}

/// Accepts any certificate (`--insecure`), still checking handshake signatures.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Wraps a verifier to learn whether a handshake verified a certificate: a resumed TLS 1.3
/// handshake sends none. quinn does not expose rustls' handshake kind, so QUIC configs verify
/// through this. It is one verifier per shared config: rustls resumes only sessions stored
/// under the same verifier. To know which connection verified, each connection gets a copy of
/// the config (same verifier, same session store) whose time provider, which rustls asks for
/// the time right before it verifies the certificate, in the same call, names the
/// connection's flag in a thread-local slot that the verifier takes.
#[derive(Debug)]
pub(crate) struct SeenVerify {
    inner: Arc<dyn ServerCertVerifier>,
}

thread_local! {
    /// The flag of the connection that last asked for the time on this thread.
    static ASKING: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The time provider of one QUIC connection's config: notes the connection in [`ASKING`].
#[derive(Debug)]
struct MarkTime(Arc<AtomicBool>);

impl rustls::time_provider::TimeProvider for MarkTime {
    fn current_time(&self) -> Option<UnixTime> {
        ASKING.with(|a| *a.borrow_mut() = Some(self.0.clone()));
        Some(UnixTime::now())
    }
}

impl SeenVerify {
    /// The config of one connection: a copy of the shared `cfg` (built for QUIC, verifying
    /// through a `SeenVerify`) and the flag set when the connection's handshake verifies a
    /// certificate (a full handshake).
    pub(crate) fn connection(cfg: &Arc<ClientConfig>) -> (ClientConfig, Arc<AtomicBool>) {
        let seen = Arc::new(AtomicBool::new(false));
        let mut c = (**cfg).clone();
        c.time_provider = Arc::new(MarkTime(seen.clone()));
        (c, seen)
    }
}

impl ServerCertVerifier for SeenVerify {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(seen) = ASKING.with(|a| a.borrow_mut().take()) {
            seen.store(true, Ordering::Relaxed);
        }
        self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// What a finished TLS handshake negotiated, for [`volley_metrics::Handshake`].
pub(crate) struct Negotiated {
    pub version: Option<&'static str>,
    pub alpn: Option<String>,
    pub cipher: Option<&'static str>,
    pub resumed: bool,
}

/// Reads the negotiated parameters of a rustls connection.
pub(crate) fn negotiated(c: &rustls::CommonState) -> Negotiated {
    Negotiated {
        version: c.protocol_version().map(version_str),
        alpn: c.alpn_protocol().map(|a| String::from_utf8_lossy(a).into_owned()),
        cipher: c.negotiated_cipher_suite().and_then(|s| s.suite().as_str()),
        resumed: c.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
    }
}

pub(crate) fn version_str(v: rustls::ProtocolVersion) -> &'static str {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "other",
    }
}

/// The error kind of an I/O error on a TLS stream: rustls errors (wrapped by tokio-rustls as
/// `InvalidData`) are TLS failures; the rest as for plain sockets.
pub fn io_error_kind(e: &std::io::Error) -> ErrorKind {
    if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return match r {
            rustls::Error::NoApplicationProtocol
            | rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol) => ErrorKind::Alpn,
            _ => ErrorKind::Tls,
        };
    }
    crate::error_kind(e)
}

/// The text of a TLS handshake error: the rustls error itself when there is one
/// (e.g. `invalid peer certificate: UnknownIssuer`).
pub(crate) fn describe(e: &std::io::Error) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(r) => tidy(&r.to_string()),
        None => e.to_string(),
    }
}

/// Shortens rustls' certificate errors to one readable line. A certificate whose issuer's
/// name matches a trusted root with another key fails as a bad signature in webpki: to a
/// person that is an unknown issuer.
pub(crate) fn tidy(why: &str) -> String {
    if why.contains("invalid peer certificate")
        && (why.contains("UnsupportedSignatureAlgorithm") || why.contains("BadSignature"))
    {
        return "invalid peer certificate: UnknownIssuer (no trusted root signed it; a root of the same name has another key)".into();
    }
    why.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_and_messages() {
        let s = TlsSettings { insecure: true, ..TlsSettings::default() };
        let a = client_config(&s, &[b"dot"], false).unwrap();
        let b = client_config(&s, &[b"dot"], false).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one config (one session store) per thread");
        assert_eq!(a.alpn_protocols, vec![b"dot".to_vec()]);
        let c = client_config(&s, &[b"h2"], false).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        let q = TlsSettings { version: Some(TlsVersion::Tls12), ..s.clone() };
        assert!(check(&q, true).is_err());
        assert!(check(&q, false).is_ok());
        let off = TlsSettings { resume: false, zero_rtt: true, ..s };
        assert!(!client_config(&off, &[], false).unwrap().enable_early_data);
        let bad = TlsSettings { ca_file: Some("/nonexistent/ca.pem".into()), ..TlsSettings::default() };
        assert!(check(&bad, false).unwrap_err().0.contains("/nonexistent/ca.pem"));
        assert!(tidy("invalid peer certificate: UnsupportedSignatureAlgorithmForPublicKeyContext { x }")
            .contains("UnknownIssuer"));
        assert_eq!(tidy("invalid peer certificate: Expired"), "invalid peer certificate: Expired");
    }

    #[test]
    fn server_names() {
        let t: crate::Target = "tls://127.0.0.1".parse().unwrap();
        let n = server_name(&TlsSettings::default(), &t).unwrap();
        assert!(matches!(n, ServerName::IpAddress(_)), "an address: no SNI, verified against the IP SAN");
        let s = TlsSettings { sni: Some("dns.example".into()), ..TlsSettings::default() };
        assert!(matches!(server_name(&s, &t).unwrap(), ServerName::DnsName(_)));
        let s = TlsSettings { sni: Some("bad name!".into()), ..TlsSettings::default() };
        assert!(server_name(&s, &t).is_err());
    }
}
