//! SPDX 2.3 JSON software bill of materials (SBOM) of the kolm runtime build.
//!
//! Sealed artifacts carry an SBOM describing the runtime build that produced
//! them. The source of truth is the workspace `Cargo.lock`, embedded at compile
//! time, so the SBOM always describes the exact resolution this binary was
//! built from. The runtime is two binaries of one workspace build: the
//! supervisor (`kolm-enclave`, this crate) and the job binary its sandbox
//! execs (`kolm-jobs`, which links the ML crates this one does not). The
//! document describes both root packages and lists the union of their
//! dependency closures as recorded in the lock:
//!
//! - `Cargo.lock` does not say which edges are normal, build or dev
//!   dependencies, nor which are target-specific (e.g. `windows-sys`), so the
//!   closure is a superset of what is linked into the binary: every edge the
//!   lock records is followed.
//! - `Cargo.lock` carries no licence data. Registry crates get
//!   `licenseDeclared: NOASSERTION`; path crates (no `source` in the lock) are
//!   this workspace's members and are declared [`WORKSPACE_LICENSE`]
//!   (`kolm-tests` checks both halves of that claim).
//!
//! The output is deterministic: the same lock, root and `created` timestamp
//! give byte-identical JSON (fixed key order, sorted packages and
//! relationships, no clock read). `docs/supply-chain.md` describes the fields.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use kolm_format::sbom::{
    self, Checksum, ChecksumAlgorithm, CreationInfo, ExternalRef, ReferenceCategory, ReferenceType,
    Relationship, RelationshipType, SpdxDocument, SpdxPackage,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, UtcOffset};

/// The workspace `Cargo.lock` this crate was compiled against.
const RUNTIME_LOCK: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"));

/// The packages whose build [`runtime_sbom`] describes: the supervisor
/// first (it names the document), then the job binary.
pub const RUNTIME_ROOTS: [&str; 2] = ["kolm-enclave", "kolm-jobs"];

/// Licence of every workspace member (`[workspace.package] license`).
pub const WORKSPACE_LICENSE: &str = "Apache-2.0";

/// Prefix of `documentNamespace`; `.invalid` (RFC 2606) so it never resolves.
const NAMESPACE_PREFIX: &str = "https://spdx.kolm.invalid";

/// `Cargo.lock` format versions whose `[[package]]` layout this module reads.
const SUPPORTED_LOCK_VERSIONS: [u32; 2] = [3, 4];

/// Source strings that denote crates.io (git index and sparse index).
const CRATES_IO_SOURCES: [&str; 2] = [
    "registry+https://github.com/rust-lang/crates.io-index",
    "sparse+https://index.crates.io/",
];

use kolm_format::sbom::NOASSERTION;

/// Why an SBOM could not be produced.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SbomError {
    /// The lock text is not TOML of the `Cargo.lock` shape.
    // The cause is part of the message, not a `source` (no doubled text).
    #[error("Cargo.lock does not parse: {0}")]
    LockParse(toml::de::Error),
    /// The lock declares a format version this module does not read.
    #[error("unsupported Cargo.lock version {found:?} (supported: 3, 4)")]
    UnsupportedLockVersion {
        /// The `version` key of the lock, if any.
        found: Option<u32>,
    },
    /// Two `[[package]]` entries share name, version and source.
    #[error("Cargo.lock lists package `{package}` more than once")]
    DuplicatePackage {
        /// `name version` of the duplicate.
        package: String,
    },
    /// A `checksum` is not 64 hex digits.
    #[error("package `{package}` has a malformed checksum `{checksum}`")]
    MalformedChecksum {
        /// `name version` of the package.
        package: String,
        /// The checksum as written in the lock.
        checksum: String,
    },
    /// A `dependencies` entry is not `name`, `name version` or
    /// `name version (source)`.
    #[error("package `{package}` has a malformed dependency entry `{dependency}`")]
    MalformedDependency {
        /// `name version` of the depending package.
        package: String,
        /// The entry as written in the lock.
        dependency: String,
    },
    /// A `dependencies` entry matches no `[[package]]`.
    #[error("package `{package}` depends on `{dependency}`, which Cargo.lock does not list")]
    UnresolvedDependency {
        /// `name version` of the depending package.
        package: String,
        /// The entry as written in the lock.
        dependency: String,
    },
    /// A `dependencies` entry matches more than one `[[package]]`.
    #[error("package `{package}` depends on `{dependency}`, which matches {candidates} packages")]
    AmbiguousDependency {
        /// `name version` of the depending package.
        package: String,
        /// The entry as written in the lock.
        dependency: String,
        /// How many packages match.
        candidates: usize,
    },
    /// The root package is not in the lock.
    #[error("root package `{root}` is not in Cargo.lock")]
    RootNotFound {
        /// The root as requested.
        root: String,
    },
    /// The root spec matches more than one package.
    #[error("root package `{root}` matches {candidates} packages in Cargo.lock")]
    AmbiguousRoot {
        /// The root as requested.
        root: String,
        /// How many packages match.
        candidates: usize,
    },
    /// Two packages in the closure map to the same SPDX identifier.
    #[error("packages `{first}` and `{second}` both map to SPDX identifier `{id}`")]
    SpdxIdCollision {
        /// The shared identifier.
        id: String,
        /// `name version` of the first package.
        first: String,
        /// `name version` of the second package.
        second: String,
    },
    /// `created` is not an RFC 3339 timestamp SPDX can carry.
    #[error("creation timestamp `{value}` is invalid: {reason}")]
    InvalidTimestamp {
        /// The timestamp as supplied.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// JSON serialisation failed.
    #[error("SBOM serialisation failed: {0}")]
    Serialize(serde_json::Error),
}

