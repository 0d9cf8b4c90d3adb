//! `volley completions SHELL` and `volley man`: shell completions and man pages, generated
//! from the same flag definitions the command line parses (clap_complete, clap_mangen), so
//! they can never disagree with it.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::Cli;
use crate::error::{CliError, CliResult};

const COMPLETIONS: &str = "\
Examples:
  bash, for the current user (bash-completion 2 loads it on demand):
    mkdir -p ~/.local/share/bash-completion/completions
    volley completions bash > ~/.local/share/bash-completion/completions/volley
  zsh (a directory on $fpath):
    volley completions zsh > ~/.zfunc/_volley
  fish:
    volley completions fish > ~/.config/fish/completions/volley.fish

The Debian package (scripts/deb.sh) installs them system-wide.";

#[derive(Args, Debug)]
#[command(after_long_help = COMPLETIONS)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

pub fn completions(a: CompletionsArgs) -> CliResult {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "volley", &mut out);
    std::io::stdout().write_all(&out).map_err(|e| CliError::failure(format!("standard output: {e}")))
}

const MAN: &str = "\
Examples:
  Read a page without installing it:
    volley man run | man -l -
  Install every page for the current user (man finds ~/.local/share/man):
    volley man --dir ~/.local/share/man/man1

The pages are volley(1) and volley-COMMAND(1) for each command; the Debian package
(scripts/deb.sh) installs them system-wide.";

#[derive(Args, Debug)]
#[command(after_long_help = MAN)]
pub struct ManArgs {
    /// The command whose page to print (roff, on standard output): volley's own without one.
    #[arg(value_name = "COMMAND", conflicts_with = "dir")]
    pub command: Option<String>,

    /// Write every page (volley.1 and volley-COMMAND.1) into DIR, created if missing.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Every man page: (file name, roff text), volley's own first.
pub fn pages() -> Vec<(String, Vec<u8>)> {
    let mut cmd = Cli::command();
    // Building sets each subcommand's display name to "volley-NAME", the pages' titles.
    cmd.build();
    let mut pages = vec![("volley.1".to_string(), render(&cmd))];
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = sub.get_display_name().unwrap_or(sub.get_name()).to_string();
        pages.push((format!("{name}.1"), render(sub)));
    }
    pages
}

fn render(cmd: &clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = clap_mangen::Man::new(cmd.clone()).render(&mut out);
    out
}

pub fn man(a: ManArgs) -> CliResult {
    let pages = pages();
    if let Some(dir) = a.dir {
        return write_pages(&dir, &pages);
    }
    let want = match a.command.as_deref() {
        None | Some("volley") => "volley.1".to_string(),
        Some(c) => format!("volley-{c}.1"),
    };
    let Some((_, text)) = pages.iter().find(|(n, _)| *n == want) else {
        let names: Vec<_> = pages.iter().skip(1).map(|(n, _)| n["volley-".len()..n.len() - 2].to_string()).collect();
        return Err(CliError::usage(format!(
            "no man page for '{}': the commands are {}",
            a.command.unwrap_or_default(),
            names.join(", ")
        )));
    };
    std::io::stdout().write_all(text).map_err(|e| CliError::failure(format!("standard output: {e}")))
}

fn write_pages(dir: &Path, pages: &[(String, Vec<u8>)]) -> CliResult {
    std::fs::create_dir_all(dir).map_err(|e| CliError::usage(format!("{}: {e}", dir.display())))?;
    for (name, text) in pages {
        let path = dir.join(name);
        volley_atomic::write(&path, text).map_err(|e| CliError::failure(format!("{}: {e}", path.display())))?;
    }
    eprintln!("volley: man: {} pages written to {}", pages.len(), dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and every long flag of each is in the bash completions and in its man page.
    #[test]
    fn completions_and_pages_cover_every_command_and_flag() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut bash = Vec::new();
        clap_complete::generate(Shell::Bash, &mut Cli::command(), "volley", &mut bash);
        let bash = String::from_utf8(bash).unwrap();
        let mut zsh = Vec::new();
        clap_complete::generate(Shell::Zsh, &mut Cli::command(), "volley", &mut zsh);
        let zsh = String::from_utf8(zsh).unwrap();
        let mut fish = Vec::new();
        clap_complete::generate(Shell::Fish, &mut Cli::command(), "volley", &mut fish);
        let fish = String::from_utf8(fish).unwrap();
        let pages = pages();
        let mut checked = 0;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let page = pages
                .iter()
                .find(|(n, _)| *n == format!("volley-{}.1", sub.get_name()))
                .unwrap_or_else(|| panic!("no man page for {}", sub.get_name()));
            let page = String::from_utf8_lossy(&page.1);
            assert!(
                bash.contains(&format!("volley__subcmd__{}", sub.get_name().replace('-', "__"))),
                "bash: {}",
                sub.get_name()
            );
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                let flag = format!("--{long}");
                assert!(bash.contains(&flag), "bash completions lack {} {flag}", sub.get_name());
                assert!(zsh.contains(&flag), "zsh completions lack {} {flag}", sub.get_name());
                // fish: one `complete` line per flag, under its subcommand's condition.
                let under = [format!("subcommand {}\"", sub.get_name()), format!("subcommand {};", sub.get_name())];
                assert!(
                    fish.lines().any(|l| under.iter().any(|u| l.contains(u.as_str()))
                        && l.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w == ["-l", long])),
                    "fish completions lack {} {flag}",
                    sub.get_name()
                );
                // roff escapes '-' as '\-'.
                assert!(page.contains(&flag.replace('-', "\\-")), "man page volley-{} lacks {flag}", sub.get_name());
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} flags checked");
        let top = String::from_utf8_lossy(&pages[0].1);
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            assert!(top.contains(sub.get_name()), "volley(1) does not name {}", sub.get_name());
        }
    }
}
