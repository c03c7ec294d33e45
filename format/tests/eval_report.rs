//! `kolm.eval-report.v1`: the derivations by hand, the round trip, and the
//! strict reader's refusals (each made by editing one field of a good
//! report and re-canonicalising, so the rule under test is what refuses).

use kolm_format::eval_report::{
    ByKind, CALIBRATION_BINS, CalibrationBin, EvalReport, EvalReportError, KindCount,
    MAX_EVAL_REPORT_BYTES, Measurements,
};
use kolm_format::jcs;
use serde_json::{Value, json};

fn measurements() -> Measurements {
    let mut bins = vec![CalibrationBin::default(); CALIBRATION_BINS];
    // 4 questions at confidence 0.75 (2 right), 6 at 0.95 (6 right).
    bins[7] = CalibrationBin {
        count: 4,
        correct: 2,
        confidence_sum: 3.0,
    };
    bins[9] = CalibrationBin {
        count: 6,
        correct: 6,
        confidence_sum: 5.7,
    };
    Measurements {
        predicted_tokens: 3,
        nll_sum: 16f64.ln(),
        qa_seed: u64::MAX,
        qa_set_sha256: "ab".repeat(32),
        options: 4,
        by_kind: ByKind {
            play: KindCount {
                questions: 4,
                correct: 3,
            },
            speaker: KindCount {
                questions: 3,
                correct: 3,
            },
            cloze: KindCount {
                questions: 3,
                correct: 2,
            },
        },
        bins,
        probe_set: "kolm.safety-probes.v1".to_owned(),
        probe_set_sha256: "cd".repeat(32),
        verbatim_words: 8,
        probes: 10,
        refused: 7,
        generated_tokens: 300,
        seconds: 6.0,
        budget_tokens_per_s: 100.0,
        structured: 4,
        valid: 3,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn terms_by_hand() {
    let r = EvalReport::from_measurements(measurements()).unwrap();
    assert!(close(r.perplexity.perplexity, 16f64.powf(1.0 / 3.0)));
    assert_eq!((r.qa.questions, r.qa.correct), (10, 8));
    assert!(close(r.qa.accuracy, 0.8));
    // ECE = 4/10 * |0.5 - 0.75| + 6/10 * |1 - 0.95| = 0.1 + 0.03.
    assert!(close(r.calibration.ece, 0.13));
    assert!(close(r.calibration.calibration, 0.87));
    assert!(close(r.safety.safety, 0.7));
    // 300 tokens / 6 s = 50 tokens/s against a budget of 100.
    assert!(close(r.latency.tokens_per_s, 50.0));
    assert!(close(r.latency.latency, 0.5));
    assert!(close(r.validity.validity, 0.75));
    // K = 0.40*0.8 + 0.15*0.7 + 0.15*0.5 + 0.15*0.87 + 0.15*0.75.
    assert!(close(r.k_score, 0.32 + 0.105 + 0.075 + 0.1305 + 0.1125));
    let metrics = r.metrics();
    assert_eq!(
        metrics.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "accuracy",
            "calibration",
            "k_score",
            "latency",
            "perplexity",
            "safety",
            "validity"
        ]
    );
    assert_eq!(metrics["k_score"], r.k_score);
    assert_eq!(r.qa.seed, "18446744073709551615");
}

#[test]
fn latency_caps_at_one_and_is_zero_without_generation() {
    let mut m = measurements();
    m.seconds = 1.0;
    assert_eq!(
        EvalReport::from_measurements(m).unwrap().latency.latency,
        1.0
    );
    let mut m = measurements();
    m.generated_tokens = 0;
    m.seconds = 0.0;
    let r = EvalReport::from_measurements(m).unwrap();
    assert_eq!((r.latency.tokens_per_s, r.latency.latency), (0.0, 0.0));
}

#[test]
fn round_trip_is_byte_exact() {
    let r = EvalReport::from_measurements(measurements()).unwrap();
    let bytes = r.to_canonical_bytes().unwrap();
    let back = EvalReport::from_canonical_bytes(&bytes).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.to_canonical_bytes().unwrap(), bytes);
    assert!(bytes.starts_with(b"{\"calibration\":{\"bins\":["));
}

#[test]
fn undefined_terms_are_refused_at_the_source() {
    type Edit = fn(&mut Measurements);
    let cases: [(&str, Edit); 7] = [
        ("qa.by_kind", |m| {
            m.by_kind = ByKind::default();
            m.bins = vec![CalibrationBin::default(); CALIBRATION_BINS];
        }),
        ("safety.probes", |m| {
            m.probes = 0;
            m.refused = 0;
        }),
        ("validity.structured", |m| {
            m.structured = 0;
            m.valid = 0;
        }),
        ("perplexity.predicted_tokens", |m| m.predicted_tokens = 0),
        ("latency.seconds", |m| m.seconds = 0.0),
        ("latency.budget_tokens_per_s", |m| {
            m.budget_tokens_per_s = 0.0
        }),
        ("safety.refused", |m| m.refused = 11),
    ];
    for (field, edit) in cases {
        let mut m = measurements();
        edit(&mut m);
        let err = EvalReport::from_measurements(m).unwrap_err();
        let text = err.to_string();
        // Zero questions is named by the first rule that sees it.
        let named =
            text.contains(field) || (field == "qa.by_kind" && text.contains("qa.questions"));
        assert!(named, "{field}: {text}");
    }
}

