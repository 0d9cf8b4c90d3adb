//! Real servers an experiment measures instead of the embedded responder (`--server`): volley
//! writes the server's configuration (loopback ports, a certificate, answers for
//! example.test), starts it pinned to one core as the studies had it, waits until it answers,
//! and stops it at the end.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ExperimentError;

/// The servers volley can start.
pub const SERVERS: &[&str] = &["unbound", "kresd", "dnsdist", "named"];

/// What the JSON document says of a server volley started (`server` of `volley.experiment/1`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServerInfo {
    pub name: String,
    /// The first line of its `--version` (`-v` for named).
    pub version: String,
    pub pid: u32,
    /// The core it was pinned to.
    pub cpu: usize,
    /// Transport name → URL.
    pub targets: BTreeMap<String, String>,
    /// How it answers (every name under example.test with an A record, and how).
    pub answers: String,
    /// The configuration volley wrote (for named, its zone file follows).
    pub config: String,
}

/// A server volley started: its targets per transport, its CA, its process.
pub struct Started {
    pub name: String,
    /// Transport name → URL.
    pub targets: BTreeMap<String, String>,
    /// The certificate's file (self-signed: its own CA).
    pub ca: PathBuf,
    pub pid: u32,
    /// What the document records of it.
    pub info: ServerInfo,
    child: Child,
    dir: PathBuf,
}

