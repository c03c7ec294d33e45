//! `governance/sbom.spdx.json`: the SPDX 2.3 JSON subset kolm writes to
//! describe the runtime build that sealed an artifact, with its strict
//! reader. The enclave builds the document from its embedded `Cargo.lock`
//! (`kolm_enclave::sbom`) and serialises these types; the verifier reads
//! the sealed copy back with [`SpdxDocument::from_json_bytes`].
//!
//! The subset, field by field, is in docs/supply-chain.md. The reader
//! accepts exactly what the writer can produce:
//!
//! - the document's fixed values (`spdxVersion` `SPDX-2.3`, `dataLicense`
//!   `CC0-1.0`, `SPDXID` `SPDXRef-DOCUMENT`) and its keys, no others;
//! - every package typed (SPDX ids unique and of the `SPDXRef-` form,
//!   SHA-256 checksums of 64 lowercase hex digits, `purl` package-manager
//!   references, `filesAnalyzed` false);
//! - relationships only `DESCRIBES` (from the document) and `DEPENDS_ON`
//!   (between listed packages), each naming listed elements.
//!
//! `documentNamespace`, `creationInfo` and `relationships` are optional:
//! the frozen receipt v1/v2 test vectors carry the minimal form
//! (`spdxVersion`, `dataLicense`, `SPDXID`, `name`, `packages`), and the
//! verifier accepted it when they were frozen. The runtime writes all of
//! them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Largest SBOM read (the runtime's is about 200 kB).
pub const MAX_SBOM_BYTES: usize = 8 << 20;

/// `spdxVersion`.
pub const SPDX_VERSION: &str = "SPDX-2.3";
/// `dataLicense` (SPDX 2.3 clause 6.2: always CC0-1.0).
pub const DATA_LICENSE: &str = "CC0-1.0";
/// The document's own `SPDXID`.
pub const DOCUMENT_ID: &str = "SPDXRef-DOCUMENT";
/// A value the document does not assert (SPDX's `NOASSERTION`).
pub const NOASSERTION: &str = "NOASSERTION";

/// The document. Field order is the key order written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpdxDocument {
    pub spdx_version: String,
    pub data_license: String,
    #[serde(rename = "SPDXID")]
    pub spdx_id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_info: Option<CreationInfo>,
    pub packages: Vec<SpdxPackage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relationships: Option<Vec<Relationship>>,
}

/// `creationInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreationInfo {
    /// `YYYY-MM-DDThh:mm:ssZ`.
    pub created: String,
    /// `Tool: kolm-enclave-<version>`.
    pub creators: Vec<String>,
}

/// One package (a crate of the build).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpdxPackage {
    #[serde(rename = "SPDXID")]
    pub spdx_id: String,
    pub name: String,
    pub version_info: String,
    pub download_location: String,
    pub files_analyzed: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checksums: Vec<Checksum>,
    pub external_refs: Vec<ExternalRef>,
    pub license_concluded: String,
    pub license_declared: String,
    pub copyright_text: String,
}

/// A package checksum: SHA-256 only (what `Cargo.lock` records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checksum {
    pub algorithm: ChecksumAlgorithm,
    /// 64 lowercase hex digits.
    pub checksum_value: String,
}

/// `checksums[].algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChecksumAlgorithm {
    #[serde(rename = "SHA256")]
    Sha256,
}

/// A package's `purl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalRef {
    pub reference_category: ReferenceCategory,
    pub reference_type: ReferenceType,
    /// `pkg:cargo/<name>@<version>`.
    pub reference_locator: String,
}

/// `externalRefs[].referenceCategory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReferenceCategory {
    #[serde(rename = "PACKAGE-MANAGER")]
    PackageManager,
}

/// `externalRefs[].referenceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReferenceType {
    #[serde(rename = "purl")]
    Purl,
}

/// One edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Relationship {
    pub spdx_element_id: String,
    pub relationship_type: RelationshipType,
    pub related_spdx_element: String,
}

/// `relationships[].relationshipType`: the two kolm writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelationshipType {
    /// The document describes a root package.
    #[serde(rename = "DESCRIBES")]
    Describes,
    /// A package depends on another (every edge `Cargo.lock` records).
    #[serde(rename = "DEPENDS_ON")]
    DependsOn,
}

