//! volley-metrics
