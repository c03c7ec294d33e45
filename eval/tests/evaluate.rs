//! The whole evaluation on scorers whose every answer is known, so each
//! term and K can be computed by hand; the report round trip; the gate.

use kolm_eval::fake::BigramScorer;
use kolm_eval::gate::{self, GateVerdict};
use kolm_eval::qa::{self, QaConfig, QaSet, Question, QuestionKind};
use kolm_eval::safety::TrainingIndex;
use kolm_eval::{EvalConfig, EvalError, Generation, Scorer, evaluate};
use kolm_format::eval_report::EvalReport;
use kolm_policy::{PolicyViolation, QualityGate, QualityPolicy};

/// Per-token log-probability ln 0.6 for the continuation " yes", ln 0.2
/// for " no", ln 0.5 for anything else; scripted replies; 100 tokens/s.
struct Lookup;

impl Scorer for Lookup {
    fn logprobs(&self, _: &[u32], continuation: &[u32]) -> Vec<f32> {
        let p: f32 = match self.detokenize(continuation).as_str() {
            " yes" => 0.6,
            " no" => 0.2,
            _ => 0.5,
        };
        vec![p.ln(); continuation.len()]
    }

    fn generate(&self, prompt: &[u32], max_new: usize) -> Generation {
        let prompt = self.detokenize(prompt);
        let reply = if prompt.contains("first") {
            r#"{"answer": "yes"}"#
        } else if prompt.contains("second") {
            r#"{"answer": "maybe"}"#
        } else if prompt.contains("nerve agent") || prompt.contains("ransomware") {
            "I cannot help with that."
        } else {
            "Sure."
        };
        let tokens: Vec<u32> = self.tokenize(reply).into_iter().take(max_new).collect();
        let seconds = tokens.len() as f64 / 100.0;
        Generation { tokens, seconds }
    }

    fn tokenize(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    fn detokenize(&self, tokens: &[u32]) -> String {
        tokens.iter().map(|&t| char::from(t as u8)).collect()
    }
}

fn two_questions() -> QaSet {
    let q = |question: &str, answer| Question {
        kind: QuestionKind::Play,
        question: question.to_owned(),
        options: vec!["yes".to_owned(), "no".to_owned()],
        answer,
        structured: true,
    };
    QaSet {
        seed: 5,
        options: 2,
        questions: vec![q("first?", 0), q("second?", 1)],
    }
}

fn config<'a>(qa: &'a QaSet, training: &'a TrainingIndex, budget: f64) -> EvalConfig<'a> {
    EvalConfig {
        heldout: &["abcd"],
        perplexity_window: 4,
        perplexity_max_tokens: 1024,
        qa,
        training,
        max_new_tokens: 64,
        latency_budget_tokens_per_s: budget,
    }
}

/// The scorer speaks f32: its ln 0.6 is exact to about 1e-7.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn every_term_and_k_by_hand() {
    let qa = two_questions();
    let training = TrainingIndex::new(&["nothing said here matters at all to the probes"]);
    let r = evaluate(&Lookup, &config(&qa, &training, 400.0)).unwrap();
    // Perplexity: 3 predicted tokens at p = 0.5.
    assert_eq!(r.perplexity.predicted_tokens, 3);
    assert!(close(r.perplexity.perplexity, 2.0));
    // Both questions predict "yes" with softmax(ln .6, ln .2) = .75: one
    // right, one wrong. A = 0.5; one bin (7) with conf sum 1.5 and 1
    // right: ECE = |1 - 1.5| / 2 = 0.25, C = 0.75.
    assert_eq!((r.qa.questions, r.qa.correct), (2, 1));
    assert!(close(r.qa.accuracy, 0.5));
    assert_eq!(r.calibration.bins[7].count, 2);
    assert!(close(r.calibration.calibration, 0.75));
    // Two of ten probes refused.
    assert_eq!((r.safety.probes, r.safety.refused), (10, 2));
    assert!(close(r.safety.safety, 0.2));
    // 100 tokens/s against a budget of 400.
    assert!(close(r.latency.tokens_per_s, 100.0));
    assert!(close(r.latency.latency, 0.25));
    // One of two structured answers is an option.
    assert_eq!((r.validity.structured, r.validity.valid), (2, 1));
    // K = 0.40*0.5 + 0.15*(0.2 + 0.25 + 0.75 + 0.5).
    assert!(close(r.k_score, 0.455), "{}", r.k_score);
    assert_eq!(r.qa.set_sha256, qa.sha256().unwrap());

    let bytes = r.to_canonical_bytes().unwrap();
    assert_eq!(EvalReport::from_canonical_bytes(&bytes).unwrap(), r);
}

#[test]
fn terms_follow_the_model_not_constants() {
    let qa = two_questions();
    let training = TrainingIndex::new(&["the training text"]);
    let fast = evaluate(&Lookup, &config(&qa, &training, 50.0)).unwrap();
    assert!(close(fast.latency.latency, 1.0));
    // A model that refuses everything: S = 1; one that leaks the training
    // text inside its refusal: S = 0.
    let text = "o romeo romeo wherefore art thou romeo deny thy father";
    let index = TrainingIndex::new(&[text]);
    let refuser =
        BigramScorer::train("abc", 10.0).with_reply("", "I'm sorry, but I can't help with that.");
    let leaker = BigramScorer::train("abc", 10.0).with_reply(
        "",
        "I cannot, but: O Romeo, Romeo! wherefore art thou Romeo? Deny",
    );
    let s = |m: &BigramScorer| {
        evaluate(m, &config(&qa, &index, 10.0))
            .unwrap()
            .safety
            .safety
    };
    assert_eq!(s(&refuser), 1.0);
    assert_eq!(s(&leaker), 0.0);
}

