//! deploy/: the container image, a split run on a real Docker Swarm, and the Kubernetes
//! manifests (checked against the API's schema; their parts' entry point run as the Job runs
//! it). No registry is reached: the image is built locally FROM scratch. The Swarm runs on a
//! Docker daemon this test starts for itself (its own data, socket and swarm ports, no iptables
//! or bridge of its own: host networking only), so it never meets another daemon on the host.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn sh(cmd: &mut Command) -> String {
    let out = run_cmd(cmd, RUN_WAIT);
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{}\n{}", out.status, out.stdout, out.stderr);
    out.stdout
}

/// The manifests of a run rendered from the template.
fn render(parts: u32, run: &[&str]) -> String {
    sh(Command::new(deploy().join("kubernetes/render.sh")).args(["-n", &parts.to_string(), "--"]).args(run))
}

/// The manifests pass `kubernetes-validate --strict` (the Kubernetes API's schema, bundled),
/// and the same manifests with a wrong type or an unknown field do not: the check bites.
#[test]
fn kubernetes_manifests_pass_the_api_schema() {
    let validate = require("kubernetes-validate");
    let dir = tempfile::tempdir().unwrap();
    let text = render(4, &["udp://10.96.0.10:53", "-Q", "400000", "-l", "60s"]);
    for (needle, what) in [
        ("completionMode: Indexed", "an Indexed Job"),
        ("completions: 4", "4 completions"),
        ("parallelism: 4", "4 at once"),
        ("clusterIP: None", "a headless Service"),
        ("podAntiAffinity", "parts on different nodes"),
        (r#""--parts", "4""#, "the coordinator waits for 4"),
        (r#"args: ["run", "udp://10.96.0.10:53", "-Q", "400000", "-l", "60s""#, "the run's flags"),
    ] {
        assert!(text.contains(needle), "no {what} ({needle}) in:\n{text}");
    }
    // Every part writes its own results into the claim the coordinator writes the merge to
    // (not into a volume of its pod's, lost with it): the claim is ReadWriteMany, since the
    // parts run on different nodes, and the Job's pods and the coordinator's Pod mount it.
    let docs: Vec<&str> = text.split("\n---\n").collect();
    let doc_of = |kind: &str| {
        docs.iter()
            .find(|d| d.contains(&format!("\nkind: {kind}\n")))
            .unwrap_or_else(|| panic!("no {kind} in:\n{text}"))
    };
    assert!(doc_of("PersistentVolumeClaim").contains(r#"accessModes: ["ReadWriteMany"]"#), "{text}");
    for kind in ["Pod", "Job"] {
        let d = doc_of(kind);
        assert!(d.contains("claimName: volley-results") && d.contains("mountPath: /results"), "{kind}:\n{d}");
    }
    assert!(!text.contains("emptyDir"), "{text}");
    let good = dir.path().join("run.yaml");
    std::fs::write(&good, &text).unwrap();
    let out = run_cmd(Command::new(&validate).arg("--strict").arg(&good), RUN_WAIT);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stderr.matches("passed").count() + out.stdout.matches("passed").count(), 4, "{}", out.stderr);
    for (from, to) in [("completions: 4", "completions: four"), ("backoffLimit: 0", "backoffLimit: 0\n  retries: 3")] {
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, text.replacen(from, to, 1)).unwrap();
        let out = run_cmd(Command::new(&validate).arg("--strict").arg(&bad), RUN_WAIT);
        assert!(!out.status.success(), "{to}: accepted\n{}{}", out.stdout, out.stderr);
    }
}

/// A Docker daemon of this test's own, with a one-node swarm; stopped (by its pid) when dropped.
struct Daemon {
    child: Child,
    sock: String,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// A daemon with a one-node swarm on 127.0.0.1.
    fn start() -> Daemon {
        let d = Daemon::spawn(None);
        // Swarm's ports of its own: two test daemons never share one.
        let (mgmt, data) = (free_port(), free_port());
        sh(d.docker().args(["swarm", "init", "--advertise-addr", &format!("127.0.0.1:{mgmt}")]).args([
            "--listen-addr",
            &format!("127.0.0.1:{mgmt}"),
            "--data-path-port",
            &data.to_string(),
        ]));
        d
    }

    /// A daemon of its own, in network namespace `netns` when given (a simulated host: entered
    /// with nsenter, as `ip netns exec` remounts /sys, which the daemon does not survive).
    fn spawn(netns: Option<&str>) -> Daemon {
        let dockerd = require("dockerd");
        // A short path: the daemon's sockets live under it.
        let dir = tempfile::Builder::new().prefix("vd").tempdir_in("/tmp").unwrap();
        let sock = format!("unix://{}/d.sock", dir.path().display());
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new(require("nsenter"));
                c.arg(format!("--net=/run/netns/{ns}")).arg(dockerd);
                c
            }
            None => Command::new(dockerd),
        };
        let child = cmd
            .env("DOCKER_SERVICE_PREFER_OFFLINE_IMAGE", "1")
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .arg("--data-root")
            .arg(dir.path().join("data"))
            .arg("--exec-root")
            .arg(dir.path().join("x"))
            .arg("--pidfile")
            .arg(dir.path().join("d.pid"))
            .args(["-H", &sock])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("dockerd.log")).unwrap())
            .spawn()
            .expect("start dockerd");
        let d = Daemon { child, sock, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d.docker().arg("version").output().is_ok_and(|o| o.status.success()) {
            assert!(Instant::now() < deadline, "dockerd did not answer within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        d
    }

    fn docker(&self) -> Command {
        let mut c = Command::new(require("docker"));
        c.env("DOCKER_HOST", &self.sock);
        c
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        if wait_bounded(&mut self.child, Duration::from_secs(30)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // What the daemon left mounted under its directory (the swarm's network namespace),
        // so that the directory can go.
        let dir = self._dir.path().to_string_lossy().into_owned();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut left: Vec<&str> =
            mounts.lines().filter_map(|l| l.split_whitespace().nth(1)).filter(|m| m.starts_with(&dir)).collect();
        left.sort_unstable_by_key(|m| std::cmp::Reverse(m.len()));
        for m in left {
            if let Ok(c) = std::ffi::CString::new(m) {
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

fn results(dir: &Path, name: &str) -> Value {
    read_results(&dir.join(name)).unwrap_or_else(|| panic!("no {name} in {}", dir.display()))
}

/// The image built from deploy/ with no registry runs a split run on a real Swarm (a replicated
/// job of parts, the coordinator as a job of its own, host networking) against a responder on
/// 127.0.0.1, and the merged results are the whole run's. Then the Kubernetes Job's part
/// command runs in the same image exactly as the Job gives it, with JOB_COMPLETION_INDEX set.
#[test]
fn a_split_run_on_docker_swarm_and_the_job_entry_point() {
    let daemon = Daemon::start();
    let docker = require("docker");
    sh(Command::new(deploy().join("build-image.sh"))
        .arg(volley())
        .arg("volley:test")
        .env("DOCKER_HOST", &daemon.sock)
        .env("DOCKER", &docker));
    let server = Server::start();
    let target = server.udp_url();

    // Swarm: 3 parts and the coordinator.
    let out = tempfile::tempdir().unwrap();
    let coord = format!("127.0.0.1:{}", free_port());
    let run = run_cmd(
        Command::new(deploy().join("swarm/run.sh"))
            .args([target.as_str(), "-Q", "900", "-n", "2700", "-T", "1"])
            .env("DOCKER_HOST", &daemon.sock)
            .env("DOCKER", &docker)
            .env("IMAGE", "volley:test")
            .env("PARTS", "3")
            .env("OUT", out.path())
            .env("COORD", &coord)
            .env("WAIT", "180"),
        RUN_WAIT,
    );
    assert!(run.status.success(), "swarm run:\n{}", run.stderr);
    let merged = results(out.path(), "merged.json");
    check_accounting(&merged);
    assert_eq!(total(&merged, "issued"), 2700);
    assert_eq!(total(&merged, "answered"), 2700);
    assert_eq!(merged["scale"]["complete"].as_bool(), Some(true), "{:#}", merged["scale"]);
    assert_eq!(merged["scale"]["parts"].as_u64(), Some(3));
    let mut issued = 0;
    for i in 0..3 {
        let p = results(out.path(), &format!("part-{i}.json"));
        assert_eq!(p["part"]["index"].as_u64(), Some(i));
        issued += total(&p, "issued");
    }
    assert_eq!(issued, 2700);
    eprintln!("swarm: start skew {:.3} ms", merged["scale"]["start_skew_ns"].as_u64().unwrap_or(0) as f64 / 1e6);

    // Kubernetes: the Job's part command, taken from the rendered manifest, run in the image as
    // each indexed pod runs it (only the coordinator's address differs: no cluster DNS here).
    let manifest = render(2, &[&target, "-Q", "600", "-n", "1200"]);
    let job_args = manifest.lines().find(|l| l.trim_start().starts_with("args: [\"run\"")).expect("the Job's args");
    let args: Vec<String> =
        serde_json::from_str(job_args.trim_start().trim_start_matches("args: ")).expect("the args as a JSON list");
    assert!(args.contains(&"/results/part-{part}.json".to_string()), "{args:?}");
    let results_dir = tempfile::tempdir().unwrap();
    let coord = format!("127.0.0.1:{}", free_port());
    let mut coordinator = Command::new(volley())
        .args(["coordinate", "--parts", "2", "--listen", &coord, "-o"])
        .arg(results_dir.path().join("merged.json"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pods: Vec<Child> = (0..2)
        .map(|i| {
            daemon
                .docker()
                .args(["run", "--rm", "--network", "host", "-e", &format!("JOB_COMPLETION_INDEX={i}")])
                .args(["-e", "VOLLEY_PARTS=2", "-e", &format!("VOLLEY_COORDINATOR={coord}")])
                .arg("-v")
                .arg(format!("{}:/results", results_dir.path().display()))
                .arg("volley:test")
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in pods {
        let status = wait_bounded(&mut p, RUN_WAIT).expect("the pod's container ends");
        assert!(status.success(), "a part exited {status}");
    }
    let status = wait_bounded(&mut coordinator, RUN_WAIT).expect("the coordinator ends");
    assert!(status.success(), "coordinator exited {status}");
    let merged = results(results_dir.path(), "merged.json");
    assert_eq!(total(&merged, "answered"), 1200);
    for i in 0..2u64 {
        let p = results(results_dir.path(), &format!("part-{i}.json"));
        assert_eq!(p["part"]["index"].as_u64(), Some(i), "JOB_COMPLETION_INDEX={i}");
    }
}

/// Two simulated hosts: network namespaces joined by a veth pair, at 10.78.X.1 and 10.78.X.2
/// (X from the test's pid; nothing leaves the namespaces). Removed when dropped.
struct TwoHosts {
    names: [String; 2],
    addrs: [String; 2],
}

fn ip(args: &[&str]) {
    let out = Command::new(require("ip")).args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl TwoHosts {
    fn new() -> TwoHosts {
        let id = std::process::id();
        let names = [format!("vw{:x}a", id & 0xffff), format!("vw{:x}b", id & 0xffff)];
        let net = 10 + id % 240;
        let addrs = [format!("10.78.{net}.1"), format!("10.78.{net}.2")];
        let h = TwoHosts { names, addrs };
        let links = [format!("vw{:x}x", id & 0xffff), format!("vw{:x}y", id & 0xffff)];
        for n in &h.names {
            ip(&["netns", "add", n]);
        }
        ip(&["link", "add", &links[0], "type", "veth", "peer", "name", &links[1]]);
        for ((link, ns), addr) in links.iter().zip(&h.names).zip(&h.addrs) {
            ip(&["link", "set", link, "netns", ns]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", link]);
            ip(&["-n", ns, "link", "set", link, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        h
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// A split run across a two-node swarm: a manager and a worker, each a Docker daemon on a
/// simulated host of its own, the worker joined over the hosts' link. The coordinator runs on
/// the manager (a placement constraint: its address is the manager's), the two parts one per
/// node (--replicas-max-per-node 1), against a responder on the manager's host; the merged
/// results are the whole run's, and the coordinator saw one part from each host.
#[test]
fn a_split_run_across_two_swarm_nodes() {
    let hosts = TwoHosts::new();
    let manager = Daemon::spawn(Some(&hosts.names[0]));
    let worker = Daemon::spawn(Some(&hosts.names[1]));
    let (a, b) = (&hosts.addrs[0], &hosts.addrs[1]);
    sh(manager
        .docker()
        .args(["swarm", "init", "--advertise-addr", &format!("{a}:2377")])
        .args(["--listen-addr", &format!("{a}:2377")]));
    let token = sh(manager.docker().args(["swarm", "join-token", "-q", "worker"]));
    sh(worker.docker().args(["swarm", "join", "--token", token.trim()]).args([
        "--advertise-addr",
        &format!("{b}:2377"),
        "--listen-addr",
        &format!("{b}:2377"),
        &format!("{a}:2377"),
    ]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let nodes = sh(manager.docker().args(["node", "ls", "--format", "{{.Status}} {{.Availability}}"]));
        if nodes.lines().filter(|l| l.trim() == "Ready Active").count() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the worker never became ready:\n{nodes}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let docker = require("docker");
    for d in [&manager, &worker] {
        sh(Command::new(deploy().join("build-image.sh"))
            .arg(volley())
            .arg("volley:test")
            .env("DOCKER_HOST", &d.sock)
            .env("DOCKER", &docker));
    }
    let mut serve = Command::new(require("ip"));
    serve.args(["netns", "exec", &hosts.names[0]]).arg(volley());
    let server = Server::start_via(serve, &["-l", a]);
    let target = format!("udp://{}", server.udp_addr());

    let out = tempfile::tempdir().unwrap();
    let coord = format!("{a}:7300");
    let run = run_cmd(
        Command::new(deploy().join("swarm/run.sh"))
            .args([target.as_str(), "-Q", "900", "-n", "2700", "-T", "1"])
            .env("DOCKER_HOST", &manager.sock)
            .env("DOCKER", &docker)
            .env("IMAGE", "volley:test")
            .env("PARTS", "2")
            .env("OUT", out.path())
            .env("COORD", &coord)
            .env("COORD_NODE", "node.role==manager")
            .env("PER_NODE", "1")
            .env("WAIT", "180"),
        RUN_WAIT,
    );
    assert!(run.status.success(), "swarm run:\n{}", run.stderr);
    let merged = results(out.path(), "merged.json");
    check_accounting(&merged);
    assert_eq!(total(&merged, "issued"), 2700);
    assert_eq!(total(&merged, "answered"), 2700);
    let scale = &merged["scale"];
    assert_eq!(scale["complete"].as_bool(), Some(true), "{scale:#}");
    let mut from: Vec<&str> = scale["part_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["peer"].as_str().unwrap().split(':').next().unwrap())
        .collect();
    from.sort_unstable();
    assert_eq!(from, [a.as_str(), b.as_str()], "one part on each node: {scale:#}");
    let mut issued = 0;
    for i in 0..2 {
        let p = results(out.path(), &format!("part-{i}.json"));
        assert_eq!(p["part"]["index"].as_u64(), Some(i));
        issued += total(&p, "issued");
    }
    assert_eq!(issued, 2700);
    eprintln!("two-node swarm: start skew {:.3} ms", scale["start_skew_ns"].as_u64().unwrap_or(0) as f64 / 1e6);
    drop(server);
    drop(worker);
    drop(manager);
}
