//! Every `check_*` method: a passing case, each failing case, and the rule
//! id and message of each violation.

use std::collections::{BTreeMap, BTreeSet};

use kolm_policy::{Platform, Policy, PolicyViolation, QualityGate, SnpTcb, TdxTcbStatus};

fn policy(body: &str) -> Policy {
    let src = format!(
        "schema = \"kolm.policy.v1\"\n\
         allowed_platforms = [\"nitro\", \"sev-snp\", \"tdx\", \"azure-sev-snp\", \"azure-tdx\"]\n{body}"
    );
    Policy::from_toml_str(&src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn assert_violation(result: Result<(), PolicyViolation>, expected: PolicyViolation, rule: &str) {
    let Err(v) = result else {
        panic!("expected {expected:?}, got Ok");
    };
    assert_eq!(v, expected);
    assert_eq!(v.rule(), rule);
    assert!(
        v.to_string().starts_with(&format!("{rule}: ")),
        "message does not name the rule: {v}"
    );
}

// ---- platform.allowed -------------------------------------------------------

#[test]
fn platform_allowed() {
    let p = Policy::production();
    for hw in Platform::HARDWARE {
        assert_eq!(p.check_platform(hw), Ok(()));
    }
    for soft in [Platform::None, Platform::Simulated] {
        assert_violation(
            p.check_platform(soft),
            PolicyViolation::PlatformNotAllowed { platform: soft },
            "platform.allowed",
        );
    }
    let only_tdx =
        Policy::from_toml_str("schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\"]\n")
            .unwrap();
    assert_eq!(only_tdx.check_platform(Platform::Tdx), Ok(()));
    let v = only_tdx.check_platform(Platform::AzureTdx).unwrap_err();
    assert!(v.to_string().contains("azure-tdx"), "{v}");
}

// ---- debug ------------------------------------------------------------------

#[test]
fn debug() {
    let p = Policy::production();
    assert_eq!(p.check_debug(false), Ok(()));
    assert_violation(
        p.check_debug(true),
        PolicyViolation::DebugNotAllowed,
        "debug",
    );
    let dev = policy("allow_debug = true\n");
    assert_eq!(dev.check_debug(true), Ok(()));
    assert_eq!(dev.check_debug(false), Ok(()));
}

// ---- egress -------------------------------------------------------------------

#[test]
fn egress_must_be_zero() {
    let p = Policy::production();
    assert_eq!(p.check_egress(Some(true), None), Ok(()));
    assert_eq!(p.check_egress(Some(true), Some(12345)), Ok(()));
    assert_violation(
        p.check_egress(None, None),
        PolicyViolation::EgressRecordMissing,
        "egress.must_be_zero",
    );
    assert_violation(
        p.check_egress(Some(false), Some(0)),
        PolicyViolation::EgressNotBlocked,
        "egress.must_be_zero",
    );
}

#[test]
fn egress_not_required() {
    let p = policy("[egress]\nmust_be_zero = false\n");
    for record in [None, Some(false), Some(true)] {
        assert_eq!(p.check_egress(record, None), Ok(()));
    }
}

#[test]
fn egress_max_blocked_attempts() {
    let p = policy("[egress]\nmax_blocked_attempts = 10\n");
    assert!(p.egress.must_be_zero);
    assert_eq!(p.check_egress(Some(true), Some(0)), Ok(()));
    assert_eq!(p.check_egress(Some(true), Some(10)), Ok(()));
    assert_violation(
        p.check_egress(Some(true), Some(11)),
        PolicyViolation::TooManyBlockedAttempts {
            attempts: 11,
            max: 10,
        },
        "egress.max_blocked_attempts",
    );
    assert_violation(
        p.check_egress(Some(true), None),
        PolicyViolation::BlockedAttemptsUnknown { max: 10 },
        "egress.max_blocked_attempts",
    );
    // must_be_zero is checked first.
    assert_violation(
        p.check_egress(Some(false), Some(11)),
        PolicyViolation::EgressNotBlocked,
        "egress.must_be_zero",
    );

    let zero = policy("[egress]\nmax_blocked_attempts = 0\nmust_be_zero = false\n");
    assert_eq!(zero.check_egress(None, Some(0)), Ok(()));
    assert_violation(
        zero.check_egress(None, Some(1)),
        PolicyViolation::TooManyBlockedAttempts {
            attempts: 1,
            max: 0,
        },
        "egress.max_blocked_attempts",
    );
}

// ---- quality.gate -------------------------------------------------------------

fn metrics(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[test]
fn quality_no_gates_accepts_anything() {
    let p = Policy::production();
    assert_eq!(p.check_quality(&BTreeMap::new()), Ok(()));
    assert_eq!(p.check_quality(&metrics(&[("x", f64::NAN)])), Ok(()));
}

#[test]
fn quality_gates() {
    let p = policy(
        "[[quality.gates]]\nmetric = \"eval_loss\"\nmax = 3.0\n\
         [[quality.gates]]\nmetric = \"accuracy\"\nmin = 0.9\nmax = 1.0\n\
         [[quality.gates]]\nmetric = \"tokens\"\nmin = 1000\n",
    );
    let good = metrics(&[
        ("eval_loss", 2.0),
        ("accuracy", 0.95),
        ("tokens", 1e6),
        ("extra", f64::NAN),
    ]);
    assert_eq!(p.check_quality(&good), Ok(()));
    // Bounds are inclusive.
    let edges = metrics(&[("eval_loss", 3.0), ("accuracy", 0.9), ("tokens", 1000.0)]);
    assert_eq!(p.check_quality(&edges), Ok(()));

    let mut m = good.clone();
    m.remove("accuracy");
    assert_violation(
        p.check_quality(&m),
        PolicyViolation::MetricMissing {
            metric: "accuracy".to_owned(),
        },
        "quality.gate",
    );

    for (metric, value) in [
        ("eval_loss", 3.0001),
        ("accuracy", 0.89),
        ("accuracy", 1.01),
        ("tokens", 999.0),
    ] {
        let mut m = good.clone();
        m.insert(metric.to_owned(), value);
        let v = p.check_quality(&m).unwrap_err();
        assert_eq!(v.rule(), "quality.gate");
        assert!(
            matches!(&v, PolicyViolation::MetricOutOfBounds { metric: got, value: x, .. } if got == metric && *x == value),
            "{v:?}"
        );
        assert!(v.to_string().contains(metric), "{v}");
    }
}

#[test]
fn quality_nan_and_infinity_never_pass() {
    let p = policy(
        "[[quality.gates]]\nmetric = \"eval_loss\"\nmax = 3.0\n\
         [[quality.gates]]\nmetric = \"accuracy\"\nmin = 0.9\n",
    );
    for bad in [f64::NAN, -f64::NAN, f64::NEG_INFINITY, f64::INFINITY] {
        let v = p
            .check_quality(&metrics(&[("eval_loss", bad), ("accuracy", 1.0)]))
            .unwrap_err();
        assert_eq!(v.rule(), "quality.gate");
        let v = p
            .check_quality(&metrics(&[("eval_loss", 1.0), ("accuracy", bad)]))
            .unwrap_err();
        assert!(
            matches!(v, PolicyViolation::MetricOutOfBounds { ref metric, .. } if metric == "accuracy")
        );
    }
}

#[test]
fn quality_in_memory_nan_bound_fails_closed() {
    let mut p = Policy::production();
    p.quality.gates.push(QualityGate {
        metric: "m".to_owned(),
        min: Some(f64::NAN),
        max: None,
    });
    assert!(p.check_quality(&metrics(&[("m", 1.0)])).is_err());
}

// ---- nitro.pcr ------------------------------------------------------------------

fn pcr_policy() -> Policy {
    policy(&format!(
        "[nitro.pcrs]\n0 = [\"{}\", \"{}\"]\n8 = [\"{}\"]\n",
        "00".repeat(48),
        "01".repeat(48),
        "08".repeat(48)
    ))
}

fn pcrs(pairs: &[(u8, Vec<u8>)]) -> BTreeMap<u8, Vec<u8>> {
    pairs.iter().cloned().collect()
}

#[test]
fn nitro_pcrs_pass() {
    let p = pcr_policy();
    assert_eq!(
        p.check_nitro_pcrs(&pcrs(&[
            (0, vec![0; 48]),
            (1, vec![0xff; 48]),
            (8, vec![8; 48])
        ])),
        Ok(())
    );
    assert_eq!(
        p.check_nitro_pcrs(&pcrs(&[(0, vec![1; 48]), (8, vec![8; 48])])),
        Ok(())
    );
    // No allow-list: anything, even nothing, passes.
    assert_eq!(
        Policy::production().check_nitro_pcrs(&BTreeMap::new()),
        Ok(())
    );
}

#[test]
fn nitro_pcrs_fail() {
    let p = pcr_policy();
    assert_violation(
        p.check_nitro_pcrs(&pcrs(&[(0, vec![0; 48]), (8, vec![9; 48])])),
        PolicyViolation::NitroPcrNotAllowed {
            index: 8,
            value: "09".repeat(48),
        },
        "nitro.pcr",
    );
    assert_violation(
        p.check_nitro_pcrs(&pcrs(&[(0, vec![0; 48])])),
        PolicyViolation::NitroPcrMissing { index: 8 },
        "nitro.pcr",
    );
    // A value of the wrong length never matches (here: a SHA-256-sized PCR).
    assert_violation(
        p.check_nitro_pcrs(&pcrs(&[(0, vec![0; 32]), (8, vec![8; 48])])),
        PolicyViolation::NitroPcrNotAllowed {
            index: 0,
            value: "00".repeat(32),
        },
        "nitro.pcr",
    );
    let v = p
        .check_nitro_pcrs(&pcrs(&[(0, vec![0xab; 48]), (8, vec![8; 48])]))
        .unwrap_err();
    assert!(v.to_string().contains(&"ab".repeat(48)), "{v}");
    assert!(v.to_string().contains("PCR0"), "{v}");
}

// ---- sev_snp.* ------------------------------------------------------------------

const TCB: SnpTcb = SnpTcb {
    bootloader: 3,
    tee: 0,
    snp: 8,
    microcode: 115,
    fmc: None,
};

#[test]
fn snp_open_policy_accepts_any_measurement_at_vmpl0() {
    let p = Policy::production();
    assert_eq!(
        p.check_snp(&[7; 48], &[9; 32], 0, SnpTcb::default()),
        Ok(())
    );
    assert_violation(
        p.check_snp(&[7; 48], &[9; 32], 1, TCB),
        PolicyViolation::SnpVmpl { vmpl: 1, max: 0 },
        "sev_snp.vmpl",
    );
}

fn snp_policy() -> Policy {
    policy(&format!(
        "[sev_snp]\nmeasurements = [\"{}\", \"{}\"]\nhost_data = [\"{}\"]\nmax_vmpl = 2\n\
         min_tcb = {{ bootloader = 3, tee = 0, snp = 8, microcode = 115 }}\n",
        "11".repeat(48),
        "12".repeat(48),
        "22".repeat(32)
    ))
}

#[test]
fn snp_pass() {
    let p = snp_policy();
    assert_eq!(p.check_snp(&[0x11; 48], &[0x22; 32], 0, TCB), Ok(()));
    assert_eq!(p.check_snp(&[0x12; 48], &[0x22; 32], 2, TCB), Ok(()));
    let higher = SnpTcb {
        bootloader: 9,
        tee: 1,
        snp: 22,
        microcode: 213,
        fmc: Some(1),
    };
    assert_eq!(p.check_snp(&[0x11; 48], &[0x22; 32], 0, higher), Ok(()));
}

#[test]
fn snp_measurement_host_data_vmpl() {
    let p = snp_policy();
    assert_violation(
        p.check_snp(&[0x13; 48], &[0x22; 32], 0, TCB),
        PolicyViolation::SnpMeasurement {
            value: "13".repeat(48),
        },
        "sev_snp.measurement",
    );
    assert_violation(
        p.check_snp(&[0x11; 48], &[0x23; 32], 0, TCB),
        PolicyViolation::SnpHostData {
            value: "23".repeat(32),
        },
        "sev_snp.host_data",
    );
    assert_violation(
        p.check_snp(&[0x11; 48], &[0x22; 32], 3, TCB),
        PolicyViolation::SnpVmpl { vmpl: 3, max: 2 },
        "sev_snp.vmpl",
    );
    assert_violation(
        p.check_snp(&[0x11; 48], &[0x22; 32], u32::MAX, TCB),
        PolicyViolation::SnpVmpl {
            vmpl: u32::MAX,
            max: 2,
        },
        "sev_snp.vmpl",
    );
}

#[test]
fn snp_tcb_is_compared_component_wise() {
    let p = policy("[sev_snp]\nmin_tcb = { bootloader = 3, tee = 2, snp = 8, microcode = 115 }\n");
    let at_min = SnpTcb { tee: 2, ..TCB };
    assert_eq!(p.check_snp(&[0; 48], &[0; 32], 0, at_min), Ok(()));
    // Each component one below its minimum fails, even with every other
    // component far higher (a packed-integer compare would pass these).
    let high = SnpTcb {
        bootloader: 255,
        tee: 255,
        snp: 255,
        microcode: 255,
        fmc: None,
    };
    let cases = [
        (
            "bootloader",
            SnpTcb {
                bootloader: 2,
                ..high
            },
            2,
            3,
        ),
        ("tee", SnpTcb { tee: 1, ..high }, 1, 2),
        ("snp", SnpTcb { snp: 7, ..high }, 7, 8),
        (
            "microcode",
            SnpTcb {
                microcode: 114,
                ..high
            },
            114,
            115,
        ),
    ];
    for (component, tcb, reported, minimum) in cases {
        assert_violation(
            p.check_snp(&[0; 48], &[0; 32], 0, tcb),
            PolicyViolation::SnpTcbTooLow {
                component,
                reported: Some(reported),
                minimum,
            },
            "sev_snp.min_tcb",
        );
    }
    let v = p
        .check_snp(&[0; 48], &[0; 32], 0, SnpTcb { snp: 7, ..at_min })
        .unwrap_err();
    assert!(
        v.to_string().contains("snp = 7") && v.to_string().contains("minimum 8"),
        "{v}"
    );
    // No min_tcb: any TCB passes.
    assert_eq!(
        Policy::production().check_snp(&[0; 48], &[0; 32], 0, SnpTcb::default()),
        Ok(())
    );
}

#[test]
fn snp_tcb_fmc() {
    let p = policy(
        "[sev_snp]\nmin_tcb = { bootloader = 1, tee = 1, snp = 1, microcode = 1, fmc = 2 }\n",
    );
    let base = SnpTcb {
        bootloader: 1,
        tee: 1,
        snp: 1,
        microcode: 1,
        fmc: Some(2),
    };
    assert_eq!(p.check_snp(&[0; 48], &[0; 32], 0, base), Ok(()));
    assert_eq!(
        p.check_snp(
            &[0; 48],
            &[0; 32],
            0,
            SnpTcb {
                fmc: Some(9),
                ..base
            }
        ),
        Ok(())
    );
    assert_violation(
        p.check_snp(
            &[0; 48],
            &[0; 32],
            0,
            SnpTcb {
                fmc: Some(1),
                ..base
            },
        ),
        PolicyViolation::SnpTcbTooLow {
            component: "fmc",
            reported: Some(1),
            minimum: 2,
        },
        "sev_snp.min_tcb",
    );
    // The policy requires fmc; a report without one (pre-Turin) fails.
    let no_fmc = SnpTcb { fmc: None, ..base };
    assert_violation(
        p.check_snp(&[0; 48], &[0; 32], 0, no_fmc),
        PolicyViolation::SnpTcbTooLow {
            component: "fmc",
            reported: None,
            minimum: 2,
        },
        "sev_snp.min_tcb",
    );
    assert!(
        p.check_snp(&[0; 48], &[0; 32], 0, no_fmc)
            .unwrap_err()
            .to_string()
            .contains("(absent)")
    );
    // A policy without fmc ignores a reported fmc.
    let q = policy("[sev_snp]\nmin_tcb = { bootloader = 1, tee = 1, snp = 1, microcode = 1 }\n");
    assert_eq!(
        q.check_snp(
            &[0; 48],
            &[0; 32],
            0,
            SnpTcb {
                fmc: Some(0),
                ..base
            }
        ),
        Ok(())
    );
    assert_eq!(q.check_snp(&[0; 48], &[0; 32], 0, no_fmc), Ok(()));
}

#[test]
fn snp_tcb_display() {
    assert_eq!(TCB.to_string(), "bootloader=3 tee=0 snp=8 microcode=115");
    assert_eq!(
        SnpTcb {
            fmc: Some(4),
            ..TCB
        }
        .to_string(),
        "bootloader=3 tee=0 snp=8 microcode=115 fmc=4"
    );
}

// ---- tdx.* ------------------------------------------------------------------------

fn tdx_policy() -> Policy {
    policy(&format!(
        "[tdx]\nmrtd = [\"{}\"]\nrtmr0 = [\"{}\"]\nrtmr2 = [\"{}\", \"{}\"]\n\
         allowed_tcb_status = [\"UpToDate\", \"SWHardeningNeeded\"]\n\
         allowed_advisories = [\"INTEL-SA-00837\", \"INTEL-SA-00615\"]\n",
        "a0".repeat(48),
        "b0".repeat(48),
        "b2".repeat(48),
        "c2".repeat(48),
    ))
}

const RTMRS: [[u8; 48]; 4] = [[0xb0; 48], [0x01; 48], [0xc2; 48], [0x03; 48]];

fn advisories(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn tdx_pass() {
    let p = tdx_policy();
    assert_eq!(p.check_tdx(&[0xa0; 48], &RTMRS, "UpToDate", &[]), Ok(()));
    assert_eq!(
        p.check_tdx(
            &[0xa0; 48],
            &RTMRS,
            "SWHardeningNeeded",
            &advisories(&["INTEL-SA-00615", "INTEL-SA-00837"])
        ),
        Ok(())
    );
}

#[test]
fn tdx_production_defaults() {
    let p = Policy::production();
    assert_eq!(
        p.check_tdx(&[1; 48], &[[2; 48]; 4], "UpToDate", &[]),
        Ok(())
    );
    assert_violation(
        p.check_tdx(&[1; 48], &[[2; 48]; 4], "SWHardeningNeeded", &[]),
        PolicyViolation::TdxTcbStatus {
            status: "SWHardeningNeeded".to_owned(),
        },
        "tdx.tcb_status",
    );
    assert_violation(
        p.check_tdx(
            &[1; 48],
            &[[2; 48]; 4],
            "UpToDate",
            &advisories(&["INTEL-SA-00837"]),
        ),
        PolicyViolation::TdxAdvisory {
            advisory: "INTEL-SA-00837".to_owned(),
        },
        "tdx.advisory",
    );
}

#[test]
fn tdx_mrtd_and_rtmrs() {
    let p = tdx_policy();
    assert_violation(
        p.check_tdx(&[0xa1; 48], &RTMRS, "UpToDate", &[]),
        PolicyViolation::TdxMrtd {
            value: "a1".repeat(48),
        },
        "tdx.mrtd",
    );
    let mut r = RTMRS;
    r[0] = [0xb1; 48];
    assert_violation(
        p.check_tdx(&[0xa0; 48], &r, "UpToDate", &[]),
        PolicyViolation::TdxRtmr {
            index: 0,
            value: "b1".repeat(48),
        },
        "tdx.rtmr",
    );
    let mut r = RTMRS;
    r[2] = [0xb0; 48]; // RTMR0's value is not acceptable for RTMR2
    let v = p.check_tdx(&[0xa0; 48], &r, "UpToDate", &[]).unwrap_err();
    assert_eq!(
        v,
        PolicyViolation::TdxRtmr {
            index: 2,
            value: "b0".repeat(48)
        }
    );
    assert!(v.to_string().contains("RTMR2"), "{v}");
    // RTMR1 and RTMR3 are not listed: any value passes.
    let mut r = RTMRS;
    r[1] = [0xee; 48];
    r[3] = [0xff; 48];
    assert_eq!(p.check_tdx(&[0xa0; 48], &r, "UpToDate", &[]), Ok(()));
}

#[test]
fn tdx_tcb_status() {
    let p = tdx_policy();
    for bad in [
        "OutOfDate",
        "Revoked",
        "uptodate",
        "",
        "ConfigurationNeeded",
    ] {
        assert_violation(
            p.check_tdx(&[0xa0; 48], &RTMRS, bad, &[]),
            PolicyViolation::TdxTcbStatus {
                status: bad.to_owned(),
            },
            "tdx.tcb_status",
        );
    }
    let all = policy(
        "[tdx]\nallowed_tcb_status = [\"UpToDate\", \"SWHardeningNeeded\", \"ConfigurationNeeded\", \
         \"ConfigurationAndSWHardeningNeeded\", \"OutOfDate\", \"OutOfDateConfigurationNeeded\"]\n",
    );
    assert_eq!(
        all.tdx.allowed_tcb_status,
        TdxTcbStatus::ALL.into_iter().collect::<BTreeSet<_>>()
    );
    for status in TdxTcbStatus::ALL {
        assert_eq!(
            all.check_tdx(&[0; 48], &[[0; 48]; 4], status.as_str(), &[]),
            Ok(())
        );
    }
    // Revoked can never be allowed.
    assert!(
        all.check_tdx(&[0; 48], &[[0; 48]; 4], "Revoked", &[])
            .is_err()
    );
}

#[test]
fn tdx_advisories() {
    let p = tdx_policy();
    assert_violation(
        p.check_tdx(
            &[0xa0; 48],
            &RTMRS,
            "UpToDate",
            &advisories(&["INTEL-SA-00837", "INTEL-SA-00999"]),
        ),
        PolicyViolation::TdxAdvisory {
            advisory: "INTEL-SA-00999".to_owned(),
        },
        "tdx.advisory",
    );
}

// ---- rule ids ---------------------------------------------------------------------

#[test]
fn rule_ids_are_the_documented_set() {
    let all = [
        PolicyViolation::PlatformNotAllowed {
            platform: Platform::None,
        },
        PolicyViolation::DebugNotAllowed,
        PolicyViolation::EgressRecordMissing,
        PolicyViolation::EgressNotBlocked,
        PolicyViolation::TooManyBlockedAttempts {
            attempts: 1,
            max: 0,
        },
        PolicyViolation::BlockedAttemptsUnknown { max: 0 },
        PolicyViolation::MetricMissing {
            metric: String::new(),
        },
        PolicyViolation::MetricOutOfBounds {
            metric: String::new(),
            value: 0.0,
            min: None,
            max: None,
        },
        PolicyViolation::NitroPcrMissing { index: 0 },
        PolicyViolation::NitroPcrNotAllowed {
            index: 0,
            value: String::new(),
        },
        PolicyViolation::SnpMeasurement {
            value: String::new(),
        },
        PolicyViolation::SnpHostData {
            value: String::new(),
        },
        PolicyViolation::SnpVmpl { vmpl: 1, max: 0 },
        PolicyViolation::SnpTcbTooLow {
            component: "tee",
            reported: None,
            minimum: 0,
        },
        PolicyViolation::TdxMrtd {
            value: String::new(),
        },
        PolicyViolation::TdxRtmr {
            index: 0,
            value: String::new(),
        },
        PolicyViolation::TdxTcbStatus {
            status: String::new(),
        },
        PolicyViolation::TdxAdvisory {
            advisory: String::new(),
        },
    ];
    let ids: BTreeSet<&str> = all.iter().map(PolicyViolation::rule).collect();
    let expected: BTreeSet<&str> = [
        "platform.allowed",
        "debug",
        "egress.must_be_zero",
        "egress.max_blocked_attempts",
        "quality.gate",
        "nitro.pcr",
        "sev_snp.measurement",
        "sev_snp.host_data",
        "sev_snp.vmpl",
        "sev_snp.min_tcb",
        "tdx.mrtd",
        "tdx.rtmr",
        "tdx.tcb_status",
        "tdx.advisory",
    ]
    .into_iter()
    .collect();
    assert_eq!(ids, expected);
    for v in &all {
        assert!(v.to_string().starts_with(&format!("{}: ", v.rule())), "{v}");
    }
}

fn facts<'a>(landlock: &'a str, netns: &'a str) -> kolm_policy::SandboxFacts<'a> {
    kolm_policy::SandboxFacts {
        egress_blocked: true,
        blocked_total: 0,
        landlock_status: landlock,
        network_namespace: netns,
        count_exact: true,
        isolation: Some(ISOLATED),
    }
}

const ISOLATED: kolm_policy::IsolationFacts<'static> = kolm_policy::IsolationFacts {
    job_ids: "per_run",
    pid_namespace: "private",
    ipc_namespace: "private",
    mount_namespace: "private_root",
};

/// Issue 12 item 2: a record of a job that shared the host's PID or IPC
/// namespace, ran as a fixed or inherited uid, or saw the host's file
/// system (not root) fails the default policy, naming the field.
#[test]
fn isolation_is_required_by_default() {
    let p = Policy::production();
    let with = |isolation| kolm_policy::SandboxFacts {
        isolation,
        ..facts("fully_enforced", "empty")
    };
    assert_eq!(p.check_sandbox(Some(&with(Some(ISOLATED)))), Ok(()));
    assert_violation(
        p.check_sandbox(Some(&with(None))),
        PolicyViolation::NotIsolated {
            field: "hygiene.isolation",
            value: "absent".to_owned(),
            required: "present",
        },
        "egress.require_isolation",
    );
    type Change = fn(&mut kolm_policy::IsolationFacts<'static>);
    let cases: [(&str, Change, &str); 4] = [
        ("isolation.job_ids", |i| i.job_ids = "inherited", "per_run"),
        (
            "isolation.pid_namespace",
            |i| i.pid_namespace = "shared: needs root",
            "private",
        ),
        (
            "isolation.ipc_namespace",
            |i| i.ipc_namespace = "shared: needs root",
            "private",
        ),
        (
            "isolation.mount_namespace",
            |i| i.mount_namespace = "shared: needs root",
            "private_root",
        ),
    ];
    for (field, change, required) in cases {
        let mut i = ISOLATED;
        change(&mut i);
        let value = [
            i.job_ids,
            i.pid_namespace,
            i.ipc_namespace,
            i.mount_namespace,
        ]
        .into_iter()
        .find(|v| !["per_run", "private", "private_root"].contains(v))
        .unwrap()
        .to_owned();
        assert_violation(
            p.check_sandbox(Some(&with(Some(i)))),
            PolicyViolation::NotIsolated {
                field,
                value,
                required,
            },
            "egress.require_isolation",
        );
    }
    let relaxed = policy("[egress]\nrequire_isolation = false\n");
    assert_eq!(relaxed.check_sandbox(Some(&with(None))), Ok(()));
}

#[test]
fn a_lower_bound_count_cannot_show_a_limit_was_kept() {
    let p = policy("[egress]\nmax_blocked_attempts = 3\n");
    let lower = |n| kolm_policy::SandboxFacts {
        blocked_total: n,
        count_exact: false,
        ..facts("fully_enforced", "empty")
    };
    let exact = |n| kolm_policy::SandboxFacts {
        blocked_total: n,
        ..facts("fully_enforced", "empty")
    };
    assert_eq!(p.check_sandbox(Some(&exact(3))), Ok(()));
    assert_violation(
        p.check_sandbox(Some(&lower(0))),
        PolicyViolation::BlockedAttemptsLowerBound {
            attempts: 0,
            max: 3,
        },
        "egress.max_blocked_attempts",
    );
    // Above the limit even as a lower bound: exceeded, provably.
    assert_violation(
        p.check_sandbox(Some(&lower(4))),
        PolicyViolation::TooManyBlockedAttempts {
            attempts: 4,
            max: 3,
        },
        "egress.max_blocked_attempts",
    );
    // Without a limit, a lower bound is fine.
    assert_eq!(Policy::production().check_sandbox(Some(&lower(9))), Ok(()));
}

#[test]
fn sandbox_landlock_and_network_namespace_are_required_by_default() {
    let p = Policy::production();
    assert_eq!(
        p.check_sandbox(Some(&facts("fully_enforced", "empty"))),
        Ok(())
    );
    for status in [
        "not_enforced",
        "partially_enforced",
        "dangerous_disabled",
        "error: x",
    ] {
        assert_violation(
            p.check_sandbox(Some(&facts(status, "empty"))),
            PolicyViolation::LandlockNotEnforced {
                status: status.to_owned(),
            },
            "egress.require_landlock",
        );
    }
    assert_violation(
        p.check_sandbox(Some(&facts("fully_enforced", "shared: not root"))),
        PolicyViolation::NetworkNamespaceShared {
            value: "shared: not root".to_owned(),
        },
        "egress.require_network_namespace",
    );
    // egress_blocked false is still egress.must_be_zero, checked first.
    let open = kolm_policy::SandboxFacts {
        egress_blocked: false,
        ..facts("not_enforced", "shared: x")
    };
    assert_violation(
        p.check_sandbox(Some(&open)),
        PolicyViolation::EgressNotBlocked,
        "egress.must_be_zero",
    );
    assert_eq!(
        p.check_sandbox(None),
        Err(PolicyViolation::EgressRecordMissing)
    );
    // Relaxed, knowingly (a stock Nitro kernel has no Landlock).
    let relaxed = policy("[egress]\nrequire_landlock = false\nrequire_network_namespace = false\n");
    assert_eq!(
        relaxed.check_sandbox(Some(&facts("not_enforced", "shared: x"))),
        Ok(())
    );
}

#[test]
fn job_exit_is_not_configurable() {
    let p = Policy::production();
    let end = |code, signal, exec_error| kolm_policy::JobEnd {
        code,
        signal,
        exec_error,
    };
    assert_eq!(p.check_job_end(&end(Some(0), None, None)), Ok(()));
    for bad in [
        end(Some(137), None, None),
        end(Some(1), None, None),
        end(None, Some(9), None),
        end(None, None, Some("ENOENT")),
        end(None, None, None),
    ] {
        let v = p.check_job_end(&bad).unwrap_err();
        assert_eq!(v.rule(), "job.exit", "{bad:?}");
    }
}

#[test]
fn freshness_defaults_and_rules() {
    let p = Policy::production();
    assert_eq!(p.freshness.nitro_max_skew_seconds, 300);
    assert_eq!(p.freshness.tdx_min_tcb_evaluation_data_number, 17);
    assert!(p.freshness.require_snp_min_tcb);
    // Both directions, inclusive.
    assert_eq!(p.check_nitro_skew(300_000), Ok(()));
    assert_eq!(p.check_nitro_skew(-300_000), Ok(()));
    for skew in [300_001, -300_001, i128::MIN, i128::MAX] {
        assert_eq!(
            p.check_nitro_skew(skew).unwrap_err().rule(),
            "freshness.nitro_max_skew_seconds"
        );
    }
    assert_eq!(p.check_tdx_evaluation_number(17), Ok(()));
    assert_violation(
        p.check_tdx_evaluation_number(15),
        PolicyViolation::TdxEvaluationNumberTooLow {
            number: 15,
            minimum: 17,
        },
        "freshness.tdx_min_tcb_evaluation_data_number",
    );
    assert_violation(
        p.check_snp_min_tcb_set(),
        PolicyViolation::SnpMinTcbUnset,
        "freshness.require_snp_min_tcb",
    );
    // Issue 12 item 5: collateral outside the signature (a v1 artifact) is
    // refused by default, accepted only when the policy says so.
    assert!(p.freshness.require_bound_collateral);
    assert_violation(
        p.check_collateral_bound(Platform::Tdx),
        PolicyViolation::CollateralNotBound {
            platform: Platform::Tdx,
        },
        "freshness.require_bound_collateral",
    );
    let off = policy("[freshness]\nrequire_bound_collateral = false\n");
    assert_eq!(off.check_collateral_bound(Platform::SevSnp), Ok(()));
    assert_eq!(
        Policy::from_toml_str(&off.to_toml_string().unwrap()).unwrap(),
        off
    );
    let set = policy(
        "[sev_snp]\nmin_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }\n\
         [freshness]\nnitro_max_skew_seconds = 0\ntdx_min_tcb_evaluation_data_number = 0\n",
    );
    assert_eq!(set.check_snp_min_tcb_set(), Ok(()));
    assert_eq!(set.check_tdx_evaluation_number(0), Ok(()));
    assert!(set.check_nitro_skew(1).is_err());
    let round = Policy::from_toml_str(&set.to_toml_string().unwrap()).unwrap();
    assert_eq!(round, set);
    assert!(Policy::from_toml_str(
        "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\"]\n[freshness]\nnitro_max_skew_seconds = 86401\n"
    )
    .is_err());
}

// Issue 12, item 1: what pins a guest's launch identity.
mod pinning {
    use kolm_policy::{IdentityField, Pinning, Platform, Policy, PolicyError, PolicyViolation};
    use std::collections::BTreeMap;

    fn p(body: &str) -> Policy {
        Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\"]\n{body}"
        ))
        .unwrap()
    }

    fn h(n: usize, b: u8) -> String {
        hex::encode(vec![b; n])
    }

    #[test]
    fn production_pins_nothing_on_any_platform() {
        let prod = Policy::production();
        for platform in Platform::ALL {
            let pin = prod.pinning(platform, Some(&[1; 48]));
            assert!(!pin.is_pinned(), "{platform}");
            assert!(pin.to_string().starts_with(kolm_policy::UNPINNED_REASON));
        }
    }

    #[test]
    fn nitro_needs_pcr0_or_pcr1_and_pcr2() {
        let pin = |pcrs: &[u8]| {
            let body: String = pcrs
                .iter()
                .map(|i| format!("{i} = [\"{}\"]\n", h(48, *i)))
                .collect();
            p(&format!("[nitro.pcrs]\n{body}")).pinning(Platform::Nitro, None)
        };
        assert!(pin(&[0]).is_pinned());
        assert!(pin(&[1, 2]).is_pinned());
        assert!(!pin(&[1]).is_pinned());
        assert!(!pin(&[8]).is_pinned());
        assert!(!pin(&[3, 4, 8]).is_pinned());
        assert_eq!(
            pin(&[0, 8]),
            Pinning::Pinned {
                by: vec![IdentityField::NitroPcr(0), IdentityField::NitroPcr(8)]
            }
        );
    }

    #[test]
    fn snp_needs_an_image_measurement_or_an_id_key() {
        let m = [7u8; 48];
        let image = p(&format!("[sev_snp]\nmeasurements = [\"{}\"]\n", h(48, 7)));
        assert!(image.pinning(Platform::SevSnp, Some(&m)).is_pinned());
        // Not the listed one (cannot pass the measurement rule anyway).
        assert!(!image.pinning(Platform::SevSnp, Some(&[8; 48])).is_pinned());
        let firmware = p(&format!(
            "[sev_snp]\nfirmware_measurements = [\"{}\"]\nhost_data = [\"{}\"]\n",
            h(48, 7),
            h(32, 1)
        ));
        assert_eq!(
            firmware.pinning(Platform::SevSnp, Some(&m)),
            Pinning::Unpinned {
                compared: vec![
                    IdentityField::SnpFirmwareMeasurement,
                    IdentityField::SnpHostData
                ],
                needs: "sev_snp.measurements (a launch digest that covers the guest image) or \
                        sev_snp.id_key_digests",
            }
        );
        let id_key = p(&format!("[sev_snp]\nid_key_digests = [\"{}\"]\n", h(48, 9)));
        assert!(id_key.pinning(Platform::SevSnp, Some(&m)).is_pinned());
        assert_eq!(id_key.check_snp_id_key(&[9; 48]), Ok(()));
        assert_eq!(
            id_key.check_snp_id_key(&[0; 48]).unwrap_err().rule(),
            "sev_snp.id_key_digest"
        );
        // Behind Azure the SNP lists describe the paravisor: never a pin.
        assert!(!image.pinning(Platform::AzureSevSnp, Some(&m)).is_pinned());
        assert!(!id_key.pinning(Platform::AzureSevSnp, None).is_pinned());
    }

    #[test]
    fn snp_digest_lists_are_checked_at_parse() {
        let zero = Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"sev-snp\"]\n[sev_snp]\nid_key_digests = [\"{}\", \"{}\"]\n",
            h(48, 1),
            h(48, 0)
        ))
        .unwrap_err();
        assert_eq!(
            zero,
            PolicyError::ZeroIdKeyDigest {
                key: "sev_snp.id_key_digests[1]".into(),
                line: 4
            }
        );
        let both = Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"sev-snp\"]\n[sev_snp]\nmeasurements = [\"{0}\"]\nfirmware_measurements = [\"{0}\"]\n",
            h(48, 1)
        ))
        .unwrap_err();
        assert!(
            matches!(both, PolicyError::Duplicate { ref key, .. } if key == "sev_snp.firmware_measurements"),
            "{both}"
        );
        // A firmware digest is accepted by the measurement rule.
        let fw = p(&format!(
            "[sev_snp]\nfirmware_measurements = [\"{}\"]\n",
            h(48, 1)
        ));
        assert_eq!(
            fw.check_snp(&[1; 48], &[0; 32], 0, Default::default()),
            Ok(())
        );
        assert!(
            fw.check_snp(&[2; 48], &[0; 32], 0, Default::default())
                .is_err()
        );
    }

    #[test]
    fn snp_migration_agent_is_refused_by_default() {
        assert_eq!(
            Policy::production().check_snp_migration(true),
            Err(PolicyViolation::SnpMigrateMa)
        );
        assert_eq!(PolicyViolation::SnpMigrateMa.rule(), "sev_snp.migrate_ma");
        assert_eq!(Policy::production().check_snp_migration(false), Ok(()));
        let allow = p("[sev_snp]\nallow_migration = true\n");
        assert_eq!(allow.check_snp_migration(true), Ok(()));
    }

    #[test]
    fn tdx_needs_mrtd_and_rtmr0_to_2() {
        let body = |rtmrs: &[u8]| {
            let mut b = format!("[tdx]\nmrtd = [\"{}\"]\n", h(48, 1));
            for i in rtmrs {
                b.push_str(&format!("rtmr{i} = [\"{}\"]\n", h(48, 2)));
            }
            b
        };
        assert!(
            p(&body(&[0, 1, 2]))
                .pinning(Platform::Tdx, None)
                .is_pinned()
        );
        assert!(!p(&body(&[1, 2])).pinning(Platform::Tdx, None).is_pinned());
        assert!(!p(&body(&[])).pinning(Platform::Tdx, None).is_pinned());
        let cfg = p(&format!(
            "[tdx]\nmrconfigid = [\"{}\"]\nmrowner = [\"{}\"]\n",
            h(48, 3),
            h(48, 4)
        ));
        assert!(!cfg.pinning(Platform::Tdx, None).is_pinned());
        assert_eq!(cfg.check_tdx_config(&[3; 48], &[4; 48], &[0; 48]), Ok(()));
        let v = cfg
            .check_tdx_config(&[3; 48], &[5; 48], &[0; 48])
            .unwrap_err();
        assert_eq!(v.rule(), "tdx.mrowner");
        assert!(v.to_string().contains("MROWNER"), "{v}");
        // Behind Azure, MRTD and RTMRs are the paravisor's.
        assert!(
            !p(&body(&[0, 1, 2]))
                .pinning(Platform::AzureTdx, None)
                .is_pinned()
        );
    }

    #[test]
    fn azure_needs_vtpm_pcr4_and_an_os_pcr_all_quoted() {
        let body = |pcrs: &[u8]| {
            let b: String = pcrs
                .iter()
                .map(|i| format!("{i} = [\"{}\"]\n", h(32, *i)))
                .collect();
            p(&format!("[azure.pcrs]\n{b}"))
        };
        for (pcrs, pinned) in [
            (&[4u8, 9][..], true),
            (&[4, 8], true),
            (&[4, 11], true),
            (&[4], false),
            (&[9, 11], false),
            (&[0, 7], false),
        ] {
            for platform in [Platform::AzureSevSnp, Platform::AzureTdx] {
                assert_eq!(
                    body(pcrs).pinning(platform, None).is_pinned(),
                    pinned,
                    "{pcrs:?}"
                );
            }
        }
        let pol = body(&[4, 9]);
        let quoted: BTreeMap<u8, [u8; 32]> = [(4, [4; 32]), (9, [9; 32])].into();
        assert_eq!(pol.check_azure_pcrs(&quoted), Ok(()));
        let only4: BTreeMap<u8, [u8; 32]> = [(4, [4; 32])].into();
        assert_eq!(
            pol.check_azure_pcrs(&only4),
            Err(PolicyViolation::AzurePcrNotQuoted { index: 9 })
        );
        let wrong: BTreeMap<u8, [u8; 32]> = [(4, [4; 32]), (9, [1; 32])].into();
        assert_eq!(
            pol.check_azure_pcrs(&wrong).unwrap_err().rule(),
            "azure.pcr"
        );
        // vTPM PCRs are 0..=23.
        let e = Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"azure-tdx\"]\n[azure.pcrs]\n24 = [\"{}\"]\n",
            h(32, 0)
        ))
        .unwrap_err();
        assert!(e.to_string().contains("0..=23"), "{e}");
    }

    #[test]
    fn new_sections_round_trip() {
        let pol = Policy::from_toml_str(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"azure-sev-snp\"]\n[sev_snp]\nfirmware_measurements = [\"{}\"]\nid_key_digests = [\"{}\"]\nallow_migration = true\n[tdx]\nmrconfigid = [\"{}\"]\nmrowner = [\"{}\"]\nmrownerconfig = [\"{}\"]\n[azure.pcrs]\n4 = [\"{}\"]\n",
            h(48, 1), h(48, 2), h(48, 3), h(48, 4), h(48, 5), h(32, 6)
        ))
        .unwrap();
        let again = Policy::from_toml_str(&pol.to_toml_string().unwrap()).unwrap();
        assert_eq!(again, pol);
    }
}

#[test]
fn limits_are_read_and_unknown_limits_refused() {
    let p = policy("[limits]\nmax_input_bytes = 1048576\nmax_job_seconds = 600\n");
    assert_eq!(p.limits.max_input_bytes, Some(1_048_576));
    assert_eq!(p.limits.max_job_seconds, Some(600));
    assert_eq!(
        Policy::production().limits,
        kolm_policy::LimitsPolicy::default()
    );
    let text = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\"]\n\
                [limits]\nmax_gpu_hours = 1\n";
    assert!(Policy::from_toml_str(text).is_err());
}