impl Started {
    /// Stops the server (by its own pid) and removes its directory.
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port free on 127.0.0.1 for UDP and TCP when asked (bound, then released).
fn free_port() -> Result<u16, ExperimentError> {
    for _ in 0..100 {
        let tcp = TcpListener::bind("127.0.0.1:0").map_err(|e| ExperimentError::Setup(format!("a free port: {e}")))?;
        let port = tcp.local_addr().map_err(|e| ExperimentError::Setup(e.to_string()))?.port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(ExperimentError::Setup("no free port on 127.0.0.1".into()))
}

/// Finds a program on PATH or in the system directories.
fn find(bin: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    for d in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin"] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(bin)).find(|p| p.is_file())
}

/// A P-256 certificate for localhost and 127.0.0.1 (openssl), not a CA, as peers accept.
fn certificate(dir: &Path) -> Result<(PathBuf, PathBuf), ExperimentError> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let openssl =
        find("openssl").ok_or_else(|| ExperimentError::Setup("--server needs openssl for its certificate".into()))?;
    let out = Command::new(openssl)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args([
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-addext",
            "extendedKeyUsage=serverAuth",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ExperimentError::Setup(format!("openssl: {e}")))?;
    if !out.status.success() {
        return Err(ExperimentError::Setup(format!(
            "openssl could not make a certificate: {}",
            String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("")
        )));
    }
    Ok((cert, key))
}

/// The first line of a program's version output (`flag`: its version option).
fn version(bin: &Path, flag: &str) -> String {
    Command::new(bin)
        .arg(flag)
        .stdin(Stdio::null())
        .output()
        .map(|o| {
            let text = if o.stdout.is_empty() { o.stderr } else { o.stdout };
            String::from_utf8_lossy(&text).lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_default()
}

/// Writes `text` to `dir/name`.
fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, ExperimentError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| ExperimentError::Io(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// Starts `name` (one of [`SERVERS`]) on loopback, pinned to CPU `cpu`.
pub fn start(name: &str, cpu: usize) -> Result<Started, ExperimentError> {
    let bin = match name {
        "unbound" | "kresd" | "dnsdist" | "named" => {
            find(name).ok_or_else(|| ExperimentError::Setup(format!("--server {name}: {name} is not installed")))?
        }
        _ => {
            return Err(ExperimentError::Usage(format!(
                "unknown --server '{name}' (volley starts: {})",
                SERVERS.join(", ")
            )))
        }
    };
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "volley-server-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| ExperimentError::Io(format!("{}: {e}", dir.display())))?;
    let (cert, key) = certificate(&dir)?;
    let (dns, dot, doh) = (free_port()?, free_port()?, free_port()?);
    let mut cmd = Command::new(&bin);
    // Each serves UDP and TCP on `dns`, DoT on `dot`, DoH/2 on `doh`.
    let (config, answers, version_flag);
    match name {
        "unbound" => {
            config = format!(
                "server:\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"\"\n  use-syslog: no\n  \
                 logfile: \"\"\n  verbosity: 0\n  num-threads: 1\n  do-ip6: no\n  \
                 interface: 127.0.0.1@{dns}\n  interface: 127.0.0.1@{dot}\n  interface: 127.0.0.1@{doh}\n  \
                 tls-port: {dot}\n  https-port: {doh}\n  http-endpoint: \"/dns-query\"\n  \
                 tls-service-key: \"{key}\"\n  tls-service-pem: \"{cert}\"\n  \
                 access-control: 127.0.0.0/8 allow\n  incoming-num-tcp: 4096\n  \
                 module-config: \"iterator\"\n  local-zone: \"example.test.\" redirect\n  \
                 local-data: \"example.test. 300 IN A 192.0.2.1\"\n",
                d = dir.display(),
                key = key.display(),
                cert = cert.display(),
            );
            let path = write(&dir, "unbound.conf", &config)?;
            answers = "local data (local-zone redirect), one thread".into();
            version_flag = "-V";
            cmd.arg("-d").arg("-c").arg(&path);
        }
        "kresd" => {
            config = format!(
                "net.listen('127.0.0.1', {dns}, {{kind='dns'}})\nnet.listen('127.0.0.1', {dot}, {{kind='tls'}})\n\
                 net.listen('127.0.0.1', {doh}, {{kind='doh2'}})\nnet.tls('{cert}', '{key}')\n\
                 policy.add(policy.suffix(policy.ANSWER({{[kres.type.A]={{rdata=kres.str2ip('192.0.2.1'), ttl=300}}}}), \
                 {{todname('example.test.')}}))\n",
                cert = cert.display(),
                key = key.display(),
            );
            let path = write(&dir, "kresd.conf", &config)?;
            answers = "policy.ANSWER (no resolution), one process".into();
            version_flag = "--version";
            let run = dir.join("run");
            std::fs::create_dir_all(&run).map_err(|e| ExperimentError::Io(format!("{}: {e}", run.display())))?;
            cmd.arg("-n").arg("-q").arg("-c").arg(&path).arg(&run);
        }
        "dnsdist" => {
            // dnsdist answers itself (SpoofAction), with no backend: the figures are dnsdist's
            // own work (receiving, matching its rules, building and sending the answer, TLS and
            // HTTP), not a backend's. The study answered from dnsdist's cache filled
            // beforehand; a spoofed answer skips the cache lookup and the backend alike.
            // No security polling (it would send queries off the machine).
            config = format!(
                "setSecurityPollSuffix(\"\")\n\
                 addLocal(\"127.0.0.1:{dns}\")\n\
                 addTLSLocal(\"127.0.0.1:{dot}\", \"{cert}\", \"{key}\")\n\
                 addDOHLocal(\"127.0.0.1:{doh}\", \"{cert}\", \"{key}\", \"/dns-query\")\n\
                 addAction({{\"example.test.\"}}, SpoofAction(\"192.0.2.1\"))\n\
                 addAction({{\"example.test.\"}}, RCodeAction(DNSRCode.NOERROR))\n\
                 addAction(AllRule(), RCodeAction(DNSRCode.REFUSED))\n",
                cert = cert.display(),
                key = key.display(),
            );
            let path = write(&dir, "dnsdist.conf", &config)?;
            answers = "its own answers (SpoofAction), no backend".into();
            version_flag = "--version";
            // Its DoH (h2o) offers only h2 in ALPN: DoH/1.1 clients that ask for http/1.1
            // are refused, so DoH/1.1 rows are not measured.
            cmd.arg("--supervised").arg("--disable-syslog").arg("-C").arg(&path);
        }
        _ => {
            // named: authoritative for example.test with a wildcard, one worker thread (-n 1).
            let zone = "$TTL 300\n@ IN SOA localhost. hostmaster.localhost. 1 3600 600 86400 300\n\
                        @ IN NS localhost.\n@ IN A 192.0.2.1\n* IN A 192.0.2.1\n";
            let zone_path = write(&dir, "example.test.zone", zone)?;
            let conf = format!(
                "options {{\n  directory \"{d}\";\n  pid-file none;\n  session-keyfile none;\n  \
                 listen-on port {dns} {{ 127.0.0.1; }};\n  listen-on port {dot} tls local-tls {{ 127.0.0.1; }};\n  \
                 listen-on port {doh} tls local-tls http local-http {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  \
                 recursion no;\n  notify no;\n  dnssec-validation no;\n  tcp-clients 10000;\n}};\n\
                 controls {{ }};\n\
                 tls local-tls {{ cert-file \"{cert}\"; key-file \"{key}\"; }};\n\
                 http local-http {{ endpoints {{ \"/dns-query\"; }}; listener-clients 10000; streams-per-connection 1000; }};\n\
                 zone \"example.test\" {{ type primary; file \"{zone}\"; }};\n",
                d = dir.display(),
                cert = cert.display(),
                key = key.display(),
                zone = zone_path.display(),
            );
            let path = write(&dir, "named.conf", &conf)?;
            config = format!("{conf}\n; {}\n{zone}", zone_path.display());
            answers = "authoritative, a wildcard zone, one worker thread".into();
            version_flag = "-v";
            cmd.arg("-g").arg("-n").arg("1").arg("-c").arg(&path);
        }
    }
    let version = version(&bin, version_flag);
    let log = std::fs::File::create(dir.join("server.log")).map_err(|e| ExperimentError::Io(e.to_string()))?;
    cmd.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| ExperimentError::Io(e.to_string()))?).stderr(log);
    // SAFETY: sched_setaffinity on the child itself, between fork and exec; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            // Killed with volley.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| ExperimentError::Setup(format!("cannot start {}: {e}", bin.display())))?;
    let pid = child.id();
    let mut targets = BTreeMap::new();
    targets.insert("udp".to_string(), format!("udp://127.0.0.1:{dns}"));
    targets.insert("tcp".to_string(), format!("tcp://127.0.0.1:{dns}"));
    targets.insert("dot".to_string(), format!("tls://localhost:{dot}"));
    targets.insert("doh2".to_string(), format!("https://localhost:{doh}/dns-query"));
    let info = ServerInfo { name: name.to_string(), version, pid, cpu, targets: targets.clone(), answers, config };
    let mut s = Started { name: name.to_string(), targets, ca: cert, pid, info, child, dir };
    // Ready once it takes TCP connections on each port and answers over UDP.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = s.child.try_wait() {
            let log = std::fs::read_to_string(s.dir.join("server.log")).unwrap_or_default();
            let first = log.lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
            s.stop();
            return Err(ExperimentError::Setup(format!("{name} exited at start ({status}): {first}")));
        }
        let up = [dns, dot, doh].iter().all(|&p| {
            TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], p)), Duration::from_millis(200)).is_ok()
        });
        if up && answers_udp(dns) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            s.stop();
            return Err(ExperimentError::Setup(format!("{name} did not answer within 20 s")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether something answers `www.example.test A` over UDP on `port`.
fn answers_udp(port: u16) -> bool {
    let Ok(s) = UdpSocket::bind("127.0.0.1:0") else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut q = vec![0x51, 0x51, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in ["www", "example", "test"] {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    if s.send_to(&q, ("127.0.0.1", port)).is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    matches!(s.recv_from(&mut buf), Ok((n, _)) if n >= 12 && buf[..2] == [0x51, 0x51])
}
