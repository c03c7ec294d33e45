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

/// Parses any RFC 3339 instant (for `--at`).
pub fn parse_rfc3339(s: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|e| format!("{s:?} is not RFC 3339: {e}"))
}
