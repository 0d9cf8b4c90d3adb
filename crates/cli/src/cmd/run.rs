use clap::Args;

use crate::error::CliResult;

#[derive(Args, Debug)]
pub struct RunArgs {}

pub fn run(_args: RunArgs) -> CliResult {
    Err(crate::error::CliError::failure("not implemented yet"))
}
