//! The fine-tune job spec: a valid spec reads into its typed form, and
//! every invalid one is refused before any work with the key and its line.

use kolm_format::job_spec::{
    BaseModel, DataFormat, Device, FineTuneSpec, JobSpecError, Length, Method, ModelPreset,
    Precision, Schedule,
};

/// The spec of docs/jobs.md, line for line (tests below replace lines).
const LORA: &str = r#"id = "shakespeare-lora"
kind = "fine-tune"
inputs = ["SmolLM2-135M-Instruct.Q4_1.gguf", "train.txt", "heldout.txt"]

[model]
file = "SmolLM2-135M-Instruct.Q4_1.gguf"
sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

[data]
format = "text"
train = ["train.txt"]

[method]
kind = "lora"
rank = 16
alpha = 32.0
targets = ["v", "q", "k", "o", "gate", "up", "down"]

[train]
steps = 200
batch = 8
seq_len = 256
lr = 2e-4
warmup_steps = 20
schedule = "cosine"
min_lr_ratio = 0.1
weight_decay = 0.0
clip_norm = 1.0
seed = 1234
device = "gpu"
precision = "bf16"
checkpoint_every = 50

[eval]
heldout = ["heldout.txt"]
qa_questions = 200
qa_seed = 7
latency_budget_tokens_per_s = 50.0
max_new_tokens = 16
"#;

