//! volley installs like the tools it sits beside: `--version` names the commit, and the Debian
//! package (scripts/deb.sh) installs the binary, a man page per command and completions that
//! bash loads. The package is installed for real by dpkg, into a root of the test's own, so the
//! test never touches the machine's /usr.

mod common;

use std::path::Path;
use std::process::Command;

use common::{require, volley};

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn version_names_the_commit() {
    let v = run(Command::new(volley()).arg("--version"));
    assert!(v.starts_with(&format!("volley {} (", env!("CARGO_PKG_VERSION"))), "--version: {v}");
    // The commit of the checkout the binary was built from; a build outside one says so.
    let head = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "log", "-1", "--format=%h %cs", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let want = match (std::env::var("VOLLEY_BUILD_COMMIT"), head) {
        (Ok(c), _) if !c.trim().is_empty() => c.trim().to_string(),
        (_, Some(h)) => h,
        _ => "unknown commit".to_string(),
    };
    assert!(v.contains(&format!("({want})")), "--version '{}' does not name '{want}'", v.trim());
}

#[test]
fn debian_package_installs_binary_pages_and_completions() {
    require("dpkg-deb");
    require("dpkg-shlibdeps");
    require("man");
    let tmp = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = run(Command::new("bash")
        .arg(repo.join("scripts/deb.sh"))
        .arg("--binary")
        .arg(volley())
        .arg("--out")
        .arg(tmp.path().join("out")));
    let deb = out.lines().last().expect("deb.sh prints the package's path").to_string();
    let info = run(Command::new("dpkg-deb").args(["--field", &deb, "Package", "Version", "Depends"]));
    assert!(info.contains("Package: volley") && info.contains("libc6"), "{info}");

    // A dpkg database of its own: dpkg installs into the test's root, not the machine's.
    let root = tmp.path().join("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    run(Command::new("dpkg").arg(format!("--root={}", root.display())).args([
        "--force-depends",
        "--force-script-chrootless",
        "--force-not-root",
        "-i",
        &deb,
    ]));
    let listed = run(Command::new("dpkg").arg(format!("--root={}", root.display())).args(["-L", "volley"]));

    let bin = root.join("usr/bin/volley");
    let v = run(Command::new(&bin).arg("--version"));
    assert!(v.starts_with("volley "), "{v}");
    assert!(info.contains(&format!("Version: {}", env!("CARGO_PKG_VERSION"))), "{info}");

    // A page per command, rendered by man itself.
    let commands = [
        "run",
        "serve",
        "query",
        "bench",
        "limit",
        "link",
        "calibrate",
        "experiment",
        "pcap",
        "report",
        "compare",
        "merge",
        "coordinate",
    ];
    for c in commands {
        let page = root.join(format!("usr/share/man/man1/volley-{c}.1.gz"));
        assert!(listed.contains(&format!("/usr/share/man/man1/volley-{c}.1.gz")), "dpkg -L lacks volley-{c}.1.gz");
        let text = run(Command::new("man").env("MANWIDTH", "100").arg("-l").arg(&page));
        assert!(text.contains(&format!("volley-{c}")), "man -l {}: no title", page.display());
    }
    let run_page =
        run(Command::new("man").env("MANWIDTH", "100").arg("-l").arg(root.join("usr/share/man/man1/volley-run.1.gz")));
    for flag in ["--rate", "--concurrency", "--link", "--timeout"] {
        assert!(run_page.contains(flag), "volley-run(1) lacks {flag}");
    }

    // bash loads the completions and completes a subcommand's flags.
    let script = format!(
        "source {}; COMP_WORDS=(volley run --ra); COMP_CWORD=2; COMP_LINE='volley run --ra'; COMP_POINT=${{#COMP_LINE}}; \
         _volley volley --ra run; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        root.join("usr/share/bash-completion/completions/volley").display()
    );
    let words = run(Command::new("bash").arg("-c").arg(script));
    assert!(words.lines().any(|w| w == "--rate"), "bash completion of 'volley run --ra': {words:?}");
    for f in ["usr/share/zsh/vendor-completions/_volley", "usr/share/fish/vendor_completions.d/volley.fish"] {
        assert!(std::fs::metadata(root.join(f)).map(|m| m.len() > 1000).unwrap_or(false), "{f} missing or empty");
    }
}
