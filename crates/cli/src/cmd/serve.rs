use clap::Args;

use crate::error::CliResult;

#[derive(Args, Debug)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> CliResult {
    Err(crate::error::CliError::failure("not implemented yet"))
}
