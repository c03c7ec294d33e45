//! Every class of malformed policy is rejected with an error that names the
//! key, the line and the bad value.

use kolm_policy::{Policy, PolicyError};

const HEAD: &str = "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"nitro\"]\n";

fn h48() -> String {
    "ab".repeat(48)
}

fn err(src: &str) -> PolicyError {
    match Policy::from_toml_str(src) {
        Ok(p) => panic!("accepted:\n{src}\n=> {p:?}"),
        Err(e) => e,
    }
}

fn assert_mentions(e: &PolicyError, parts: &[&str]) {
    let msg = e.to_string();
    for part in parts {
        assert!(msg.contains(part), "{part:?} not in message:\n{msg}");
    }
}

#[test]
fn unknown_top_level_key() {
    let e = err(&format!("{HEAD}allow_debugg = true\n"));
    assert!(matches!(e, PolicyError::Toml { .. }), "{e:?}");
    assert_mentions(&e, &["`allow_debugg`", "line 3"]);
}

#[test]
fn unknown_key_in_each_table() {
    for (table, line) in [
        ("[nitro]", 4),
        ("[sev_snp]", 4),
        ("[tdx]", 4),
        ("[egress]", 4),
        ("[[quality.gates]]\nmetric = \"m\"\nmax = 1.0", 6),
    ] {
        let e = err(&format!("{HEAD}{table}\nsurprise = 1\n"));
        assert!(matches!(e, PolicyError::Toml { .. }), "{table}: {e:?}");
        assert_mentions(&e, &["`surprise`", &format!("line {line}")]);
    }
}

#[test]
fn unknown_key_in_inline_tables() {
    let e = err(&format!(
        "{HEAD}[sev_snp]\nmin_tcb = {{ bootloader = 1, tee = 0, snp = 0, microcode = 0, fnc = 1 }}\n"
    ));
    assert_mentions(&e, &["`fnc`", "line 4"]);
    let e = err(&format!("{HEAD}[quality]\nthresholds = []\n"));
    assert_mentions(&e, &["`thresholds`", "line 4"]);
    let e = err(&format!("{HEAD}[egress.sub]\n"));
    assert_mentions(&e, &["`sub`", "line 3"]);
}

#[test]
fn min_tcb_requires_every_component_but_fmc() {
    let e = err(&format!(
        "{HEAD}[sev_snp]\nmin_tcb = {{ bootloader = 1, tee = 0, snp = 0 }}\n"
    ));
    assert_mentions(&e, &["microcode", "line 4"]);
    let e = err(&format!(
        "{HEAD}[sev_snp]\nmin_tcb = {{ bootloader = 256, tee = 0, snp = 0, microcode = 0 }}\n"
    ));
    assert_mentions(&e, &["256", "line 4"]);
}

#[test]
fn syntax_error() {
    let e = err("schema = \"kolm.policy.v1\nallowed_platforms = [\"nitro\"]\n");
    assert!(matches!(e, PolicyError::Toml { .. }), "{e:?}");
    assert_mentions(&e, &["line 1"]);
}

#[test]
fn wrong_types() {
    let e = err(&format!("{HEAD}allow_debug = \"no\"\n"));
    assert_mentions(&e, &["line 3"]);
    let e = err("schema = \"kolm.policy.v1\"\nallowed_platforms = \"nitro\"\n");
    assert_mentions(&e, &["line 2"]);
    let e = err(&format!("{HEAD}[egress]\nmax_blocked_attempts = -1\n"));
    assert_mentions(&e, &["line 4"]);
}

#[test]
fn missing_or_wrong_schema() {
    let e = err("allowed_platforms = [\"nitro\"]\n");
    assert!(matches!(e, PolicyError::Toml { .. }), "{e:?}");
    assert_mentions(&e, &["`schema`"]);

    for bad in ["kolm.policy.v2", "KOLM.POLICY.V1", "kolm.policy.v1 ", ""] {
        let e = err(&format!(
            "allowed_platforms = [\"nitro\"]\nschema = \"{bad}\"\n"
        ));
        assert_eq!(
            e,
            PolicyError::Schema {
                found: bad.to_owned(),
                line: 2
            }
        );
        assert_mentions(&e, &["`schema`", "line 2", &format!("{bad:?}")]);
    }
}

