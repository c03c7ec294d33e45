//! [`PolicyError`]: why a policy document was rejected.
//!
//! Errors found by the TOML layer (syntax, unknown keys, wrong types, missing
//! required keys, unknown platform or TCB status spellings) carry toml's own
//! message, which names the key and gives line and column. Errors found while
//! building the typed [`Policy`](crate::Policy) carry the dotted key path
//! (`sev_snp.measurements[2]`) and the 1-based line.

/// A policy document that could not be turned into a [`Policy`](crate::Policy).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// Not valid TOML, or not the shape of `kolm.policy.v1`: an unknown key,
    /// a wrong type, a missing required key, an unknown platform or TCB
    /// status. The message is toml's and names the key, line and column.
    #[error("invalid policy: {message}")]
    Toml {
        /// toml's rendered error.
        message: String,
    },
    /// A platform name that is not one of the canonical spellings.
    #[error(
        "unknown platform {value:?}; expected one of: none, simulated, nitro, sev-snp, tdx, azure-sev-snp, azure-tdx"
    )]
    UnknownPlatform {
        /// The string given.
        value: String,
    },
    /// A TDX TCB status that is not one of Intel's acceptable spellings.
    #[error(
        "unknown TDX TCB status {value:?}; expected one of: UpToDate, SWHardeningNeeded, ConfigurationNeeded, ConfigurationAndSWHardeningNeeded, OutOfDate, OutOfDateConfigurationNeeded"
    )]
    UnknownTcbStatus {
        /// The string given.
        value: String,
    },
    /// `schema` is not exactly `kolm.policy.v1`.
    #[error("`schema` (line {line}): expected \"kolm.policy.v1\", found {found:?}")]
    Schema {
        /// The schema string given.
        found: String,
        /// 1-based line.
        line: usize,
    },
    /// A hex value containing something other than `0-9a-fA-F`.
    #[error("`{key}` (line {line}): not a hex string: {value:?}")]
    NotHex {
        /// Dotted key path, e.g. `tdx.mrtd[0]`.
        key: String,
        /// 1-based line.
        line: usize,
        /// The string given.
        value: String,
    },
    /// A hex value of the wrong length.
    #[error(
        "`{key}` (line {line}): expected {expected_chars} hex characters ({expected_bytes} bytes), found {found_chars}"
    )]
    HexLength {
        /// Dotted key path.
        key: String,
        /// 1-based line.
        line: usize,
        /// Required length in bytes.
        expected_bytes: usize,
        /// Required length in hex characters.
        expected_chars: usize,
        /// Length given, in characters.
        found_chars: usize,
    },
    /// The same entry twice in one list (hex compared as bytes, so case
    /// does not matter).
    #[error("`{key}` (line {line}): duplicate entry {value}")]
    Duplicate {
        /// Dotted key path of the second occurrence.
        key: String,
        /// 1-based line.
        line: usize,
        /// The repeated value (hex in lowercase).
        value: String,
    },
    /// A list that must not be empty is empty.
    #[error("`{key}` (line {line}): must not be empty")]
    Empty {
        /// Dotted key path.
        key: String,
        /// 1-based line.
        line: usize,
    },
    /// A `nitro.pcrs` / `azure.pcrs` key that is not a decimal integer in
    /// `0..=max`.
    #[error("`{key}` (line {line}): PCR index {value:?} is not a decimal integer in 0..={max}")]
    PcrIndex {
        /// Dotted key path (`nitro.pcrs`, `azure.pcrs`).
        key: String,
        /// 1-based line.
        line: usize,
        /// The key given.
        value: String,
        /// The highest index of the table (31 for Nitro, 23 for a vTPM).
        max: u8,
    },
    /// An all-zero ID_KEY_DIGEST: what a report carries when the guest was
    /// launched without an ID block, so it would "pin" every such guest.
    #[error(
        "`{key}` (line {line}): an all-zero ID_KEY_DIGEST is what a guest launched without an ID \
         block reports; it identifies nothing"
    )]
    ZeroIdKeyDigest {
        /// Dotted key path (`sev_snp.id_key_digests[0]`).
        key: String,
        /// 1-based line.
        line: usize,
    },
    /// A number outside its legal range.
    #[error("`{key}` (line {line}): {value} is out of range {range}")]
    OutOfRange {
        /// Dotted key path.
        key: String,
        /// 1-based line.
        line: usize,
        /// The value given.
        value: u64,
        /// The legal range, e.g. `0..=3`.
        range: &'static str,
    },
    /// A quality gate with neither `min` nor `max`.
    #[error("`{key}` (line {line}): gate for metric {metric:?} needs `min`, `max` or both")]
    GateWithoutBound {
        /// Dotted key path (`quality.gates[0]`).
        key: String,
        /// 1-based line.
        line: usize,
        /// The gate's metric.
        metric: String,
    },
    /// A quality gate bound that is NaN or infinite.
    #[error("`{key}` (line {line}): bound must be a finite number, found {value}")]
    NotFinite {
        /// Dotted key path (`quality.gates[0].max`).
        key: String,
        /// 1-based line.
        line: usize,
        /// The value given.
        value: f64,
    },
    /// A quality gate whose `min` is greater than its `max`.
    #[error("`{key}` (line {line}): gate for metric {metric:?} has min {min} > max {max}")]
    MinAboveMax {
        /// Dotted key path (`quality.gates[0]`).
        key: String,
        /// 1-based line.
        line: usize,
        /// The gate's metric.
        metric: String,
        /// The lower bound.
        min: f64,
        /// The upper bound.
        max: f64,
    },
    /// A string that must be a non-empty name without surrounding or inner
    /// whitespace (gate metric, advisory id) is not.
    #[error("`{key}` (line {line}): {value:?} is not a valid name (non-empty, no whitespace)")]
    BadName {
        /// Dotted key path.
        key: String,
        /// 1-based line.
        line: usize,
        /// The string given.
        value: String,
    },
    /// A policy could not be rendered as TOML (cannot happen for a policy
    /// built by this crate; kept so rendering never panics).
    #[error("policy could not be rendered as TOML: {message}")]
    Render {
        /// toml's message.
        message: String,
    },
}