/// SBOM of this runtime build; `created` is an RFC 3339 UTC timestamp supplied by the caller.
///
/// The document describes `kolm-enclave` and `kolm-jobs` ([`RUNTIME_ROOTS`])
/// and their dependency closures as resolved by the workspace `Cargo.lock`
/// embedded at compile time.
///
/// A build without the `sim` feature (the hardware images) links no
/// simulated TEE, so its document leaves `kolm-sim-tee` out: the lock
/// records that optional edge whatever the features, and following it would
/// list the sim crate and what only it pulls in (rsa, coset).
pub fn runtime_sbom(created: &str) -> Result<Vec<u8>, SbomError> {
    sbom_from_lock_roots_without(RUNTIME_LOCK, &RUNTIME_ROOTS, NOT_LINKED, created)
}

/// Packages of the lock this build does not link ([`runtime_sbom`]).
const NOT_LINKED: &[&str] = if cfg!(feature = "sim") {
    &[]
} else {
    &["kolm-sim-tee"]
};

/// Same from an arbitrary lock text and one root package (for tests).
///
/// `root` is written like a lock dependency entry: `name`, `name version` or
/// `name version (source)`. `created` is an RFC 3339 timestamp without
/// fractional seconds; it is normalised to UTC (`YYYY-MM-DDThh:mm:ssZ`).
pub fn sbom_from_lock(lock: &str, root: &str, created: &str) -> Result<Vec<u8>, SbomError> {
    sbom_from_lock_roots(lock, &[root], created)
}

/// Same for several root packages: the document describes each (in the
/// order given; the first names the document) and lists the union of their
/// closures.
pub fn sbom_from_lock_roots(
    lock: &str,
    roots: &[&str],
    created: &str,
) -> Result<Vec<u8>, SbomError> {
    sbom_from_lock_roots_without(lock, roots, &[], created)
}

/// Same, not following any edge to a package named in `without` (a
/// dependency this build does not link: an optional one whose feature is
/// off). What only such a package pulls in is left out too.
pub fn sbom_from_lock_roots_without(
    lock: &str,
    roots: &[&str],
    without: &[&str],
    created: &str,
) -> Result<Vec<u8>, SbomError> {
    let created = spdx_timestamp(created)?;
    let lock_file: LockFile = toml::from_str(lock).map_err(SbomError::LockParse)?;
    if !lock_file
        .version
        .is_some_and(|v| SUPPORTED_LOCK_VERSIONS.contains(&v))
    {
        return Err(SbomError::UnsupportedLockVersion {
            found: lock_file.version,
        });
    }
    let graph = LockGraph::new(lock_file.package)?;
    let mut root_indices = Vec::new();
    for root in roots {
        let index = graph.resolve_root(root)?;
        if !root_indices.contains(&index) {
            root_indices.push(index);
        }
    }
    if root_indices.is_empty() {
        return Err(SbomError::RootNotFound {
            root: String::new(),
        });
    }
    let closure = graph.closure(&root_indices, without)?;
    let document = build_document(&graph, &root_indices, &closure, &lock_sha256(lock), created)?;
    let mut bytes = serde_json::to_vec_pretty(&document).map_err(SbomError::Serialize)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Parses an RFC 3339 timestamp and renders it the way SPDX 2.3 wants it.
fn spdx_timestamp(value: &str) -> Result<String, SbomError> {
    let invalid = |reason| SbomError::InvalidTimestamp {
        value: value.to_owned(),
        reason,
    };
    let parsed =
        OffsetDateTime::parse(value, &Rfc3339).map_err(|_| invalid("not an RFC 3339 timestamp"))?;
    if parsed.nanosecond() != 0 {
        // SPDX `created` has whole seconds; truncating would silently change it.
        return Err(invalid("SPDX timestamps have no fractional seconds"));
    }
    parsed
        .to_offset(UtcOffset::UTC)
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .map_err(|_| invalid("outside the years 0000-9999"))
}

fn lock_sha256(lock: &str) -> String {
    hex::encode(Sha256::digest(lock.as_bytes()))
}

// ---------------------------------------------------------------------------
// Cargo.lock model

#[derive(Debug, Deserialize)]
struct LockFile {
    version: Option<u32>,
    #[serde(default)]
    package: Vec<LockPackage>,
}

#[derive(Debug, Deserialize)]
struct LockPackage {
    name: String,
    version: String,
    source: Option<String>,
    checksum: Option<String>,
    #[serde(default)]
    dependencies: Vec<String>,
}

impl LockPackage {
    fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }

    fn matches(&self, spec: &DependencySpec<'_>) -> bool {
        self.name == spec.name
            && spec.version.is_none_or(|v| v == self.version)
            && spec
                .source
                .is_none_or(|s| Some(s) == self.source.as_deref())
    }
}

