//! `kolm-host bundle fetch`: the only kolm command that reaches the
//! network. Exit 0 when every item was fetched, checked and written; 1
//! when something fetched was refused (nothing written); 2 for usage,
//! network and I/O errors (nothing written).

use std::path::{Path, PathBuf};

use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;

use kolm_host::bundle::{self, FetchError, http, snp, tdx};

/// `bundle fetch`'s arguments.
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// The bundle directory to write (created if missing; files are
    /// replaced only by ones that were fetched and checked).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// An SEV-SNP attestation report (raw binary, not hex): fetch its VCEK
    /// and the product's ASK/ARK from AMD KDS.
    #[arg(long, value_name = "FILE")]
    snp_report: Option<PathBuf>,
    /// The report's product, for version 2 reports (no CPUID): milan,
    /// genoa or turin.
    #[arg(long, value_name = "PRODUCT", requires = "snp_report")]
    product: Option<String>,
    /// A TDX quote: fetch the collateral for the FMSPC of its PCK
    /// certificate from Intel PCS.
    #[arg(long, value_name = "FILE", conflicts_with = "fmspc")]
    tdx_quote: Option<PathBuf>,
    /// Fetch TDX collateral for this FMSPC (12 hex digits) instead of a
    /// quote's.
    #[arg(long, value_name = "HEX")]
    fmspc: Option<String>,
    /// With --fmspc: the PCK CA whose CRL to fetch (platform or
    /// processor).
    #[arg(
        long,
        value_name = "CA",
        default_value = "platform",
        requires = "fmspc"
    )]
    pck_ca: String,
    /// AMD KDS base URL.
    #[arg(long, value_name = "URL", default_value = snp::DEFAULT_KDS_URL)]
    kds_url: String,
    /// Intel PCS base URL.
    #[arg(long, value_name = "URL", default_value = tdx::DEFAULT_PCS_URL)]
    pcs_url: String,
    /// Intel SGX Root CA CRL URL.
    #[arg(long, value_name = "URL", default_value = tdx::DEFAULT_ROOT_CRL_URL)]
    intel_root_crl_url: String,
    /// PEM file of the CAs trusted for https (default: $SSL_CERT_FILE,
    /// else the system bundle).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Seconds one request may take, answer included.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    timeout: u64,
    /// Retries after a 429 or 5xx answer (backoff 2 s, doubling, or the
    /// server's Retry-After).
    #[arg(long, value_name = "N", default_value_t = 4)]
    retries: u32,
    /// One JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// Where system CA bundles live (Debian/Ubuntu/Alpine, Fedora/RHEL).
const SYSTEM_CA_FILES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

pub fn fetch(a: &FetchArgs) -> anyhow::Result<ExitCode> {
    match fetch_inner(a) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            if matches!(e, FetchError::Io { .. }) {
                eprintln!("kolm-host: bundle fetch: {e}");
            } else {
                eprintln!("kolm-host: bundle fetch: {e}; nothing was written");
            }
            Ok(ExitCode::from(e.exit_code()))
        }
    }
}

fn read_input(flag: &str, path: &std::path::Path) -> Result<Vec<u8>, FetchError> {
    use std::io::Read;
    // Reports and quotes are a few KiB.
    const MAX: u64 = 1 << 20;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX + 1).read_to_end(&mut bytes))
        .map_err(|e| FetchError::Input {
            what: format!("{flag} {}", path.display()),
            reason: e.to_string(),
        })?;
    if bytes.len() as u64 > MAX {
        return Err(FetchError::Input {
            what: format!("{flag} {}", path.display()),
            reason: format!("larger than {MAX} bytes"),
        });
    }
    Ok(bytes)
}

