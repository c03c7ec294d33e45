//! The one timestamp spelling kolm writes: RFC 3339, UTC, whole seconds,
//! `YYYY-MM-DDTHH:MM:SSZ`. One spelling per instant keeps manifests canonical.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Parses the strict form; anything else (offsets, fractions) is an error.
pub fn parse_utc_seconds(s: &str) -> Result<OffsetDateTime, String> {
    let t = OffsetDateTime::parse(s, &Rfc3339).map_err(|e| format!("not RFC 3339: {e}"))?;
    if format_utc_seconds(t).as_deref() != Ok(s) {
        return Err(format!(
            "{s:?} is not in the form YYYY-MM-DDTHH:MM:SSZ (UTC, whole seconds)"
        ));
    }
    Ok(t)
}

/// Formats an instant in the strict form (sub-second part dropped).
pub fn format_utc_seconds(t: OffsetDateTime) -> Result<String, String> {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .map_err(|e| e.to_string())?;
    t.format(&Rfc3339).map_err(|e| e.to_string())
}

/// Why [`parse_rfc3339`] refused a timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rfc3339Error {
    /// Not an RFC 3339 instant (time's message says where).
    // The cause is part of the message, not a `source`: shown with
    // anyhow's `{:#}`, a source would print it twice.
    #[error("{text:?} is not RFC 3339: {error}")]
    NotRfc3339 {
        text: String,
        error: time::error::Parse,
    },
}

/// Parses any RFC 3339 instant (for `--at`).
pub fn parse_rfc3339(s: &str) -> Result<OffsetDateTime, Rfc3339Error> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|error| Rfc3339Error::NotRfc3339 {
        text: s.to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn a_timestamp_that_is_not_rfc_3339_is_named() {
        let e = super::parse_rfc3339("yesterday").unwrap_err();
        assert!(
            e.to_string().starts_with("\"yesterday\" is not RFC 3339: "),
            "{e}"
        );
    }
}
