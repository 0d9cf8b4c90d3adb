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
    fn start() -> Daemon {
        let dockerd = require("dockerd");
        // A short path: the daemon's sockets live under it.
        let dir = tempfile::Builder::new().prefix("vd").tempdir_in("/tmp").unwrap();
        let sock = format!("unix://{}/d.sock", dir.path().display());
        let child = Command::new(dockerd)
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