/// A parsed `dependencies` entry: `name`, `name version` or
/// `name version (source)`.
#[derive(Debug)]
struct DependencySpec<'a> {
    name: &'a str,
    version: Option<&'a str>,
    source: Option<&'a str>,
}

impl<'a> DependencySpec<'a> {
    fn parse(entry: &'a str) -> Option<Self> {
        let (name, rest) = match entry.split_once(' ') {
            None => (entry, None),
            Some((name, rest)) => (name, Some(rest)),
        };
        let (version, source) = match rest {
            None => (None, None),
            Some(rest) => match rest.split_once(' ') {
                None => (Some(rest), None),
                Some((version, source)) => {
                    let source = source.strip_prefix('(')?.strip_suffix(')')?;
                    (Some(version), Some(source))
                }
            },
        };
        let well_formed = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
        if !well_formed(name) || !version.is_none_or(well_formed) || !source.is_none_or(well_formed)
        {
            return None;
        }
        Some(Self {
            name,
            version,
            source,
        })
    }
}

/// The lock's packages, validated, with a lookup by name.
#[derive(Debug)]
struct LockGraph {
    packages: Vec<LockPackage>,
    by_name: BTreeMap<String, Vec<usize>>,
}

impl LockGraph {
    fn new(packages: Vec<LockPackage>) -> Result<Self, SbomError> {
        let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for (index, package) in packages.iter().enumerate() {
            if !seen.insert((&package.name, &package.version, &package.source)) {
                return Err(SbomError::DuplicatePackage {
                    package: package.label(),
                });
            }
            if let Some(checksum) = &package.checksum
                && (checksum.len() != 64 || !checksum.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(SbomError::MalformedChecksum {
                    package: package.label(),
                    checksum: checksum.clone(),
                });
            }
            by_name.entry(package.name.clone()).or_default().push(index);
        }
        Ok(Self { packages, by_name })
    }

    fn package(&self, index: usize) -> &LockPackage {
        // Invariant: every index handed around comes from `by_name`, which
        // only holds indices into `packages`.
        &self.packages[index]
    }