/// Why an SBOM was refused. Each names the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SbomError {
    /// Larger than [`MAX_SBOM_BYTES`].
    #[error("SBOM is {len} bytes, over the {max}-byte cap")]
    TooLarge { len: usize, max: usize },
    /// Not JSON of this subset (serde's message names the key).
    #[error("SBOM is not the SPDX 2.3 subset kolm writes: {error}")]
    Shape { error: String },
    /// A fixed value is something else.
    #[error("SBOM `{field}` is {found:?}, not {expected:?}")]
    FixedValue {
        field: &'static str,
        found: String,
        expected: &'static str,
    },
    /// An `SPDXID` not of the `SPDXRef-` form SPDX 2.3 clause 7.2 allows.
    #[error("SBOM package {index}: SPDXID {id:?} is not SPDXRef- followed by [A-Za-z0-9.-]")]
    BadSpdxId { index: usize, id: String },
    /// Two packages share an `SPDXID`.
    #[error("SBOM lists SPDXID {id:?} twice")]
    DuplicateSpdxId { id: String },
    /// A package field that must not be empty is.
    #[error("SBOM package {id}: `{field}` is empty")]
    EmptyField { id: String, field: &'static str },
    /// `filesAnalyzed` true: kolm analyses no files.
    #[error("SBOM package {id}: filesAnalyzed is true (kolm's SBOM analyses no files)")]
    FilesAnalyzed { id: String },
    /// A checksum that is not 64 lowercase hex digits.
    #[error("SBOM package {id}: checksum {value:?} is not 64 lowercase hex digits")]
    BadChecksum { id: String, value: String },
    /// A purl that does not name the package.
    #[error("SBOM package {id}: purl {locator:?} is not pkg:cargo/{name}@{version}")]
    BadPurl {
        id: String,
        locator: String,
        name: String,
        version: String,
    },
    /// `creationInfo.created` not in the one spelling.
    #[error("SBOM creationInfo.created {value:?}: {error}")]
    Created {
        value: String,
        error: crate::timefmt::TimestampError,
    },
    /// No `creators`.
    #[error("SBOM creationInfo.creators is empty")]
    NoCreators,
    /// A relationship naming an element the document does not list.
    #[error("SBOM relationship {index} names {id:?}, which the document does not list")]
    UnknownElement { index: usize, id: String },
    /// `DESCRIBES` from a package, or `DEPENDS_ON` from the document.
    #[error(
        "SBOM relationship {index}: {kind:?} from {from:?} (DESCRIBES comes from the document, DEPENDS_ON from a package)"
    )]
    WrongSource {
        index: usize,
        kind: RelationshipType,
        from: String,
    },
    /// Relationships present but none says what the document describes.
    #[error("SBOM has relationships but none DESCRIBES a package")]
    DescribesNothing,
}

/// The id form SPDX 2.3 clause 7.2 allows for elements.
fn is_spdx_ref(id: &str) -> bool {
    id.strip_prefix("SPDXRef-").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    })
}

fn fixed(field: &'static str, found: &str, expected: &'static str) -> Result<(), SbomError> {
    if found == expected {
        Ok(())
    } else {
        Err(SbomError::FixedValue {
            field,
            found: found.to_owned(),
            expected,
        })
    }
}

impl SpdxPackage {
    fn check(&self, index: usize) -> Result<(), SbomError> {
        if !is_spdx_ref(&self.spdx_id) {
            return Err(SbomError::BadSpdxId {
                index,
                id: self.spdx_id.clone(),
            });
        }
        let id = || self.spdx_id.clone();
        for (field, value) in [
            ("name", &self.name),
            ("versionInfo", &self.version_info),
            ("downloadLocation", &self.download_location),
            ("licenseConcluded", &self.license_concluded),
            ("licenseDeclared", &self.license_declared),
            ("copyrightText", &self.copyright_text),
        ] {
            if value.is_empty() {
                return Err(SbomError::EmptyField { id: id(), field });
            }
        }
        if self.files_analyzed {
            return Err(SbomError::FilesAnalyzed { id: id() });
        }
        for c in &self.checksums {
            let v = &c.checksum_value;
            if v.len() != 64 || !v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(SbomError::BadChecksum {
                    id: id(),
                    value: v.clone(),
                });
            }
        }
        let purl = format!("pkg:cargo/{}@{}", self.name, self.version_info);
        for r in &self.external_refs {
            if r.reference_locator != purl {
                return Err(SbomError::BadPurl {
                    id: id(),
                    locator: r.reference_locator.clone(),
                    name: self.name.clone(),
                    version: self.version_info.clone(),
                });
            }
        }
        Ok(())
    }
}

