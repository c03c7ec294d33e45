//! The example policies in `examples/` parse to the expected values and
//! survive a render/parse round trip.

use std::collections::{BTreeMap, BTreeSet};

use kolm_policy::{Platform, Policy, QualityGate, SnpTcb, TdxTcbStatus};

const PRODUCTION: &str = include_str!("../examples/production.toml");
const DEV_NONE: &str = include_str!("../examples/dev-none.toml");
const NITRO_PCRS: &str = include_str!("../examples/nitro-pcrs.toml");
const CONFIDENTIAL_VM: &str = include_str!("../examples/confidential-vm.toml");

fn parse(src: &str) -> Policy {
    match Policy::from_toml_str(src) {
        Ok(p) => p,
        Err(e) => panic!("example does not parse: {e}"),
    }
}

fn bytes48(s: &str) -> [u8; 48] {
    let mut out = [0u8; 48];
    hex::decode_to_slice(s, &mut out).unwrap();
    out
}

#[test]
fn production_example_is_the_production_default() {
    assert_eq!(parse(PRODUCTION), Policy::production());
}

#[test]
fn minimal_policy_gets_production_defaults_for_everything_else() {
    let p = parse(
        "schema = \"kolm.policy.v1\"\n\
         allowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\", \"azure-sev-snp\", \"azure-tdx\"]\n",
    );
    assert_eq!(p, Policy::production());
}

#[test]
fn production_default_values() {
    let p = Policy::production();
    assert_eq!(
        p.allowed_platforms,
        BTreeSet::from([
            Platform::Nitro,
            Platform::SevSnp,
            Platform::Tdx,
            Platform::AzureSevSnp,
            Platform::AzureTdx
        ])
    );
    assert!(!p.allow_debug);
    assert!(p.nitro.pcrs.is_empty());
    assert!(p.sev_snp.measurements.is_empty());
    assert!(p.sev_snp.host_data.is_empty());
    assert_eq!(p.sev_snp.max_vmpl, 0);
    assert_eq!(p.sev_snp.min_tcb, None);
    assert!(p.tdx.mrtd.is_empty());
    assert!(p.tdx.rtmr.iter().all(BTreeSet::is_empty));
    assert_eq!(
        p.tdx.allowed_tcb_status,
        BTreeSet::from([TdxTcbStatus::UpToDate])
    );
    assert!(p.tdx.allowed_advisories.is_empty());
    assert!(p.egress.must_be_zero);
    assert_eq!(p.egress.max_blocked_attempts, None);
    assert!(p.quality.gates.is_empty());
}

#[test]
fn dev_none_example() {
    let p = parse(DEV_NONE);
    assert_eq!(
        p.allowed_platforms,
        BTreeSet::from([Platform::None, Platform::Simulated])
    );
    assert!(p.allow_debug);
    assert!(!p.egress.must_be_zero);
    assert!(p.check_platform(Platform::None).is_ok());
    assert!(p.check_platform(Platform::Nitro).is_err());
}

#[test]
fn nitro_pcrs_example() {
    let p = parse(NITRO_PCRS);
    assert_eq!(p.allowed_platforms, BTreeSet::from([Platform::Nitro]));
    assert_eq!(
        p.nitro.pcrs.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 8]
    );
    // The upper-case entry is stored as bytes.
    assert!(p.nitro.pcrs[&1].contains(&bytes48(
        "5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a"
    )));
    assert_eq!(p.nitro.pcrs[&1].len(), 2);
    assert_eq!(p.egress.max_blocked_attempts, Some(1000));
    assert_eq!(
        p.quality.gates,
        vec![QualityGate {
            metric: "eval_loss".to_owned(),
            min: None,
            max: Some(3.0)
        }]
    );
}