fn fetch_inner(a: &FetchArgs) -> Result<(), FetchError> {
    // Everything about the inputs is checked before the first request.
    let snp_req = match &a.snp_report {
        Some(p) => {
            let product = a.product.as_deref().map(snp::parse_product).transpose()?;
            Some(snp::SnpRequest::new(
                &read_input("--snp-report", p)?,
                product,
            )?)
        }
        None => None,
    };
    let tdx_req = match (&a.tdx_quote, &a.fmspc) {
        (Some(q), _) => Some(tdx::TdxRequest::from_quote(&read_input("--tdx-quote", q)?)?),
        (None, Some(f)) => Some(tdx::TdxRequest::from_fmspc(
            f,
            tdx::PckCa::parse(&a.pck_ca)?,
        )?),
        (None, None) => None,
    };
    if snp_req.is_none() && tdx_req.is_none() {
        return Err(FetchError::Input {
            what: "bundle fetch".into(),
            reason: "nothing to fetch: pass --snp-report, --tdx-quote or --fmspc".into(),
        });
    }
    let kds = bundle::base_url("--kds-url", &a.kds_url)?;
    let pcs = bundle::base_url("--pcs-url", &a.pcs_url)?;
    let root_crl = bundle::base_url("--intel-root-crl-url", &a.intel_root_crl_url)?;
    let mut used: Vec<&str> = Vec::new();
    if snp_req.is_some() {
        used.push(&kds);
    }
    if tdx_req.is_some() {
        used.extend([pcs.as_str(), root_crl.as_str()]);
    }
    let https = used.iter().any(|u| u.starts_with("https://"));
    let ca_file = match (&a.ca_file, https) {
        (Some(f), _) => Some(f.clone()),
        (None, false) => None,
        (None, true) => Some(
            std::env::var_os("SSL_CERT_FILE")
                .map(PathBuf::from)
                .or_else(|| {
                    SYSTEM_CA_FILES
                        .iter()
                        .map(PathBuf::from)
                        .find(|p| p.is_file())
                })
                .ok_or_else(|| FetchError::Input {
                    what: "--ca-file".into(),
                    reason: "no system CA bundle found; name one with --ca-file".into(),
                })?,
        ),
    };
    let client = http::Client::new(http::HttpOptions {
        timeout: Duration::from_secs(a.timeout),
        retries: a.retries,
        backoff: Duration::from_secs(2),
        ca_file,
        env_proxy: !http::all_loopback(used.iter().copied()),
    })?;

    let mut items = Vec::new();
    if let Some(req) = &snp_req {
        // The chain must be valid now: collateral that is already expired
        // is not worth carrying into an air-gapped room.
        items.extend(snp::fetch(
            &client,
            &kds,
            req,
            time::OffsetDateTime::now_utc(),
        )?);
    }
    if let Some(req) = &tdx_req {
        items.extend(tdx::fetch(&client, &pcs, &root_crl, req)?);
    }
    let written = bundle::write(&a.out, &items)?;
    if a.json {
        let files: Vec<_> = written
            .iter()
            .map(|w| {
                serde_json::json!({"file": w.path.display().to_string(),
                    "bytes": w.bytes, "sha256": hex::encode(w.sha256), "urls": w.urls})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"dir": a.out.display().to_string(), "written": files})
        );
    } else {
        for w in &written {
            println!(
                "{} ({} bytes, sha256 {}) from {}",
                w.path.display(),
                w.bytes,
                hex::encode(w.sha256),
                w.urls.join(", ")
            );
        }
    }
    Ok(())
}

/// Largest bundle file read.
const MAX_BUNDLE_FILE: u64 = 16 << 20;

/// `bundle inspect DIR`.
/// Whether a bundle can be used now: its files' windows overlap
/// (`window`), and now lies in that common window. A refusal names the
/// window and now.
fn usable_now(
    items: &[kolm_verifier::collateral::Item],
    window: Option<&(String, String)>,
    now: time::OffsetDateTime,
) -> Result<(), String> {
    let now_text = kolm_format::timefmt::format_utc_seconds(now).unwrap_or_default();
    let has_windows = items.iter().any(|i| !i.windows.is_empty());
    match window {
        None if has_windows => Err(format!(
            "no instant is within every file's validity window (now is {now_text}): the \
             bundle cannot be used"
        )),
        None => Ok(()),
        Some((start, end)) => {
            let parse = |t: &str| kolm_format::timefmt::parse_utc_seconds(t).ok();
            match (parse(start), parse(end)) {
                (Some(a), _) if now < a => Err(format!(
                    "not valid yet: every file is valid together only from {start} to {end}, \
                     and now is {now_text}"
                )),
                (_, Some(b)) if now > b => Err(format!(
                    "EXPIRED: every file was valid together only from {start} to {end}, and \
                     now is {now_text}; fetch a new bundle (kolm-host bundle fetch)"
                )),
                (Some(_), Some(_)) => Ok(()),
                _ => Err(format!("the common window {start} .. {end} cannot be read")),
            }
        }
    }
}