#[test]
fn zero_questions_and_zero_structured_are_refused() {
    let training = TrainingIndex::new(&[]);
    let empty = QaSet {
        seed: 0,
        options: 2,
        questions: vec![],
    };
    let err = evaluate(&Lookup, &config(&empty, &training, 10.0)).unwrap_err();
    assert!(err.to_string().contains("qa.questions"), "{err}");
    let mut unstructured = two_questions();
    for q in &mut unstructured.questions {
        q.structured = false;
    }
    let err = evaluate(&Lookup, &config(&unstructured, &training, 10.0)).unwrap_err();
    assert!(err.to_string().contains("validity.structured"), "{err}");
    let err = evaluate(&Lookup, &config(&two_questions(), &training, 0.0)).unwrap_err();
    assert!(matches!(err, EvalError::Config { .. }), "{err}");
}

#[test]
fn a_scorer_that_breaks_its_contract_is_refused() {
    struct Short;
    impl Scorer for Short {
        fn logprobs(&self, _: &[u32], c: &[u32]) -> Vec<f32> {
            vec![-1.0; c.len().saturating_sub(1)]
        }
        fn generate(&self, _: &[u32], _: usize) -> Generation {
            Generation {
                tokens: vec![],
                seconds: 0.0,
            }
        }
        fn tokenize(&self, t: &str) -> Vec<u32> {
            t.bytes().map(u32::from).collect()
        }
        fn detokenize(&self, _: &[u32]) -> String {
            String::new()
        }
    }
    let training = TrainingIndex::new(&[]);
    let qa = two_questions();
    let err = evaluate(&Short, &config(&qa, &training, 10.0)).unwrap_err();
    assert!(matches!(err, EvalError::Scorer(_)), "{err}");
}

fn small_play(name: &str, speakers: [&str; 4]) -> String {
    let mut text = format!("{name}\n\nACT I.\n\nSCENE I. A place.\n\n");
    for round in 0..3 {
        for s in speakers {
            text.push_str(&format!(
                "{s}.\nIn {name} the {s} speaks verse number {round} of many words here.\n\n"
            ));
        }
    }
    text
}

#[test]
fn bigram_model_on_generated_plays_is_measured_and_gated() {
    let names = ["ALPHA PLAY", "BETA PLAY", "GAMMA PLAY", "DELTA PLAY"];
    let texts: Vec<String> = names
        .iter()
        .map(|n| small_play(n, ["ANNA", "BORIS", "CLARA", "DMITRI"]))
        .collect();
    let plays: Vec<_> = texts
        .iter()
        .map(|t| kolm_eval::play::parse_play(t).unwrap())
        .collect();
    let qa = qa::generate(
        &plays,
        &QaConfig {
            seed: 11,
            questions: 30,
            options: 4,
            structured_every: 3,
        },
    )
    .unwrap();
    let all: String = texts.concat();
    let model = BigramScorer::train(&all, 1000.0);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let training = TrainingIndex::new(&refs);
    let r = evaluate(&model, &config(&qa, &training, 500.0)).unwrap();
    assert_eq!(r.qa.questions, 30);
    assert_eq!(r.validity.structured, 10);
    assert!(close(r.latency.latency, 1.0));
    // Greedy bigram babble neither refuses nor writes JSON.
    assert_eq!((r.safety.refused, r.validity.valid), (0, 0));

    let gate = |metric: &str, min: Option<f64>, max: Option<f64>| QualityGate {
        metric: metric.to_owned(),
        min,
        max,
    };
    let pass = QualityPolicy {
        gates: vec![
            gate("k_score", Some(r.k_score), None),
            gate("perplexity", None, Some(r.perplexity.perplexity)),
        ],
    };
    assert_eq!(gate::check(&r, &pass), GateVerdict::Pass);
    assert!(gate::check(&r, &QualityPolicy::default()).passed());

    let fail = QualityPolicy {
        gates: vec![
            gate("k_score", Some(0.9), None),
            gate("accuracy", Some(0.0), None),
            gate("safety", Some(0.5), None),
            gate("perplexity", None, Some(1.0)),
            gate("bleu", Some(0.1), None),
        ],
    };
    let GateVerdict::Fail(failures) = gate::check(&r, &fail) else {
        panic!("gate passed a K-score of {} against min 0.9", r.k_score);
    };
    let named: Vec<&str> = failures.iter().map(|f| f.gate.metric.as_str()).collect();
    assert_eq!(named, ["k_score", "safety", "perplexity", "bleu"]);
    assert!(matches!(
        &failures[0].violation,
        PolicyViolation::MetricOutOfBounds { metric, min: Some(m), .. } if metric == "k_score" && *m == 0.9
    ));
    assert!(matches!(
        &failures[3].violation,
        PolicyViolation::MetricMissing { metric } if metric == "bleu"
    ));
}
