//! The receipt spec versions and the names each one fixes: the manifest and
//! evidence-index schemas, the receipt's COSE content type and external
//! AAD, and the report-data domain.
//!
//! | | v1 ([receipt-v1.md]) | v2 ([receipt-v2.md]) |
//! |---|---|---|
//! | manifest `schema` | `kolm.manifest.v1` | `kolm.manifest.v2` |
//! | evidence index `schema` | `kolm.evidence.v1` | `kolm.evidence.v2` |
//! | COSE content type | `application/vnd.kolm.manifest.v1+json` | `application/vnd.kolm.manifest.v2+json` |
//! | COSE external AAD | `kolm/receipt/v1` | `kolm/receipt/v2` |
//! | report-data domain | `kolm/receipt/v1/report-data\0` | `kolm/receipt/v2/report-data\0` |
//!
//! Every name differs between the versions, so no byte string of one
//! version is ever read as the other: a v2 receipt does not verify under v1
//! rules, and a v1 report data never binds a v2 manifest. v1 is frozen (its
//! bytes, vector and tests); the enclave writes v2.
//!
//! [receipt-v1.md]: ../../docs/receipt-v1.md
//! [receipt-v2.md]: ../../docs/receipt-v2.md

use std::fmt;

/// A receipt spec version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpecVersion {
    /// `docs/receipt-v1.md`: collateral outside the signature (frozen).
    V1,
    /// `docs/receipt-v2.md`: collateral digests listed in the signed
    /// manifest (`evidence.collateral`).
    V2,
}

impl SpecVersion {
    /// Every version, oldest first.
    pub const ALL: [SpecVersion; 2] = [SpecVersion::V1, SpecVersion::V2];

    /// The version the enclave writes.
    pub const CURRENT: SpecVersion = SpecVersion::V2;

    /// The manifest's `schema` value.
    pub const fn manifest_schema(self) -> &'static str {
        match self {
            SpecVersion::V1 => crate::manifest::MANIFEST_SCHEMA_V1,
            SpecVersion::V2 => crate::manifest::MANIFEST_SCHEMA_V2,
        }
    }

    /// The evidence index's `schema` value.
    pub const fn evidence_schema(self) -> &'static str {
        match self {
            SpecVersion::V1 => crate::evidence::EVIDENCE_SCHEMA_V1,
            SpecVersion::V2 => crate::evidence::EVIDENCE_SCHEMA_V2,
        }
    }

    /// The receipt's COSE content type (37 bytes in both versions, so the
    /// protected header keeps its 78-byte layout).
    pub const fn content_type(self) -> &'static str {
        match self {
            SpecVersion::V1 => crate::receipt::CONTENT_TYPE,
            SpecVersion::V2 => crate::receipt::CONTENT_TYPE_V2,
        }
    }

    /// The receipt's COSE external AAD.
    pub const fn external_aad(self) -> &'static [u8] {
        match self {
            SpecVersion::V1 => crate::receipt::EXTERNAL_AAD,
            SpecVersion::V2 => crate::receipt::EXTERNAL_AAD_V2,
        }
    }

    /// The report-data domain separator (NUL-terminated).
    pub const fn report_data_domain(self) -> &'static [u8] {
        match self {
            SpecVersion::V1 => crate::binding::REPORT_DATA_DOMAIN,
            SpecVersion::V2 => crate::binding::REPORT_DATA_DOMAIN_V2,
        }
    }

    /// The version whose manifest schema is `schema`.
    pub fn of_manifest_schema(schema: &str) -> Option<SpecVersion> {
        SpecVersion::ALL
            .into_iter()
            .find(|v| v.manifest_schema() == schema)
    }

    /// The version whose evidence-index schema is `schema`.
    pub fn of_evidence_schema(schema: &str) -> Option<SpecVersion> {
        SpecVersion::ALL
            .into_iter()
            .find(|v| v.evidence_schema() == schema)
    }

    /// `v1`, `v2`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SpecVersion::V1 => "v1",
            SpecVersion::V2 => "v2",
        }
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::SpecVersion;

    #[test]
    fn every_name_differs_between_versions() {
        let [a, b] = SpecVersion::ALL;
        assert_ne!(a.manifest_schema(), b.manifest_schema());
        assert_ne!(a.evidence_schema(), b.evidence_schema());
        assert_ne!(a.content_type(), b.content_type());
        assert_ne!(a.external_aad(), b.external_aad());
        assert_ne!(a.report_data_domain(), b.report_data_domain());
        assert_eq!(a.content_type().len(), b.content_type().len());
        for v in SpecVersion::ALL {
            assert_eq!(
                SpecVersion::of_manifest_schema(v.manifest_schema()),
                Some(v)
            );
            assert_eq!(
                SpecVersion::of_evidence_schema(v.evidence_schema()),
                Some(v)
            );
            assert_eq!(SpecVersion::of_manifest_schema(v.evidence_schema()), None);
        }
    }
}
