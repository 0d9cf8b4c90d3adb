//! `volley`: the command line. Flags live in `cli.rs`; each subcommand in `cmd/`.

mod args;
mod cli;
mod cmd;
mod error;

fn main() {
    volley_transport::tls::install_crypto_provider();
    let code = match cli::run() {
        Ok(()) => 0,
        Err(e) => e.report(),
    };
    std::process::exit(code);
}
