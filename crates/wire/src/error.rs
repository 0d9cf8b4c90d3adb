use thiserror::Error;

/// Why bytes are not a DNS message we can use. Never a panic: network input ends here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("message shorter than the 12-byte header")]
    ShortHeader,
    #[error("message ends inside a record or name")]
    Truncated,
    #[error("label longer than 63 octets")]
    LabelTooLong,
    #[error("name longer than 255 octets")]
    NameTooLong,
    #[error("compression pointer loops or points forward")]
    BadPointer,
    #[error("reserved label type")]
    BadLabelType,
    #[error("expected exactly one question, found {0}")]
    QuestionCount(u16),
    #[error("invalid domain name text: {0}")]
    BadNameText(&'static str),
    #[error("unknown type mnemonic")]
    UnknownType,
}