fn good_value() -> Value {
    let bytes = EvalReport::from_measurements(measurements())
        .unwrap()
        .to_canonical_bytes()
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn read_edited(edit: impl FnOnce(&mut Value)) -> EvalReportError {
    let mut v = good_value();
    edit(&mut v);
    let bytes = jcs::to_canonical_vec(&v).unwrap();
    EvalReport::from_canonical_bytes(&bytes).unwrap_err()
}

#[test]
fn strict_reader_refuses_each_broken_rule() {
    let derived = |e: EvalReportError| match e {
        EvalReportError::Derived { field, .. } => field,
        other => panic!("expected a derived-term refusal, got {other}"),
    };
    let fielded = |e: EvalReportError| match e {
        EvalReportError::Field { field, .. } => field,
        other => panic!("expected a field refusal, got {other}"),
    };
    assert_eq!(
        derived(read_edited(|v| v["qa"]["accuracy"] = json!(0.9))),
        "qa.accuracy"
    );
    assert_eq!(
        derived(read_edited(|v| v["k_score"] = json!(0.99))),
        "k_score"
    );
    assert_eq!(
        derived(read_edited(|v| v["calibration"]["ece"] = json!(0.0))),
        "calibration.ece"
    );
    assert_eq!(
        derived(read_edited(|v| v["perplexity"]["perplexity"] = json!(2.6))),
        "perplexity.perplexity"
    );
    assert_eq!(
        derived(read_edited(|v| v["latency"]["latency"] = json!(1))),
        "latency.latency"
    );
    assert_eq!(
        derived(read_edited(|v| v["safety"]["safety"] = json!(1))),
        "safety.safety"
    );
    assert_eq!(
        derived(read_edited(|v| v["validity"]["validity"] = json!(1))),
        "validity.validity"
    );
    assert_eq!(
        fielded(read_edited(|v| v["qa"]["correct"] = json!(7))),
        "qa.by_kind"
    );
    assert_eq!(
        fielded(read_edited(|v| {
            v["calibration"]["bins"].as_array_mut().unwrap().pop();
        })),
        "calibration.bins"
    );
    assert_eq!(
        fielded(read_edited(
            |v| v["calibration"]["bins"][9]["count"] = json!(7)
        )),
        "calibration.bins"
    );
    assert_eq!(
        fielded(read_edited(
            |v| v["calibration"]["bins"][9]["confidence_sum"] = json!(7)
        )),
        "calibration.bins.confidence_sum"
    );
    assert_eq!(
        fielded(read_edited(
            |v| v["qa"]["by_kind"]["play"]["correct"] = json!(5)
        )),
        "qa.by_kind.play"
    );
    assert_eq!(
        fielded(read_edited(|v| v["qa"]["seed"] = json!("042"))),
        "qa.seed"
    );
    assert_eq!(
        fielded(read_edited(
            |v| v["qa"]["set_sha256"] = json!("AB".repeat(32))
        )),
        "qa.set_sha256"
    );
    assert_eq!(
        fielded(read_edited(|v| v["qa"]["option_scoring"] = json!("sum"))),
        "qa.option_scoring"
    );
    assert_eq!(
        fielded(read_edited(|v| v["safety"]["refused"] = json!(11))),
        "safety.refused"
    );
    assert_eq!(
        fielded(read_edited(
            |v| v["perplexity"]["predicted_tokens"] = json!(9007199254740992u64)
        )),
        "perplexity.predicted_tokens"
    );
    assert!(matches!(
        read_edited(|v| v["schema"] = json!("kolm.eval-report.v2")),
        EvalReportError::Schema(_)
    ));
    assert!(matches!(
        read_edited(|v| v["extra"] = json!(1)),
        EvalReportError::Json(_)
    ));
    assert!(matches!(
        read_edited(|v| {
            v["validity"].as_object_mut().unwrap().remove("valid");
        }),
        EvalReportError::Json(_)
    ));
}

#[test]
fn strict_reader_refuses_other_byte_forms() {
    let bytes = EvalReport::from_measurements(measurements())
        .unwrap()
        .to_canonical_bytes()
        .unwrap();
    let mut trailing = bytes.clone();
    trailing.push(b' ');
    assert!(matches!(
        EvalReport::from_canonical_bytes(&trailing),
        Err(EvalReportError::Jcs(_))
    ));
    let pretty = serde_json::to_vec_pretty(&good_value()).unwrap();
    assert!(matches!(
        EvalReport::from_canonical_bytes(&pretty),
        Err(EvalReportError::Jcs(_))
    ));
    let huge = vec![b' '; MAX_EVAL_REPORT_BYTES + 1];
    assert!(matches!(
        EvalReport::from_canonical_bytes(&huge),
        Err(EvalReportError::TooLarge { .. })
    ));
}

#[test]
fn writer_refuses_an_inconsistent_report() {
    let mut r = EvalReport::from_measurements(measurements()).unwrap();
    r.k_score = 1.0;
    assert!(matches!(
        r.to_canonical_bytes(),
        Err(EvalReportError::Derived {
            field: "k_score",
            ..
        })
    ));
}
