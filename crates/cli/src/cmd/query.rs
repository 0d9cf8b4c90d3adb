use clap::Args;

use crate::error::CliResult;

#[derive(Args, Debug)]
pub struct QueryArgs {}

pub fn run(_args: QueryArgs) -> CliResult {
    Err(crate::error::CliError::failure("not implemented yet"))
}
