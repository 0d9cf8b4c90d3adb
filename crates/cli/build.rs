//! Names the build: `volley --version` prints the git commit it was built from (and its date),
//! so that a figure can be traced to the code that measured it. `VOLLEY_BUILD_COMMIT` overrides
//! it (a package built outside a checkout); without git or a checkout it reads "unknown".

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Watches a git file for changes, if it exists (a missing one would rebuild every time).
fn watch(path: Option<String>) {
    if let Some(p) = path.filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=VOLLEY_BUILD_COMMIT");
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let commit = match std::env::var("VOLLEY_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => match git(&dir, &["log", "-1", "--format=%h %cs", "--abbrev=12"]) {
            Some(c) => {
                // Build again when HEAD moves: HEAD itself (a checkout) and the ref it names (a commit).
                let path = |name: &str| git(&dir, &["rev-parse", "--path-format=absolute", "--git-path", name]);
                watch(path("HEAD"));
                watch(path("packed-refs"));
                if let Some(name) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
                    watch(path(&name));
                }
                c
            }
            None => "unknown commit".to_string(),
        },
    };
    println!("cargo:rustc-env=VOLLEY_BUILD={commit}");
}
