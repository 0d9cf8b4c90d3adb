//! Whole-message decoding and dig-like presentation, for `volley query`.
