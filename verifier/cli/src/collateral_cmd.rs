//! `kolm-verify collateral inspect|bundle`: offline collateral handling
//! (never fetches anything).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use kolm_verifier::collateral;

use crate::Common;
use crate::args::{emit, read};

pub fn inspect(files: &[PathBuf], common: &Common) -> anyhow::Result<u8> {
    let mut items = Vec::new();
    for f in files {
        items.push(collateral::inspect(
            &f.display().to_string(),
            &read(f, "file")?,
        ));
    }
    let common_window = collateral::common_window(&items);
    let unknown = items.iter().any(|i| i.kind == "unknown");
    if common.json {
        let doc = serde_json::json!({
            "schema": "kolm.collateral-inspect.v1",
            "items": items,
            "common_window": common_window,
        });
        emit(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        let mut text = String::new();
        for i in &items {
            text.push_str(&format!("{}: {} (sha256 {})\n", i.file, i.kind, i.sha256));
            for (k, v) in &i.details {
                text.push_str(&format!("  {k}: {v}\n"));
            }
            for w in &i.windows {
                text.push_str(&format!(
                    "  valid {} .. {}  {}\n",
                    w.not_before, w.not_after, w.what
                ));
            }
            if let Some(e) = &i.error {
                text.push_str(&format!("  error: {e}\n"));
            }
        }
        match &common_window {
            Some((a, b)) => text.push_str(&format!("all valid together: {a} .. {b}\n")),
            None => text.push_str("all valid together: never (or no windows)\n"),
        }
        emit(&text)?;
    }
    Ok(if unknown { 1 } else { 0 })
}

pub fn bundle(platform: &str, out: &Path, files: &[PathBuf]) -> anyhow::Result<u8> {
    let platform =
        kolm_policy::Platform::parse(platform).map_err(|e| anyhow!("--platform: {e}"))?;
    let mut inputs = Vec::new();
    for f in files {
        inputs.push((f.display().to_string(), read(f, "file")?));
    }
    let slots = match collateral::bundle(platform, &inputs) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kolm-verify: bundle rejected: {e}");
            return Ok(1);
        }
    };
    let entries = slots
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                kolm_format::container::EntryData::Bytes(v.clone()),
            )
        })
        .collect();
    kolm_format::container::write_canonical_zip(out, entries)
        .with_context(|| format!("writing {}", out.display()))?;
    let names: Vec<&str> = slots.keys().copied().collect();
    emit(&format!("{}: {}\n", out.display(), names.join(", ")))?;
    Ok(0)
}
