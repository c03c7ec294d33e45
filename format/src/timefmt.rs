//! The one timestamp spelling kolm writes: RFC 3339, UTC, whole seconds,
//! `YYYY-MM-DDTHH:MM:SSZ`. One spelling per instant keeps manifests canonical.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Why [`parse_utc_seconds`] or [`format_utc_seconds`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimestampError {
    /// Not an RFC 3339 instant at all (time's message says where).
    // The cause is part of the message, not a `source` (anyhow's `{:#}`
    // would print it twice).
    #[error("not RFC 3339: {error}")]
    NotRfc3339 { error: time::error::Parse },
    /// An RFC 3339 instant, but not kolm's one spelling of it.
    #[error("{text:?} is not in the form YYYY-MM-DDTHH:MM:SSZ (UTC, whole seconds)")]
    NotCanonical { text: String },
    /// The instant has no RFC 3339 spelling (a year outside 0000-9999).
    #[error("{instant} cannot be written as RFC 3339: {error}")]
    Unwritable { instant: String, error: String },
}

/// Parses the strict form; anything else (offsets, fractions) is an error.
pub fn parse_utc_seconds(s: &str) -> Result<OffsetDateTime, TimestampError> {
    let t =
        OffsetDateTime::parse(s, &Rfc3339).map_err(|error| TimestampError::NotRfc3339 { error })?;
    if format_utc_seconds(t).as_deref() != Ok(s) {
        return Err(TimestampError::NotCanonical { text: s.to_owned() });
    }
    Ok(t)
}

/// Formats an instant in the strict form (sub-second part dropped).
pub fn format_utc_seconds(t: OffsetDateTime) -> Result<String, TimestampError> {
    let unwritable = |error: String| TimestampError::Unwritable {
        instant: t.to_string(),
        error,
    };
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .map_err(|e| unwritable(e.to_string()))?;
    t.format(&Rfc3339).map_err(|e| unwritable(e.to_string()))
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

    use super::{TimestampError, format_utc_seconds, parse_utc_seconds};

    #[test]
    fn only_the_one_spelling_parses() {
        let t = parse_utc_seconds("2026-12-07T12:00:00Z").unwrap();
        assert_eq!(format_utc_seconds(t).unwrap(), "2026-12-07T12:00:00Z");
        for other in ["2026-12-07T12:00:00.5Z", "2026-12-07T13:00:00+01:00"] {
            let e = parse_utc_seconds(other).unwrap_err();
            assert!(
                matches!(e, TimestampError::NotCanonical { .. }),
                "{other}: {e}"
            );
            assert!(e.to_string().contains("YYYY-MM-DDTHH:MM:SSZ"), "{e}");
        }
        let e = parse_utc_seconds("tuesday").unwrap_err();
        assert!(matches!(e, TimestampError::NotRfc3339 { .. }), "{e}");
    }

    #[test]
    fn a_timestamp_that_is_not_rfc_3339_is_named() {
        let e = super::parse_rfc3339("yesterday").unwrap_err();
        assert!(
            e.to_string().starts_with("\"yesterday\" is not RFC 3339: "),
            "{e}"
        );
    }
}