#[test]
fn missing_allowed_platforms() {
    let e = err("schema = \"kolm.policy.v1\"\n");
    assert_mentions(&e, &["`allowed_platforms`"]);
}

#[test]
fn empty_allowed_platforms() {
    let e = err("schema = \"kolm.policy.v1\"\n\nallowed_platforms = []\n");
    assert_eq!(
        e,
        PolicyError::Empty {
            key: "allowed_platforms".to_owned(),
            line: 3
        }
    );
    assert_mentions(&e, &["`allowed_platforms`", "must not be empty"]);
}

#[test]
fn unknown_platform_string() {
    for bad in ["sgx", "SEV-SNP", "sev_snp", "Nitro", ""] {
        let e = err(&format!(
            "schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\", \"{bad}\"]\n"
        ));
        assert!(matches!(e, PolicyError::Toml { .. }), "{e:?}");
        assert_mentions(&e, &["unknown platform", &format!("{bad:?}"), "line 2"]);
    }
}

#[test]
fn duplicate_platform() {
    let e =
        err("schema = \"kolm.policy.v1\"\nallowed_platforms = [\"tdx\",\n  \"nitro\", \"tdx\"]\n");
    assert_eq!(
        e,
        PolicyError::Duplicate {
            key: "allowed_platforms[2]".to_owned(),
            line: 3,
            value: "tdx".to_owned()
        }
    );
}

#[test]
fn bad_hex_length_in_every_hex_list() {
    let short = "ab".repeat(47);
    for (table, key, bytes) in [
        ("[sev_snp]", "measurements", 48),
        ("[sev_snp]", "host_data", 32),
        ("[tdx]", "mrtd", 48),
        ("[tdx]", "rtmr0", 48),
        ("[tdx]", "rtmr1", 48),
        ("[tdx]", "rtmr2", 48),
        ("[tdx]", "rtmr3", 48),
        ("[nitro.pcrs]", "4", 48),
    ] {
        let e = err(&format!(
            "{HEAD}{table}\n{key} = [\"{}\",\n\"{short}\"]\n",
            "cd".repeat(bytes)
        ));
        let section = table.trim_matches(['[', ']']);
        let path = if section == "nitro.pcrs" {
            format!("nitro.pcrs.\"{key}\"[1]")
        } else {
            format!("{section}.{key}[1]")
        };
        assert_eq!(
            e,
            PolicyError::HexLength {
                key: path.clone(),
                line: 5,
                expected_bytes: bytes,
                expected_chars: bytes * 2,
                found_chars: 94
            },
            "{path}"
        );
        assert_mentions(
            &e,
            &[
                &path,
                "line 5",
                &format!("expected {} hex", bytes * 2),
                "found 94",
            ],
        );
    }
}