/// `bundle inspect`: exit 1 also when the bundle cannot be used at `at`
/// (default now): expired, not yet valid, or windows that never overlap.
pub fn inspect(dir: &Path, json: bool, at: Option<&str>) -> anyhow::Result<ExitCode> {
    let at = match at {
        Some(t) => kolm_format::timefmt::parse_rfc3339(t)
            .map_err(|e| anyhow::anyhow!("--at {t:?}: {e}"))?,
        None => time::OffsetDateTime::now_utc(),
    };
    use std::io::Read;
    let mut files = Vec::new();
    for name in kolm_host::bundle::BUNDLE_FILES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .with_context(|| format!("opening {}", path.display()))?
            .take(MAX_BUNDLE_FILE + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        anyhow::ensure!(
            bytes.len() as u64 <= MAX_BUNDLE_FILE,
            "{} is larger than {MAX_BUNDLE_FILE} bytes",
            path.display()
        );
        files.push((name.to_string(), bytes));
    }
    // Each file as the verifier reads it; the AMD CRL against the
    // bundle's own chain and VCEK.
    let items = kolm_verifier::collateral::inspect_bundle(&files);
    let window = kolm_verifier::collateral::common_window(&items);
    let now = usable_now(&items, window.as_ref(), at);
    let bad = items.is_empty()
        || now.is_err()
        || items
            .iter()
            .any(|i| i.kind == "unknown" || i.error.is_some());
    if json {
        println!(
            "{}",
            serde_json::json!({"dir": dir.display().to_string(), "items": items,
                "common_window": window, "usable_now": now.is_ok(),
                "why_not": now.as_ref().err()})
        );
    } else {
        if items.is_empty() {
            println!(
                "{}: none of {} found",
                dir.display(),
                kolm_host::bundle::BUNDLE_FILES.join(", ")
            );
        }
        for i in &items {
            println!("{}: {} (sha256 {})", i.file, i.kind, i.sha256);
            for w in &i.windows {
                println!("  valid {} .. {}  {}", w.not_before, w.not_after, w.what);
            }
            if i.kind == "snp-crl" {
                for key in ["signature", "ask_status", "vcek_status"] {
                    if let Some(v) = i.details.get(key).and_then(|v| v.as_str()) {
                        println!("  {key}: {v}");
                    }
                }
            }
            if let Some(e) = &i.error {
                println!("  error: {e}");
            }
        }
        match &window {
            Some((a, b)) => println!("all valid together: {a} .. {b}"),
            None => println!("all valid together: never (or no windows)"),
        }
        if let Err(why) = &now {
            println!("{why}");
        }
    }
    Ok(if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: &str) -> time::OffsetDateTime {
        kolm_format::timefmt::parse_utc_seconds(t).unwrap()
    }

    #[test]
    fn a_bundle_is_usable_only_within_its_common_window() {
        let w = (
            "2024-01-01T00:00:00Z".to_owned(),
            "2025-01-01T00:00:00Z".to_owned(),
        );
        assert_eq!(
            usable_now(&[], Some(&w), at("2024-06-01T00:00:00Z")),
            Ok(())
        );
        let e = usable_now(&[], Some(&w), at("2026-12-07T00:00:00Z")).unwrap_err();
        assert!(e.contains("EXPIRED"), "{e}");
        assert!(e.contains("2025-01-01T00:00:00Z"), "{e}");
        assert!(e.contains("now is 2026-12-07T00:00:00Z"), "{e}");
        let e = usable_now(&[], Some(&w), at("2023-01-01T00:00:00Z")).unwrap_err();
        assert!(e.contains("not valid yet"), "{e}");
    }
}
