use clap::Args;

use crate::error::CliResult;

#[derive(Args, Debug)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> CliResult {
    Err(crate::error::CliError::failure("not implemented yet"))
}