#[test]
fn hex_too_long_and_empty() {
    let e = err(&format!(
        "{HEAD}[sev_snp]\nhost_data = [\"{}\"]\n",
        "00".repeat(33)
    ));
    assert!(
        matches!(
            e,
            PolicyError::HexLength {
                found_chars: 66,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&format!("{HEAD}[sev_snp]\nhost_data = [\"\"]\n"));
    assert!(
        matches!(e, PolicyError::HexLength { found_chars: 0, .. }),
        "{e:?}"
    );
}

#[test]
fn non_hex() {
    for bad in [
        format!("zz{}", "ab".repeat(47)),
        format!("0x{}", "ab".repeat(48)),
        format!("{} ", "ab".repeat(48)),
        format!("{}é", "ab".repeat(47)),
    ] {
        let e = err(&format!("{HEAD}[tdx]\nmrtd = [\"{bad}\"]\n"));
        assert_eq!(
            e,
            PolicyError::NotHex {
                key: "tdx.mrtd[0]".to_owned(),
                line: 4,
                value: bad.clone()
            }
        );
        assert_mentions(&e, &["`tdx.mrtd[0]`", "not a hex string", &bad]);
    }
}

#[test]
fn duplicate_hex_entries_compare_as_bytes() {
    let lower = h48();
    let upper = lower.to_uppercase();
    for (table, key) in [
        ("[sev_snp]", "measurements"),
        ("[tdx]", "mrtd"),
        ("[tdx]", "rtmr3"),
        ("[nitro.pcrs]", "\"0\""),
    ] {
        let e = err(&format!(
            "{HEAD}{table}\n{key} = [\"{lower}\", \"{upper}\"]\n"
        ));
        assert!(
            matches!(&e, PolicyError::Duplicate { line: 4, value, .. } if *value == lower),
            "{key}: {e:?}"
        );
        assert_mentions(&e, &["[1]`", "duplicate entry", &lower]);
    }
    let h32 = "cd".repeat(32);
    let e = err(&format!(
        "{HEAD}[sev_snp]\nhost_data = [\"{h32}\", \"{h32}\"]\n"
    ));
    assert_eq!(
        e,
        PolicyError::Duplicate {
            key: "sev_snp.host_data[1]".to_owned(),
            line: 4,
            value: h32
        }
    );
}

#[test]
fn mixed_case_hex_is_accepted_as_bytes() {
    let p = Policy::from_toml_str(&format!(
        "{HEAD}[sev_snp]\nhost_data = [\"{}\"]\n",
        "aB".repeat(32)
    ))
    .unwrap();
    assert!(p.sev_snp.host_data.contains(&[0xab; 32]));
}

#[test]
fn pcr_index_out_of_range_or_not_canonical() {
    let h = h48();
    for bad in ["32", "255", "256", "-1", "+1", "01", "x", "", "1.0"] {
        let e = err(&format!(
            "{HEAD}[nitro]\npcrs = {{ \"{bad}\" = [\"{h}\"] }}\n"
        ));
        assert_eq!(
            e,
            PolicyError::PcrIndex {
                key: "nitro.pcrs".to_owned(),
                line: 4,
                value: bad.to_owned(),
                max: 31,
            }
        );
        assert_mentions(&e, &["`nitro.pcrs`", &format!("{bad:?}"), "0..=31"]);
    }
    // 0 and 31 are the ends of the legal range; bare keys work too.
    let p = Policy::from_toml_str(&format!(
        "{HEAD}[nitro]\npcrs = {{ 0 = [\"{h}\"], \"31\" = [\"{h}\"] }}\n"
    ))
    .unwrap();
    assert_eq!(
        p.nitro.pcrs.keys().copied().collect::<Vec<_>>(),
        vec![0, 31]
    );
}

#[test]
fn empty_pcr_allow_list() {
    let e = err(&format!("{HEAD}[nitro.pcrs]\n7 = []\n"));
    assert_eq!(
        e,
        PolicyError::Empty {
            key: "nitro.pcrs.\"7\"".to_owned(),
            line: 4
        }
    );
}

#[test]
fn max_vmpl_range() {
    for ok in 0..=3u8 {
        let p = Policy::from_toml_str(&format!("{HEAD}[sev_snp]\nmax_vmpl = {ok}\n")).unwrap();
        assert_eq!(p.sev_snp.max_vmpl, ok);
    }
    for bad in [4u64, 255, 256, 1 << 40] {
        let e = err(&format!("{HEAD}[sev_snp]\nmax_vmpl = {bad}\n"));
        assert_eq!(
            e,
            PolicyError::OutOfRange {
                key: "sev_snp.max_vmpl".to_owned(),
                line: 4,
                value: bad,
                range: "0..=3"
            }
        );
    }
}

#[test]
fn tcb_status_list() {
    let e = err(&format!(
        "{HEAD}[tdx]\nallowed_tcb_status = [\"UpToDate\", \"Revoked\"]\n"
    ));
    assert!(matches!(e, PolicyError::Toml { .. }), "{e:?}");
    assert_mentions(&e, &["\"Revoked\"", "line 4"]);

    let e = err(&format!("{HEAD}[tdx]\nallowed_tcb_status = []\n"));
    assert!(matches!(e, PolicyError::Empty { line: 4, .. }), "{e:?}");

    let e = err(&format!(
        "{HEAD}[tdx]\nallowed_tcb_status = [\"OutOfDate\", \"OutOfDate\"]\n"
    ));
    assert_eq!(
        e,
        PolicyError::Duplicate {
            key: "tdx.allowed_tcb_status[1]".to_owned(),
            line: 4,
            value: "OutOfDate".to_owned()
        }
    );
}

#[test]
fn advisories() {
    let e = err(&format!(
        "{HEAD}[tdx]\nallowed_advisories = [\"INTEL-SA-00837\", \"INTEL-SA-00837\"]\n"
    ));
    assert!(
        matches!(&e, PolicyError::Duplicate { key, .. } if key == "tdx.allowed_advisories[1]"),
        "{e:?}"
    );
    for bad in ["", " INTEL-SA-1", "INTEL SA"] {
        let e = err(&format!("{HEAD}[tdx]\nallowed_advisories = [\"{bad}\"]\n"));
        assert!(
            matches!(&e, PolicyError::BadName { key, line: 4, value } if key == "tdx.allowed_advisories[0]" && value == bad),
            "{e:?}"
        );
    }
}

fn gate(body: &str) -> PolicyError {
    err(&format!(
        "{HEAD}\n[[quality.gates]]\nmetric = \"ok\"\nmax = 1\n\n[[quality.gates]]\n{body}\n"
    ))
}

#[test]
fn gate_min_above_max() {
    let e = gate("metric = \"eval_loss\"\nmin = 3.5\nmax = 3.0");
    assert_eq!(
        e,
        PolicyError::MinAboveMax {
            key: "quality.gates[1]".to_owned(),
            line: 8,
            metric: "eval_loss".to_owned(),
            min: 3.5,
            max: 3.0
        }
    );
    assert_mentions(
        &e,
        &["`quality.gates[1]`", "line 8", "eval_loss", "3.5", "3"],
    );
    // min == max is a legal (exact) gate.
    Policy::from_toml_str(&format!(
        "{HEAD}[[quality.gates]]\nmetric = \"m\"\nmin = 1\nmax = 1\n"
    ))
    .unwrap();
}

#[test]
fn gate_without_bounds() {
    let e = gate("metric = \"eval_loss\"");
    assert_eq!(
        e,
        PolicyError::GateWithoutBound {
            key: "quality.gates[1]".to_owned(),
            line: 8,
            metric: "eval_loss".to_owned()
        }
    );
}

#[test]
fn gate_bounds_must_be_finite() {
    for (body, key, value) in [
        ("max = nan", "max", f64::NAN),
        ("max = inf", "max", f64::INFINITY),
        ("min = -inf", "min", f64::NEG_INFINITY),
        ("min = +nan\nmax = 1.0", "min", f64::NAN),
    ] {
        let e = gate(&format!("metric = \"m\"\n{body}"));
        let PolicyError::NotFinite {
            key: k,
            line,
            value: v,
        } = &e
        else {
            panic!("{body}: {e:?}");
        };
        assert_eq!(k, &format!("quality.gates[1].{key}"));
        assert_eq!(*line, 10);
        assert!(
            v.is_nan() == value.is_nan() && (v.is_nan() || *v == value),
            "{v}"
        );
    }
}

#[test]
fn gate_metric_name() {
    let e = gate("metric = \"\"\nmax = 1");
    assert!(
        matches!(&e, PolicyError::BadName { key, line: 9, .. } if key == "quality.gates[1].metric"),
        "{e:?}"
    );
    let e = gate("max = 1");
    assert_mentions(&e, &["`metric`"]);
    let e = gate("metric = \"ok\"\nmin = 0");
    assert_eq!(
        e,
        PolicyError::Duplicate {
            key: "quality.gates[1].metric".to_owned(),
            line: 8,
            value: "ok".to_owned()
        }
    );
}

#[test]
fn integer_gate_bounds_are_accepted() {
    let p = Policy::from_toml_str(&format!(
        "{HEAD}[[quality.gates]]\nmetric = \"m\"\nmin = -2\nmax = 3\n"
    ))
    .unwrap();
    assert_eq!(p.quality.gates[0].min, Some(-2.0));
    assert_eq!(p.quality.gates[0].max, Some(3.0));
}