impl SpdxDocument {
    /// Reads and checks an SBOM: the bytes are JSON of exactly this subset
    /// and every rule of the module header holds.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<SpdxDocument, SbomError> {
        if bytes.len() > MAX_SBOM_BYTES {
            return Err(SbomError::TooLarge {
                len: bytes.len(),
                max: MAX_SBOM_BYTES,
            });
        }
        let doc: SpdxDocument = serde_json::from_slice(bytes).map_err(|e| SbomError::Shape {
            error: e.to_string(),
        })?;
        doc.check()?;
        Ok(doc)
    }

    /// The rules of the module header (the reader runs them; the writer's
    /// tests do too).
    pub fn check(&self) -> Result<(), SbomError> {
        fixed("spdxVersion", &self.spdx_version, SPDX_VERSION)?;
        fixed("dataLicense", &self.data_license, DATA_LICENSE)?;
        fixed("SPDXID", &self.spdx_id, DOCUMENT_ID)?;
        if let Some(info) = &self.creation_info {
            crate::timefmt::parse_utc_seconds(&info.created).map_err(|error| {
                SbomError::Created {
                    value: info.created.clone(),
                    error,
                }
            })?;
            if info.creators.is_empty() {
                return Err(SbomError::NoCreators);
            }
        }
        let mut ids = BTreeSet::new();
        for (index, p) in self.packages.iter().enumerate() {
            p.check(index)?;
            if !ids.insert(p.spdx_id.as_str()) {
                return Err(SbomError::DuplicateSpdxId {
                    id: p.spdx_id.clone(),
                });
            }
        }
        self.check_relationships(&ids)
    }

    fn check_relationships(&self, ids: &BTreeSet<&str>) -> Result<(), SbomError> {
        let Some(relationships) = &self.relationships else {
            return Ok(());
        };
        let mut describes = false;
        for (index, r) in relationships.iter().enumerate() {
            let from_document = r.spdx_element_id == DOCUMENT_ID;
            match (r.relationship_type, from_document) {
                (RelationshipType::Describes, true) => describes = true,
                (RelationshipType::DependsOn, false) => {}
                (kind, _) => {
                    return Err(SbomError::WrongSource {
                        index,
                        kind,
                        from: r.spdx_element_id.clone(),
                    });
                }
            }
            let listed = |id: &str| ids.contains(id);
            for id in [&r.spdx_element_id, &r.related_spdx_element] {
                if !(listed(id) || (from_document && id == &r.spdx_element_id)) {
                    return Err(SbomError::UnknownElement {
                        index,
                        id: id.clone(),
                    });
                }
            }
        }
        if !relationships.is_empty() && !describes {
            return Err(SbomError::DescribesNothing);
        }
        Ok(())
    }

    /// The packages the document describes (`DESCRIBES` relationships), in
    /// document order.
    pub fn described(&self) -> Vec<&SpdxPackage> {
        let Some(relationships) = &self.relationships else {
            return Vec::new();
        };
        relationships
            .iter()
            .filter(|r| r.relationship_type == RelationshipType::Describes)
            .filter_map(|r| {
                self.packages
                    .iter()
                    .find(|p| p.spdx_id == r.related_spdx_element)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    /// The minimal form of the frozen receipt v1/v2 vectors.
    const MINIMAL: &str = r#"{"SPDXID":"SPDXRef-DOCUMENT","dataLicense":"CC0-1.0","name":"test","packages":[],"spdxVersion":"SPDX-2.3"}"#;

    fn full() -> serde_json::Value {
        serde_json::json!({
            "spdxVersion": "SPDX-2.3",
            "dataLicense": "CC0-1.0",
            "SPDXID": "SPDXRef-DOCUMENT",
            "name": "app-0.1.0",
            "documentNamespace": "https://spdx.kolm.invalid/app/0.1.0/00",
            "creationInfo": {"created": "2025-01-02T03:04:05Z", "creators": ["Tool: kolm-enclave-0.1.0"]},
            "packages": [
                {"SPDXID": "SPDXRef-Package-app-0.1.0", "name": "app", "versionInfo": "0.1.0",
                 "downloadLocation": "NOASSERTION", "filesAnalyzed": false,
                 "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                   "referenceLocator": "pkg:cargo/app@0.1.0"}],
                 "licenseConcluded": "NOASSERTION", "licenseDeclared": "Apache-2.0",
                 "copyrightText": "NOASSERTION"},
                {"SPDXID": "SPDXRef-Package-dep-1.0.0", "name": "dep", "versionInfo": "1.0.0",
                 "downloadLocation": "https://crates.io/api/v1/crates/dep/1.0.0/download",
                 "filesAnalyzed": false,
                 "checksums": [{"algorithm": "SHA256", "checksumValue": "11".repeat(32)}],
                 "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                   "referenceLocator": "pkg:cargo/dep@1.0.0"}],
                 "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION",
                 "copyrightText": "NOASSERTION"}
            ],
            "relationships": [
                {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                 "relatedSpdxElement": "SPDXRef-Package-app-0.1.0"},
                {"spdxElementId": "SPDXRef-Package-app-0.1.0", "relationshipType": "DEPENDS_ON",
                 "relatedSpdxElement": "SPDXRef-Package-dep-1.0.0"}
            ]
        })
    }

    fn read(v: &serde_json::Value) -> Result<SpdxDocument, SbomError> {
        SpdxDocument::from_json_bytes(&serde_json::to_vec(v).unwrap())
    }

    #[test]
    fn the_frozen_vectors_minimal_form_and_the_full_form_are_read() {
        let doc = SpdxDocument::from_json_bytes(MINIMAL.as_bytes()).unwrap();
        assert!(doc.packages.is_empty() && doc.relationships.is_none());
        let doc = read(&full()).unwrap();
        assert_eq!(doc.described()[0].name, "app");
    }

    #[test]
    fn the_writer_and_the_reader_round_trip_byte_for_byte() {
        let doc = read(&full()).unwrap();
        let bytes = serde_json::to_vec_pretty(&doc).unwrap();
        let again = SpdxDocument::from_json_bytes(&bytes).unwrap();
        assert_eq!(again, doc);
        assert_eq!(serde_json::to_vec_pretty(&again).unwrap(), bytes);
    }

    #[test]
    fn every_broken_rule_is_named() {
        type Edit = fn(&mut serde_json::Value);
        let cases: [(Edit, &str); 14] = [
            (|d| d["spdxVersion"] = "SPDX-2.2".into(), "spdxVersion"),
            (|d| d["dataLicense"] = "MIT".into(), "dataLicense"),
            (|d| d["SPDXID"] = "SPDXRef-X".into(), "SPDXID"),
            (|d| d["extra"] = 1.into(), "unknown field `extra`"),
            (
                |d| d["packages"][0]["color"] = 1.into(),
                "unknown field `color`",
            ),
            (
                |d| d["packages"][1]["SPDXID"] = "Package-dep".into(),
                "is not SPDXRef-",
            ),
            (
                |d| d["packages"][1]["SPDXID"] = "SPDXRef-Package-app-0.1.0".into(),
                "twice",
            ),
            (|d| d["packages"][0]["name"] = "".into(), "`name` is empty"),
            (
                |d| d["packages"][0]["filesAnalyzed"] = true.into(),
                "filesAnalyzed",
            ),
            (
                |d| d["packages"][1]["checksums"][0]["checksumValue"] = "AB".repeat(32).into(),
                "lowercase hex",
            ),
            (
                |d| d["packages"][1]["checksums"][0]["algorithm"] = "MD5".into(),
                "MD5",
            ),
            (
                |d| {
                    d["packages"][1]["externalRefs"][0]["referenceLocator"] =
                        "pkg:cargo/evil@1.0.0".into()
                },
                "purl",
            ),
            (
                |d| d["creationInfo"]["created"] = "2025-01-02T03:04:05.5Z".into(),
                "creationInfo.created",
            ),
            (
                |d| d["relationships"][1]["relatedSpdxElement"] = "SPDXRef-Package-gone-1".into(),
                "does not list",
            ),
        ];
        for (edit, says) in cases {
            let mut d = full();
            edit(&mut d);
            let e = read(&d).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        let mut d = full();
        d["relationships"][0]["spdxElementId"] = "SPDXRef-Package-dep-1.0.0".into();
        assert!(matches!(read(&d), Err(SbomError::WrongSource { .. })));
        let mut d = full();
        d["relationships"] = serde_json::json!([d["relationships"][1].clone()]);
        assert_eq!(read(&d).unwrap_err(), SbomError::DescribesNothing);
        let mut d = full();
        d["creationInfo"]["creators"] = serde_json::json!([]);
        assert_eq!(read(&d).unwrap_err(), SbomError::NoCreators);
        let big = vec![b' '; MAX_SBOM_BYTES + 1];
        assert!(matches!(
            SpdxDocument::from_json_bytes(&big),
            Err(SbomError::TooLarge { .. })
        ));
    }
}