fn with(line: usize, replacement: &str) -> String {
    LORA.lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == line { replacement } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

fn refused(src: &str) -> (String, usize, String) {
    match FineTuneSpec::from_toml_str(src) {
        Err(JobSpecError::Invalid { key, line, reason }) => (key, line, reason),
        other => panic!("expected a typed refusal, got {other:?}"),
    }
}

#[test]
fn the_documented_spec_reads_into_its_typed_form() {
    let s = FineTuneSpec::from_toml_str(LORA).unwrap();
    assert_eq!(s.id, "shakespeare-lora");
    let BaseModel::File { input, sha256 } = &s.model else {
        panic!("{:?}", s.model)
    };
    assert_eq!(input, "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(sha256[0], 0xb1);
    assert_eq!(s.data_format, DataFormat::Text);
    assert_eq!(s.train_files, ["train.txt"]);
    assert!(s.pack);
    // Targets in canonical order, whatever order the spec lists them.
    assert_eq!(
        s.method,
        Method::Lora {
            rank: 16,
            alpha: 32.0,
            targets: ["q", "k", "v", "o", "gate", "up", "down"]
                .map(String::from)
                .to_vec(),
        }
    );
    assert_eq!(s.train.length, Length::Steps(200));
    assert_eq!(
        (s.train.batch, s.train.seq_len, s.train.warmup_steps),
        (8, 256, 20)
    );
    assert_eq!(s.train.schedule, Schedule::Cosine);
    assert_eq!(
        (s.train.device, s.train.precision),
        (Device::Gpu, Precision::Bf16)
    );
    assert_eq!(s.train.clip_norm, Some(1.0));
    assert_eq!(s.train.checkpoint_every, Some(50));
    assert_eq!(s.eval.heldout, ["heldout.txt"]);
    assert_eq!(
        (s.eval.qa_questions, s.eval.qa_seed, s.eval.max_new_tokens),
        (200, 7, 16)
    );
}

#[test]
fn a_random_tiny_full_fine_tune_on_the_cpu_reads_with_defaults() {
    let src = LORA
        .replace(
            "file = \"SmolLM2-135M-Instruct.Q4_1.gguf\"\nsha256 = \"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53\"",
            "init = \"random\"\nconfig = \"tiny\"\nseed = 3",
        )
        .replace(
            "kind = \"lora\"\nrank = 16\nalpha = 32.0\ntargets = [\"v\", \"q\", \"k\", \"o\", \"gate\", \"up\", \"down\"]",
            "kind = \"full\"",
        )
        .replace("steps = 200", "epochs = 2")
        .replace("warmup_steps = 20\nschedule = \"cosine\"\nmin_lr_ratio = 0.1\nweight_decay = 0.0\nclip_norm = 1.0\n", "")
        .replace("device = \"gpu\"\nprecision = \"bf16\"", "device = \"cpu\"");
    let s = FineTuneSpec::from_toml_str(&src).unwrap();
    assert_eq!(
        s.model,
        BaseModel::Random {
            config: ModelPreset::Tiny,
            seed: 3
        }
    );
    assert_eq!(s.method, Method::Full);
    assert_eq!(s.train.length, Length::Epochs(2));
    assert_eq!(s.train.warmup_steps, 0);
    assert_eq!(s.train.schedule, Schedule::Cosine);
    assert_eq!(s.train.min_lr_ratio, 0.1);
    assert_eq!(s.train.clip_norm, None);
    assert_eq!(
        (s.train.device, s.train.precision),
        (Device::Cpu, Precision::F32)
    );
}

#[test]
fn each_broken_rule_names_its_key_and_line() {
    let cases: Vec<(String, &str, usize, &str)> = vec![
        (
            with(2, "kind = \"demo\""),
            "kind",
            2,
            "expected \"fine-tune\"",
        ),
        (with(1, "id = \"a/b\""), "id", 1, "must be 1 to 128 bytes"),
        (
            with(3, "inputs = [\"m.gguf\", \"m.gguf\"]"),
            "inputs[1]",
            3,
            "listed twice",
        ),
        (
            with(3, "inputs = [\"../x\"]"),
            "inputs[0]",
            3,
            "plain file name",
        ),
        (
            with(6, "file = \"other.gguf\""),
            "model.file",
            6,
            "not one of `inputs`",
        ),
        (with(7, "sha256 = \"b179\""), "model.sha256", 7, "64 hex"),
        (
            with(10, "format = \"csv\""),
            "data.format",
            10,
            "expected one of",
        ),
        (
            with(11, "train = [\"nope.txt\"]"),
            "data.train[0]",
            11,
            "not one of `inputs`",
        ),
        (with(11, "train = []"), "data.train", 11, "at least one"),
        (
            with(14, "kind = \"qlora\""),
            "method.kind",
            14,
            "\"full\" or \"lora\"",
        ),
        (with(14, "kind = \"full\""), "method", 13, "LoRA settings"),
        (with(15, "rank = 0"), "method.rank", 15, "must be 1 to 256"),
        (with(16, "alpha = -1.0"), "method.alpha", 16, "must be > 0"),
        (
            with(17, "targets = [\"q\", \"lm_head\"]"),
            "method.targets[1]",
            17,
            "expected one of",
        ),
        (
            with(17, "targets = [\"q\", \"q\"]"),
            "method.targets[1]",
            17,
            "listed twice",
        ),
        (
            with(17, "targets = []"),
            "method.targets",
            17,
            "at least one",
        ),
        (
            with(20, "epochs = 2\nsteps = 5"),
            "train",
            19,
            "exactly one of `steps` and `epochs`",
        ),
        (
            with(21, "batch = 0"),
            "train.batch",
            21,
            "must be 1 to 4096",
        ),
        (
            with(22, "seq_len = 100000"),
            "train.seq_len",
            22,
            "must be 8 to 8192",
        ),
        (with(23, "lr = 3.0"), "train.lr", 23, "must be > 0 and < 1"),
        (with(23, "lr = nan"), "train.lr", 23, "must be > 0 and < 1"),
        (
            with(24, "warmup_steps = 200"),
            "train.warmup_steps",
            24,
            "fewer than `train.steps`",
        ),
        (
            with(25, "schedule = \"step\""),
            "train.schedule",
            25,
            "expected one of",
        ),
        (
            with(26, "min_lr_ratio = 2.0"),
            "train.min_lr_ratio",
            26,
            "must be 0 to 1",
        ),
        (
            with(27, "weight_decay = 1.0"),
            "train.weight_decay",
            27,
            "must be >= 0 and < 1",
        ),
        (
            with(28, "clip_norm = 0.0"),
            "train.clip_norm",
            28,
            "must be > 0",
        ),
        (
            with(30, "device = \"tpu\""),
            "train.device",
            30,
            "expected one of",
        ),
        (
            with(30, "device = \"cpu\""),
            "train.precision",
            31,
            "GPU only",
        ),
        (
            with(32, "checkpoint_every = 0"),
            "train.checkpoint_every",
            32,
            "must be 1 to",
        ),
        (
            with(35, "heldout = [\"train.txt\"]"),
            "eval.heldout",
            35,
            "also training data",
        ),
        (
            with(36, "qa_questions = 0"),
            "eval.qa_questions",
            36,
            "must be 1 to 10000",
        ),
        (
            with(38, "latency_budget_tokens_per_s = 0.0"),
            "eval.latency_budget_tokens_per_s",
            38,
            "must be > 0",
        ),
        (
            with(39, "max_new_tokens = 5000"),
            "eval.max_new_tokens",
            39,
            "must be 1 to 4096",
        ),
    ];
    for (src, key, line, reason) in cases {
        let (k, l, r) = refused(&src);
        assert_eq!((k.as_str(), l), (key, line), "{key}: {r}");
        assert!(r.contains(reason), "{key}: {r:?} lacks {reason:?}");
    }
}

#[test]
fn unknown_keys_wrong_types_and_missing_tables_are_toml_errors_with_their_line() {
    for (src, needle) in [
        (with(21, "batchsize = 8"), "batchsize"),
        (with(21, "batch = \"eight\""), "line 21"),
        (LORA.replace("[eval]", "[evaluation]"), "evaluation"),
        (LORA.replace("\n[model]\n", "\n[modle]\n"), "modle"),
    ] {
        match FineTuneSpec::from_toml_str(&src) {
            Err(JobSpecError::Toml { message }) => {
                assert!(message.contains(needle), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_model_is_a_file_or_a_random_init_never_both_or_neither() {
    let both = with(
        7,
        "sha256 = \"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53\"\ninit = \"random\"",
    );
    assert_eq!(refused(&both).0, "model");
    let neither = LORA.replace(
        "file = \"SmolLM2-135M-Instruct.Q4_1.gguf\"\nsha256 = \"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53\"",
        "seed = 1",
    );
    assert_eq!(refused(&neither).0, "model");
    let no_sha = with(7, "");
    assert_eq!(refused(&no_sha).0, "model.sha256");
}

/// One reader for every kind: the kind picks the strict reader, what the
/// runtime does not run is refused naming the kind, and the demo's
/// defaults are the reader's.
#[test]
fn every_kind_is_read_by_one_reader() {
    use kolm_format::job_spec::{DEFAULT_EVAL_EVERY, JobSpec};
    let demo =
        JobSpec::from_toml_str("id = \"d\"\nkind = \"demo\"\ninputs = [\"c.txt\"]\n").unwrap();
    let JobSpec::Demo(d) = &demo else {
        panic!("{demo:?}")
    };
    assert_eq!(
        (d.eval_every, demo.kind(), demo.id()),
        (DEFAULT_EVAL_EVERY, "demo", "d")
    );
    assert_eq!(demo.inputs(), ["c.txt"]);
    let selftest = JobSpec::from_toml_str(
        "id = \"s\"\nkind = \"egress-selftest\"\ninputs = []\nlinger_seconds = 3\n",
    )
    .unwrap();
    assert!(matches!(&selftest, JobSpec::EgressSelftest(s) if s.linger_seconds == 3));
    assert!(matches!(
        JobSpec::from_toml_str(LORA).unwrap(),
        JobSpec::FineTune(_)
    ));
    let refused = |src: &str| JobSpec::from_toml_str(src).unwrap_err().to_string();
    assert!(refused("id = \"t\"\nkind = \"train\"\ninputs = []\n").contains("not supported"));
    assert!(
        refused("id = \"t\"\nkind = \"demo\"\ninputs = []\nlinger_seconds = 1\n")
            .contains("egress-selftest jobs only")
    );
    assert!(refused("id = \"t\"\nkind = \"demo\"\ninputs = []\nextra = 1\n").contains("extra"));
    assert!(refused("id = \"t\"\ninputs = []\n").contains("kind"));
}