    fn candidates(&self, spec: &DependencySpec<'_>) -> Vec<usize> {
        self.by_name
            .get(spec.name)
            .map(|indices| {
                indices
                    .iter()
                    .copied()
                    .filter(|&i| self.package(i).matches(spec))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn resolve_root(&self, root: &str) -> Result<usize, SbomError> {
        let not_found = || SbomError::RootNotFound {
            root: root.to_owned(),
        };
        let spec = DependencySpec::parse(root).ok_or_else(not_found)?;
        match self.candidates(&spec).as_slice() {
            [] => Err(not_found()),
            [index] => Ok(*index),
            many => Err(SbomError::AmbiguousRoot {
                root: root.to_owned(),
                candidates: many.len(),
            }),
        }
    }

    fn resolve_dependency(&self, from: usize, entry: &str) -> Result<usize, SbomError> {
        let package = || self.package(from).label();
        let spec = DependencySpec::parse(entry).ok_or_else(|| SbomError::MalformedDependency {
            package: package(),
            dependency: entry.to_owned(),
        })?;
        match self.candidates(&spec).as_slice() {
            [] => Err(SbomError::UnresolvedDependency {
                package: package(),
                dependency: entry.to_owned(),
            }),
            [index] => Ok(*index),
            many => Err(SbomError::AmbiguousDependency {
                package: package(),
                dependency: entry.to_owned(),
                candidates: many.len(),
            }),
        }
    }

    /// Every package reachable from `roots`, with the lock's edges among
    /// them.
    fn closure(&self, roots: &[usize], without: &[&str]) -> Result<Closure, SbomError> {
        let mut nodes: BTreeSet<usize> = roots.iter().copied().collect();
        let mut edges = BTreeSet::new();
        let mut queue = roots.to_vec();
        while let Some(from) = queue.pop() {
            for entry in &self.package(from).dependencies {
                let to = self.resolve_dependency(from, entry)?;
                // A package's dev-dependency on itself (to turn on a
                // test-only feature) is no dependency.
                if to == from || without.contains(&self.package(to).name.as_str()) {
                    continue;
                }
                edges.insert((from, to));
                if nodes.insert(to) {
                    queue.push(to);
                }
            }
        }
        Ok(Closure { nodes, edges })
    }
}

#[derive(Debug)]
struct Closure {
    nodes: BTreeSet<usize>,
    edges: BTreeSet<(usize, usize)>,
}

// ---------------------------------------------------------------------------
// The document: kolm_format::sbom's types (the verifier reads the sealed
// copy with the same types' strict reader).

fn build_document(
    graph: &LockGraph,
    roots: &[usize],
    closure: &Closure,
    lock_digest: &str,
    created: String,
) -> Result<SpdxDocument, SbomError> {
    let mut order: Vec<usize> = closure.nodes.iter().copied().collect();
    order.sort_by(|&a, &b| package_order(graph.package(a), graph.package(b)));

    let mut ids: BTreeMap<usize, String> = BTreeMap::new();
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for &index in &order {
        let package = graph.package(index);
        let id = spdx_package_id(&package.name, &package.version);
        if let Some(&other) = owners.get(&id) {
            return Err(SbomError::SpdxIdCollision {
                id,
                first: graph.package(other).label(),
                second: package.label(),
            });
        }
        owners.insert(id.clone(), index);
        ids.insert(index, id);
    }
    // Every closure node (the only indices used below) was given an id above.
    let id_of = |index: usize| ids.get(&index).cloned().unwrap_or_default();

    let packages = order
        .iter()
        .map(|&index| spdx_package(graph.package(index), id_of(index)))
        .collect();

    let mut depends_on: Vec<(String, String)> = closure
        .edges
        .iter()
        .map(|&(from, to)| (id_of(from), id_of(to)))
        .collect();
    depends_on.sort();
    let mut relationships: Vec<Relationship> = roots
        .iter()
        .map(|&root| Relationship {
            spdx_element_id: sbom::DOCUMENT_ID.to_owned(),
            relationship_type: RelationshipType::Describes,
            related_spdx_element: id_of(root),
        })
        .collect();
    relationships.extend(depends_on.into_iter().map(|(from, to)| Relationship {
        spdx_element_id: from,
        relationship_type: RelationshipType::DependsOn,
        related_spdx_element: to,
    }));

    // Invariant: the caller passes at least one root.
    let root_package = graph.package(roots.first().copied().unwrap_or_default());
    Ok(SpdxDocument {
        spdx_version: sbom::SPDX_VERSION.to_owned(),
        data_license: sbom::DATA_LICENSE.to_owned(),
        spdx_id: sbom::DOCUMENT_ID.to_owned(),
        name: format!("{}-{}", root_package.name, root_package.version),
        document_namespace: Some(format!(
            "{NAMESPACE_PREFIX}/{}/{}/{lock_digest}",
            root_package.name, root_package.version
        )),
        creation_info: Some(CreationInfo {
            created,
            creators: vec![format!("Tool: kolm-enclave-{}", env!("CARGO_PKG_VERSION"))],
        }),
        packages,
        relationships: Some(relationships),
    })
}

fn spdx_package(package: &LockPackage, spdx_id: String) -> SpdxPackage {
    let (download_location, license_declared) = match package.source.as_deref() {
        // No source: a path dependency, i.e. a workspace member.
        None => (NOASSERTION.to_owned(), WORKSPACE_LICENSE),
        Some(source) if CRATES_IO_SOURCES.contains(&source) => (
            format!(
                "https://crates.io/api/v1/crates/{}/{}/download",
                package.name, package.version
            ),
            NOASSERTION,
        ),
        // Other registries and git sources: deny.toml admits none of them.
        Some(_) => (NOASSERTION.to_owned(), NOASSERTION),
    };
    SpdxPackage {
        spdx_id,
        name: package.name.clone(),
        version_info: package.version.clone(),
        download_location,
        files_analyzed: false,
        checksums: package
            .checksum
            .iter()
            .map(|sum| Checksum {
                algorithm: ChecksumAlgorithm::Sha256,
                checksum_value: sum.to_ascii_lowercase(),
            })
            .collect(),
        external_refs: vec![ExternalRef {
            reference_category: ReferenceCategory::PackageManager,
            reference_type: ReferenceType::Purl,
            reference_locator: format!("pkg:cargo/{}@{}", package.name, package.version),
        }],
        license_concluded: NOASSERTION.to_owned(),
        license_declared: license_declared.to_owned(),
        copyright_text: NOASSERTION.to_owned(),
    }
}

/// `SPDXRef-Package-<name>-<version>` with every character outside
/// `[A-Za-z0-9.-]` replaced by `-` (SPDX 2.3 clause 7.2).
fn spdx_package_id(name: &str, version: &str) -> String {
    format!("SPDXRef-Package-{name}-{version}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Orders by name, then version (numeric where both components are
/// numbers, so 0.9 < 0.10), then source.
fn package_order(a: &LockPackage, b: &LockPackage) -> Ordering {
    a.name
        .cmp(&b.name)
        .then_with(|| version_order(&a.version, &b.version))
        .then_with(|| a.source.cmp(&b.source))
}

fn version_order(a: &str, b: &str) -> Ordering {
    let split =
        |v: &'_ str| -> Vec<String> { v.split(['.', '-', '+']).map(str::to_owned).collect() };
    let (left, right) = (split(a), split(b));
    for (l, r) in left.iter().zip(&right) {
        let ord = match (l.parse::<u64>(), r.parse::<u64>()) {
            (Ok(l), Ok(r)) => l.cmp(&r),
            _ => l.cmp(r),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    left.len().cmp(&right.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const CREATED: &str = "2025-01-02T03:04:05Z";

    const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

    /// A small lock: `app` depends on `lib_a` (path) and `dup 1.0.0`;
    /// `lib_a` depends on `dup 2.0.0 (crates.io)`; `unrelated` is outside
    /// the closure of `app` and depends on `other`.
    fn test_lock() -> String {
        format!(
            r#"version = 4

[[package]]
name = "app"
version = "0.3.0"
dependencies = [
 "dup 1.0.0",
 "lib_a",
]

[[package]]
name = "dup"
version = "1.0.0"
source = "{CRATES_IO}"
checksum = "{sum1}"

[[package]]
name = "dup"
version = "2.0.0"
source = "{CRATES_IO}"
checksum = "{sum2}"

[[package]]
name = "lib_a"
version = "0.3.0"
dependencies = [
 "dup 2.0.0 ({CRATES_IO})",
]

[[package]]
name = "other"
version = "1.0.0"
source = "{CRATES_IO}"

[[package]]
name = "unrelated"
version = "0.1.0"
dependencies = [
 "other",
]
"#,
            sum1 = "11".repeat(32),
            sum2 = "22".repeat(32),
        )
    }

    fn json(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("SBOM is JSON")
    }

    fn package_names(doc: &Value) -> Vec<(String, String)> {
        doc["packages"]
            .as_array()
            .expect("packages array")
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().expect("name").to_owned(),
                    p["versionInfo"].as_str().expect("versionInfo").to_owned(),
                )
            })
            .collect()
    }

    fn find_package<'a>(doc: &'a Value, name: &str) -> &'a Value {
        doc["packages"]
            .as_array()
            .expect("packages array")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("package {name} missing from SBOM"))
    }

    #[test]
    fn runtime_sbom_is_read_back_by_the_verifiers_strict_reader() {
        let bytes = runtime_sbom(CREATED).expect("runtime SBOM");
        let doc = SpdxDocument::from_json_bytes(&bytes).expect("the strict reader accepts it");
        let described: Vec<&str> = doc.described().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(described, RUNTIME_ROOTS);
        // One piece of code writes and reads it: re-serialised, the same bytes.
        let mut again = serde_json::to_vec_pretty(&doc).expect("serialises");
        again.push(b'\n');
        assert_eq!(again, bytes);
    }

    #[test]
    fn runtime_sbom_is_deterministic() {
        let first = runtime_sbom(CREATED).expect("sbom");
        let second = runtime_sbom(CREATED).expect("sbom");
        assert_eq!(first, second);
        let other_spelling = runtime_sbom("2025-01-02T04:04:05+01:00").expect("sbom");
        assert_eq!(first, other_spelling, "same instant, same bytes");
    }

    #[test]
    fn runtime_sbom_has_required_top_level_fields() {
        let doc = json(&runtime_sbom(CREATED).expect("sbom"));
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(doc["spdxVersion"], "SPDX-2.3");
        assert_eq!(doc["dataLicense"], "CC0-1.0");
        assert_eq!(doc["SPDXID"], "SPDXRef-DOCUMENT");
        assert_eq!(doc["name"], format!("kolm-enclave-{version}"));
        assert_eq!(
            doc["documentNamespace"],
            format!(
                "https://spdx.kolm.invalid/kolm-enclave/{version}/{}",
                lock_sha256(RUNTIME_LOCK)
            )
        );
        assert_eq!(doc["creationInfo"]["created"], CREATED);
        assert_eq!(
            doc["creationInfo"]["creators"],
            serde_json::json!([format!("Tool: kolm-enclave-{version}")])
        );
        let keys: Vec<&str> = doc
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        for key in ["packages", "relationships", "creationInfo"] {
            assert!(keys.contains(&key), "missing top-level key {key}");
        }
    }

    #[test]
    fn runtime_sbom_lists_workspace_and_registry_crates() {
        let doc = json(&runtime_sbom(CREATED).expect("sbom"));
        let enclave = find_package(&doc, "kolm-enclave");
        assert_eq!(enclave["downloadLocation"], NOASSERTION);
        assert_eq!(enclave["licenseDeclared"], WORKSPACE_LICENSE);
        assert!(enclave.get("checksums").is_none());
        let format = find_package(&doc, "kolm-format");
        assert_eq!(format["licenseDeclared"], WORKSPACE_LICENSE);

        let ring = find_package(&doc, "ring");
        let version = ring["versionInfo"].as_str().expect("version");
        assert_eq!(
            ring["downloadLocation"],
            format!("https://crates.io/api/v1/crates/ring/{version}/download")
        );
        assert_eq!(ring["checksums"][0]["algorithm"], "SHA256");
        let sum = ring["checksums"][0]["checksumValue"]
            .as_str()
            .expect("checksum");
        assert_eq!(sum.len(), 64);
        assert!(RUNTIME_LOCK.contains(&format!("checksum = \"{sum}\"")));
        assert_eq!(
            ring["externalRefs"][0]["referenceLocator"],
            format!("pkg:cargo/ring@{version}")
        );
        assert_eq!(ring["licenseDeclared"], NOASSERTION);
        assert_eq!(ring["filesAnalyzed"], false);

        // Crates outside kolm-enclave's closure stay out: the TEE verifiers
        // belong to kolm-verifier, which the enclave never links. `rsa` is
        // the one exception: the simulated TEE generates its stand-in
        // SEV-SNP ARK and ASK keys with it (ring cannot generate RSA keys).
        let rsa = find_package(&doc, "rsa");
        assert!(rsa["versionInfo"].as_str().is_some_and(|v| !v.is_empty()));
        // The job binary's crates are the runtime's too: kolm-jobs and the
        // ML crates it links (the supervisor links none of them).
        for present in ["kolm-jobs", "kolm-model", "kolm-train", "candle-core"] {
            assert!(
                package_names(&doc).iter().any(|(n, _)| n == present),
                "{present} is part of the runtime build (kolm-jobs)"
            );
        }
        for absent in [
            "kolm-host",
            "kolm-images",
            "kolm-tests",
            "kolm-verifier",
            "kolm-verify",
            "dcap-qvl",
            "sev",
            "x509-cert",
            "p384",
            "p256",
        ] {
            assert!(
                !package_names(&doc).iter().any(|(n, _)| n == absent),
                "{absent} is not a dependency of kolm-enclave or kolm-jobs"
            );
        }
    }

    #[test]
    fn spdx_ids_are_sanitised_and_unique() {
        let doc = json(&runtime_sbom(CREATED).expect("sbom"));
        let mut seen = BTreeSet::new();
        for package in doc["packages"].as_array().expect("packages") {
            let id = package["SPDXID"].as_str().expect("id");
            let rest = id.strip_prefix("SPDXRef-").expect("SPDXRef- prefix");
            assert!(
                rest.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'),
                "bad SPDXID {id}"
            );
            assert!(seen.insert(id.to_owned()), "duplicate SPDXID {id}");
        }
        assert_eq!(
            spdx_package_id("toml", "1.2.2+spec-1.1.0"),
            "SPDXRef-Package-toml-1.2.2-spec-1.1.0"
        );
        assert_eq!(
            spdx_package_id("serde_json", "1.0.0"),
            "SPDXRef-Package-serde-json-1.0.0"
        );
    }

    #[test]
    fn relationships_are_sorted_and_point_at_listed_packages() {
        let doc = json(&runtime_sbom(CREATED).expect("sbom"));
        let ids: BTreeSet<&str> = doc["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .map(|p| p["SPDXID"].as_str().expect("id"))
            .collect();
        let relationships = doc["relationships"].as_array().expect("relationships");
        let (describes, depends): (Vec<_>, Vec<_>) = relationships
            .iter()
            .partition(|r| r["relationshipType"] == "DESCRIBES");
        // Both binaries: the supervisor first, then the job binary.
        assert_eq!(describes.len(), 2);
        for (r, root) in describes.iter().zip(RUNTIME_ROOTS) {
            assert_eq!(r["spdxElementId"], "SPDXRef-DOCUMENT");
            assert_eq!(
                r["relatedSpdxElement"],
                format!("SPDXRef-Package-{root}-{}", env!("CARGO_PKG_VERSION"))
            );
        }
        assert!(!depends.is_empty());
        let mut pairs = Vec::new();
        for r in &depends {
            assert_eq!(r["relationshipType"], "DEPENDS_ON");
            let from = r["spdxElementId"].as_str().expect("from");
            let to = r["relatedSpdxElement"].as_str().expect("to");
            assert!(ids.contains(from), "{from} is not a listed package");
            assert!(ids.contains(to), "{to} is not a listed package");
            pairs.push((from, to));
        }
        let mut sorted = pairs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(pairs, sorted, "DEPENDS_ON sorted and unique");
        // Every listed package but the two roots is some edge's target.
        let targets: BTreeSet<&str> = pairs.iter().map(|(_, to)| *to).collect();
        assert_eq!(targets.len() + 2, ids.len());
    }

    #[test]
    fn closure_excludes_unrelated_crates_and_resolves_versions() {
        let bytes = sbom_from_lock(&test_lock(), "app", CREATED).expect("sbom");
        let doc = json(&bytes);
        assert_eq!(
            package_names(&doc),
            [
                ("app", "0.3.0"),
                ("dup", "1.0.0"),
                ("dup", "2.0.0"),
                ("lib_a", "0.3.0"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert_eq!(doc["name"], "app-0.3.0");
        let edges: Vec<(String, String)> = doc["relationships"]
            .as_array()
            .expect("relationships")
            .iter()
            .filter(|r| r["relationshipType"] == "DEPENDS_ON")
            .map(|r| {
                (
                    r["spdxElementId"].as_str().expect("from").to_owned(),
                    r["relatedSpdxElement"].as_str().expect("to").to_owned(),
                )
            })
            .collect();
        assert_eq!(
            edges,
            [
                ("app-0.3.0", "dup-1.0.0"),
                ("app-0.3.0", "lib-a-0.3.0"),
                ("lib-a-0.3.0", "dup-2.0.0"),
            ]
            .map(|(a, b)| (
                format!("SPDXRef-Package-{a}"),
                format!("SPDXRef-Package-{b}")
            ))
        );
        let dup2 = &doc["packages"][2];
        assert_eq!(dup2["checksums"][0]["checksumValue"], "22".repeat(32));
        // The unrelated crate appears nowhere, not even in a relationship.
        let text = String::from_utf8(bytes).expect("utf-8");
        assert!(!text.contains("unrelated") && !text.contains("other"));
    }

    /// A dev-dependency of a package on itself (a test-only feature) is
    /// not listed as a dependency.
    /// Several roots (the runtime's two binaries): each is described, in
    /// the order given (a repeat once), the first names the document, and
    /// the closures are joined.
    #[test]
    fn several_roots_are_each_described_and_their_closures_joined() {
        let bytes = sbom_from_lock_roots(&test_lock(), &["app", "unrelated", "app"], CREATED)
            .expect("sbom");
        let doc = json(&bytes);
        let described: Vec<&str> = doc["relationships"]
            .as_array()
            .expect("relationships")
            .iter()
            .filter(|r| r["relationshipType"] == "DESCRIBES")
            .map(|r| r["relatedSpdxElement"].as_str().expect("id"))
            .collect();
        assert_eq!(
            described,
            [
                "SPDXRef-Package-app-0.3.0",
                "SPDXRef-Package-unrelated-0.1.0"
            ]
        );
        assert_eq!(doc["name"], "app-0.3.0");
        let names: Vec<String> = package_names(&doc).into_iter().map(|(n, _)| n).collect();
        for name in ["app", "lib_a", "dup", "unrelated", "other"] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        assert!(matches!(
            sbom_from_lock_roots(&test_lock(), &[], CREATED),
            Err(SbomError::RootNotFound { .. })
        ));
    }

    #[test]
    fn a_package_the_build_does_not_link_is_left_out_with_what_only_it_pulls_in() {
        let all = json(&sbom_from_lock(&test_lock(), "app", CREATED).expect("sbom"));
        let bytes = sbom_from_lock_roots_without(&test_lock(), &["app"], &["lib_a"], CREATED)
            .expect("sbom");
        let doc = json(&bytes);
        let names = package_names(&doc);
        assert!(package_names(&all).iter().any(|(n, _)| n == "lib_a"));
        assert!(!names.iter().any(|(n, _)| n == "lib_a"), "{names:?}");
        // dup 2.0.0 only came through lib_a; dup 1.0.0 comes from app.
        assert!(
            !names.contains(&("dup".to_owned(), "2.0.0".to_owned())),
            "{names:?}"
        );
        assert!(
            names.contains(&("dup".to_owned(), "1.0.0".to_owned())),
            "{names:?}"
        );
        kolm_format::sbom::SpdxDocument::from_json_bytes(&bytes).expect("strict reader");
    }

    #[test]
    fn the_default_build_lists_the_sim_crate() {
        // The sim feature is on in this test build (it is a default).
        let doc = json(&runtime_sbom(CREATED).expect("runtime SBOM"));
        assert_eq!(
            cfg!(feature = "sim"),
            package_names(&doc).iter().any(|(n, _)| n == "kolm-sim-tee")
        );
    }

    #[test]
    fn a_self_dependency_is_no_relationship() {
        let lock = format!(
            "version = 3\n\n[[package]]\nname = \"a\"\nversion = \"1.0.0\"\n\
             dependencies = [\"a\", \"b\"]\n\n[[package]]\nname = \"b\"\nversion = \"0.1.0\"\n\
             source = \"{CRATES_IO}\"\nchecksum = \"{}\"\n",
            "ab".repeat(32)
        );
        let doc = json(&sbom_from_lock(&lock, "a", CREATED).expect("sbom"));
        let depends: Vec<_> = doc["relationships"]
            .as_array()
            .expect("relationships")
            .iter()
            .filter(|r| r["relationshipType"] == "DEPENDS_ON")
            .collect();
        assert_eq!(depends.len(), 1, "{depends:?}");
        assert_ne!(
            depends[0]["spdxElementId"],
            depends[0]["relatedSpdxElement"]
        );
    }

    #[test]
    fn exact_output_of_small_lock() {
        let lock = format!(
            "version = 3\n\n[[package]]\nname = \"a\"\nversion = \"1.0.0\"\n\
             dependencies = [\"b\"]\n\n[[package]]\nname = \"b\"\nversion = \"0.1.0\"\n\
             source = \"{CRATES_IO}\"\nchecksum = \"{}\"\n",
            "ab".repeat(32)
        );
        let text =
            String::from_utf8(sbom_from_lock(&lock, "a", CREATED).expect("sbom")).expect("utf-8");
        let expected = format!(
            r#"{{
  "spdxVersion": "SPDX-2.3",
  "dataLicense": "CC0-1.0",
  "SPDXID": "SPDXRef-DOCUMENT",
  "name": "a-1.0.0",
  "documentNamespace": "https://spdx.kolm.invalid/a/1.0.0/{digest}",
  "creationInfo": {{
    "created": "2025-01-02T03:04:05Z",
    "creators": [
      "Tool: kolm-enclave-{tool}"
    ]
  }},
  "packages": [
    {{
      "SPDXID": "SPDXRef-Package-a-1.0.0",
      "name": "a",
      "versionInfo": "1.0.0",
      "downloadLocation": "NOASSERTION",
      "filesAnalyzed": false,
      "externalRefs": [
        {{
          "referenceCategory": "PACKAGE-MANAGER",
          "referenceType": "purl",
          "referenceLocator": "pkg:cargo/a@1.0.0"
        }}
      ],
      "licenseConcluded": "NOASSERTION",
      "licenseDeclared": "Apache-2.0",
      "copyrightText": "NOASSERTION"
    }},
    {{
      "SPDXID": "SPDXRef-Package-b-0.1.0",
      "name": "b",
      "versionInfo": "0.1.0",
      "downloadLocation": "https://crates.io/api/v1/crates/b/0.1.0/download",
      "filesAnalyzed": false,
      "checksums": [
        {{
          "algorithm": "SHA256",
          "checksumValue": "{sum}"
        }}
      ],
      "externalRefs": [
        {{
          "referenceCategory": "PACKAGE-MANAGER",
          "referenceType": "purl",
          "referenceLocator": "pkg:cargo/b@0.1.0"
        }}
      ],
      "licenseConcluded": "NOASSERTION",
      "licenseDeclared": "NOASSERTION",
      "copyrightText": "NOASSERTION"
    }}
  ],
  "relationships": [
    {{
      "spdxElementId": "SPDXRef-DOCUMENT",
      "relationshipType": "DESCRIBES",
      "relatedSpdxElement": "SPDXRef-Package-a-1.0.0"
    }},
    {{
      "spdxElementId": "SPDXRef-Package-a-1.0.0",
      "relationshipType": "DEPENDS_ON",
      "relatedSpdxElement": "SPDXRef-Package-b-0.1.0"
    }}
  ]
}}
"#,
            digest = lock_sha256(&lock),
            tool = env!("CARGO_PKG_VERSION"),
            sum = "ab".repeat(32),
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn namespace_follows_the_lock() {
        let lock = test_lock();
        let a = json(&sbom_from_lock(&lock, "app", CREATED).expect("sbom"));
        let b = json(&sbom_from_lock(&format!("{lock}\n"), "app", CREATED).expect("sbom"));
        assert_ne!(a["documentNamespace"], b["documentNamespace"]);
    }

    #[test]
    fn bad_locks_are_rejected() {
        let err = |lock: &str, root: &str| sbom_from_lock(lock, root, CREATED).unwrap_err();

        assert!(matches!(
            err("this is = = not toml", "app"),
            SbomError::LockParse(_)
        ));
        assert!(matches!(
            err("version = 4\n[[package]]\nname = \"app\"\n", "app"),
            SbomError::LockParse(_)
        ));
        assert!(matches!(
            err("[[package]]\nname = \"app\"\nversion = \"1.0.0\"\n", "app"),
            SbomError::UnsupportedLockVersion { found: None }
        ));
        assert!(matches!(
            err(&test_lock(), "missing"),
            SbomError::RootNotFound { .. }
        ));
        assert!(matches!(
            err(&test_lock(), "dup"),
            SbomError::AmbiguousRoot { candidates: 2, .. }
        ));

        let unresolved = test_lock().replace("\"lib_a\",", "\"lib_b\",");
        match err(&unresolved, "app") {
            SbomError::UnresolvedDependency {
                package,
                dependency,
            } => {
                assert_eq!(package, "app 0.3.0");
                assert_eq!(dependency, "lib_b");
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(
            err(&unresolved, "app").to_string().contains("lib_b"),
            "error names the dependency"
        );

        let ambiguous = test_lock().replace("\"dup 1.0.0\",", "\"dup\",");
        assert!(matches!(
            err(&ambiguous, "app"),
            SbomError::AmbiguousDependency { candidates: 2, .. }
        ));
        let wrong_source = test_lock().replace(
            &format!("\"dup 2.0.0 ({CRATES_IO})\""),
            "\"dup 2.0.0 (registry+https://example.invalid/index)\"",
        );
        assert!(matches!(
            err(&wrong_source, "app"),
            SbomError::UnresolvedDependency { .. }
        ));
        let malformed = test_lock().replace("\"lib_a\",", "\"lib_a 0.3.0 no-parens\",");
        assert!(matches!(
            err(&malformed, "app"),
            SbomError::MalformedDependency { .. }
        ));
        let bad_sum = test_lock().replace(&"11".repeat(32), "xyz");
        assert!(matches!(
            err(&bad_sum, "app"),
            SbomError::MalformedChecksum { .. }
        ));
        let duplicate = format!(
            "{}\n[[package]]\nname = \"unrelated\"\nversion = \"0.1.0\"\n",
            test_lock()
        );
        assert!(matches!(
            err(&duplicate, "app"),
            SbomError::DuplicatePackage { .. }
        ));
        let colliding = test_lock()
            .replace("name = \"unrelated\"", "name = \"lib-a\"")
            .replace(
                "version = \"0.1.0\"\ndependencies = [\n \"other\"",
                "version = \"0.3.0\"\ndependencies = [\n \"other\"",
            )
            .replace("\"lib_a\",", "\"lib_a\",\n \"lib-a\",");
        assert!(matches!(
            err(&colliding, "app"),
            SbomError::SpdxIdCollision { .. }
        ));
    }

    #[test]
    fn timestamps_are_checked_and_normalised() {
        assert_eq!(spdx_timestamp(CREATED).expect("valid"), CREATED);
        assert_eq!(
            spdx_timestamp("2025-01-01T23:30:00-01:00").expect("valid"),
            "2025-01-02T00:30:00Z"
        );
        for bad in [
            "",
            "2025-01-02",
            "2025-01-02 03:04:05",
            "2025-01-02T03:04:05",
            "2025-01-02T03:04:05.5Z",
        ] {
            assert!(
                matches!(
                    sbom_from_lock(&test_lock(), "app", bad),
                    Err(SbomError::InvalidTimestamp { .. })
                ),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn versions_order_numerically() {
        assert_eq!(version_order("0.9.0", "0.10.0"), Ordering::Less);
        assert_eq!(version_order("1.0.0", "1.0.0"), Ordering::Equal);
        assert_eq!(version_order("1.0.0-alpha", "1.0.0-beta"), Ordering::Less);
        assert_eq!(version_order("0.2.17", "0.3.4"), Ordering::Less);
    }
}
