//! One error type for the whole core; the bindings map each kind to a Python exception.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A value or shape is outside what the operation accepts (Python `ValueError`).
    Value(String),
    /// An argument has the wrong type or dtype (Python `TypeError`).
    Type(String),
    /// The result would not fit in memory (Python `MemoryError`).
    Memory(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Value(s) | Error::Type(s) | Error::Memory(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for `Err(Error::Value(format!(...)))`.
#[macro_export]
macro_rules! value_error {
    ($($arg:tt)*) => { Err($crate::error::Error::Value(format!($($arg)*))) };
}