#[test]
fn confidential_vm_example() {
    let p = parse(CONFIDENTIAL_VM);
    assert_eq!(p.sev_snp.measurements.len(), 1);
    assert_eq!(p.sev_snp.host_data.len(), 1);
    assert_eq!(
        p.sev_snp.min_tcb,
        Some(SnpTcb {
            bootloader: 3,
            tee: 0,
            snp: 8,
            microcode: 115,
            fmc: None
        })
    );
    assert_eq!(p.tdx.mrtd.len(), 1);
    assert_eq!(
        p.tdx.rtmr.iter().map(BTreeSet::len).collect::<Vec<_>>(),
        vec![1, 1, 1, 0]
    );
    // Issue 12: the example pins every platform it allows (bare SEV-SNP by
    // MEASUREMENT, TDX by MRTD + RTMR0..2, Azure by vTPM PCR4 + PCR9).
    let m = *p.sev_snp.measurements.iter().next().unwrap();
    for platform in &p.allowed_platforms {
        assert!(
            p.pinning(*platform, Some(&m)).is_pinned(),
            "{platform}: {}",
            p.pinning(*platform, Some(&m))
        );
    }
    assert_eq!(p.azure.pcrs.len(), 2);
    assert_eq!(
        p.tdx.allowed_tcb_status,
        BTreeSet::from([TdxTcbStatus::UpToDate, TdxTcbStatus::SwHardeningNeeded])
    );
    assert_eq!(
        p.tdx.allowed_advisories,
        BTreeSet::from(["INTEL-SA-00837".to_owned()])
    );
    assert_eq!(p.quality.gates.len(), 2);
    let metrics = BTreeMap::from([("eval_loss".to_owned(), 2.5), ("accuracy".to_owned(), 0.95)]);
    assert_eq!(p.check_quality(&metrics), Ok(()));
}

/// Issue 12: the production default pins nothing; the Nitro example pins.
#[test]
fn which_examples_pin() {
    let prod = parse(PRODUCTION);
    for platform in &prod.allowed_platforms {
        assert!(!prod.pinning(*platform, Some(&[0; 48])).is_pinned());
    }
    assert!(
        parse(NITRO_PCRS)
            .pinning(kolm_policy::Platform::Nitro, None)
            .is_pinned()
    );
}

#[test]
fn examples_round_trip_through_render() {
    for (name, src) in [
        ("production", PRODUCTION),
        ("dev-none", DEV_NONE),
        ("nitro-pcrs", NITRO_PCRS),
        ("confidential-vm", CONFIDENTIAL_VM),
    ] {
        let p = parse(src);
        let rendered = p.to_toml_string().unwrap();
        let again = Policy::from_toml_str(&rendered)
            .unwrap_or_else(|e| panic!("{name}: rendered policy does not parse: {e}\n{rendered}"));
        assert_eq!(again, p, "{name}:\n{rendered}");
    }
}

#[test]
fn round_trip_keeps_fmc_and_every_rtmr() {
    let mut p = parse(CONFIDENTIAL_VM);
    p.sev_snp.min_tcb = Some(SnpTcb {
        bootloader: 1,
        tee: 2,
        snp: 3,
        microcode: 4,
        fmc: Some(5),
    });
    p.sev_snp.max_vmpl = 2;
    for (i, set) in (0u8..).zip(p.tdx.rtmr.iter_mut()) {
        set.insert([i; 48]);
    }
    let again = Policy::from_toml_str(&p.to_toml_string().unwrap()).unwrap();
    assert_eq!(again, p);
}

#[test]
fn present_sections_keep_defaults_for_absent_keys() {
    let p = parse(&format!(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\"]\n\
         [nitro]\n[sev_snp]\nhost_data = [\"{}\"]\n[tdx]\nrtmr3 = [\"{}\"]\n\
         [egress]\nmax_blocked_attempts = 5\n[quality]\n",
        "00".repeat(32),
        "00".repeat(48)
    ));
    let production = Policy::production();
    assert_eq!(p.nitro, production.nitro);
    assert_eq!(p.sev_snp.max_vmpl, 0);
    assert_eq!(p.sev_snp.min_tcb, None);
    assert!(p.sev_snp.measurements.is_empty());
    assert_eq!(p.tdx.allowed_tcb_status, production.tdx.allowed_tcb_status);
    assert!(p.tdx.allowed_advisories.is_empty());
    assert!(p.tdx.mrtd.is_empty());
    assert!(p.egress.must_be_zero);
    assert!(p.quality.gates.is_empty());
    assert!(!p.allow_debug);
}

#[test]
fn docs_examples_parse() {
    let doc = include_str!("../../docs/policy.md");
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 2, "docs/policy.md toml blocks changed");
    // The second block is a complete policy; the first is one line of the
    // production default.
    let p = parse(blocks[1]);
    assert_eq!(p.sev_snp.measurements.len(), 1);
    assert_eq!(p.quality.gates.len(), 2);
    let production = parse(&format!("schema = \"kolm.policy.v1\"\n{}", blocks[0]));
    assert_eq!(production, Policy::production());
}
