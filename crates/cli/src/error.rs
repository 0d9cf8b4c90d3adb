//! Exit codes and the one-line error convention of the command line.
//!
//! 0: done. 1: the run failed for a reason outside the user's input (I/O while writing
//! results, an internal error). 2: bad input — flags, files, targets — or nothing to measure
//! (nothing listening); the message names the place (`file:line`, the flag, the address).

use std::fmt;

#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    /// Bad user input or an unusable target: exit code 2.
    pub fn usage(message: impl fmt::Display) -> CliError {
        CliError { code: 2, message: message.to_string() }
    }

    /// Anything else: exit code 1.
    pub fn failure(message: impl fmt::Display) -> CliError {
        CliError { code: 1, message: message.to_string() }
    }

    /// Prints the one-line message on stderr and returns the exit code.
    pub fn report(&self) -> i32 {
        eprintln!("volley: error: {}", self.message);
        self.code
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::failure(format!("{e:#}"))
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;
