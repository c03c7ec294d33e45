//! `kolm.model-card.v1` and `kolm.lineage.v1`: the round trips, the strict
//! readers' refusals (each made by editing one field of a good document and
//! re-canonicalising, so the rule under test is what refuses), and the
//! Markdown card's determinism, escaping and exact bytes.

use std::collections::BTreeMap;

use kolm_format::hexbytes::{HexBytes, Sha256Digest};
use kolm_format::jcs;
use kolm_format::model_card::{
    ADAPTER_FILE, BaseModel, BaseSource, DataFile, DataRole, Device, Gate, HOW_FULL, Lineage,
    LineageBase, LineageFile, LoraParams, MAX_LINEAGE_BYTES, MAX_MODEL_CARD_BYTES, MERGED_FILE,
    Method, MethodKind, ModelCard, ModelCardError, Precision, Schedule, Training, escape_markdown,
};
use serde_json::{Value, json};

fn digest(byte: u8) -> Sha256Digest {
    HexBytes([byte; 32])
}

fn card() -> ModelCard {
    let metrics: BTreeMap<String, f64> = [("accuracy", 0.625), ("k_score", 0.5), ("safety", 1.0)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    ModelCard {
        schema: "kolm.model-card.v1".to_owned(),
        name: "shakespeare-lora".to_owned(),
        base_model: BaseModel {
            name: "SmolLM2-135M-Instruct".to_owned(),
            source: BaseSource::File,
            file: Some("SmolLM2-135M-Instruct.Q4_1.gguf".to_owned()),
            sha256: Some(digest(0xb1)),
            licence: "Apache-2.0".to_owned(),
            architecture: "llama: 30 layers, d 576, 9/3 heads of 64, ffn 1536, vocab 49152, \
                           tied embeddings"
                .to_owned(),
        },
        data: vec![
            DataFile {
                path: "heldout.txt".to_owned(),
                size: 1000,
                sha256: digest(0x22),
                role: DataRole::Heldout,
                licence: Some("CC-BY-2.5".to_owned()),
            },
            DataFile {
                path: "train.txt".to_owned(),
                size: 9000,
                sha256: digest(0x11),
                role: DataRole::Train,
                licence: None,
            },
        ],
        method: Method {
            kind: MethodKind::Lora,
            lora: Some(LoraParams {
                rank: 16,
                alpha: 32.0,
                targets: vec!["q".to_owned(), "v".to_owned()],
            }),
            steps: 200,
            batch: 8,
            seq_len: 256,
            lr: 2e-4,
            schedule: Schedule::Cosine,
            warmup_steps: 20,
            weight_decay: 0.0,
            clip_norm: Some(1.0),
            seed: "18446744073709551615".to_owned(),
            device: Device::Gpu,
            precision: Precision::Bf16,
            determinism: "bitwise on the recorded hardware/software tuple".to_owned(),
        },
        metrics,
        k_score: 0.5,
        gate: Gate {
            passed: true,
            gates: vec!["k_score >= 0.4".to_owned()],
        },
        training: Training {
            tokens: 409_600,
            final_loss: 2.25,
            base_perplexity: 30.5,
            tuned_perplexity: 12.125,
        },
        limitations: vec!["Trained on 37 plays; not a general assistant.".to_owned()],
        attribution: vec!["Open Shakespeare, Open Knowledge Foundation, CC BY 2.5".to_owned()],
    }
}

fn lineage(lora: bool) -> Lineage {
    Lineage::new(
        LineageBase {
            sha256: Some(digest(0xb1)),
            description: "SmolLM2-135M-Instruct".to_owned(),
        },
        vec![LineageFile {
            path: "train.txt".to_owned(),
            sha256: digest(0x11),
        }],
        lora.then(|| digest(0xaa)),
        digest(0xcc),
    )
    .unwrap()
}

fn card_value() -> Value {
    serde_json::from_slice(&card().to_canonical_bytes().unwrap()).unwrap()
}

fn read_card_edited(edit: impl FnOnce(&mut Value)) -> ModelCardError {
    let mut v = card_value();
    edit(&mut v);
    let bytes = jcs::to_canonical_vec(&v).unwrap();
    ModelCard::from_canonical_bytes(&bytes).unwrap_err()
}

fn read_lineage_edited(lora: bool, edit: impl FnOnce(&mut Value)) -> ModelCardError {
    let mut v: Value =
        serde_json::from_slice(&lineage(lora).to_canonical_bytes().unwrap()).unwrap();
    edit(&mut v);
    let bytes = jcs::to_canonical_vec(&v).unwrap();
    Lineage::from_canonical_bytes(&bytes).unwrap_err()
}

/// The field a `Field` refusal names.
fn fielded(e: ModelCardError) -> String {
    match e {
        ModelCardError::Field { field, .. } => field,
        other => panic!("expected a field refusal, got {other}"),
    }
}

#[test]
fn card_round_trip_is_byte_exact() {
    let c = card();
    let bytes = c.to_canonical_bytes().unwrap();
    let back = ModelCard::from_canonical_bytes(&bytes).unwrap();
    assert_eq!(back, c);
    assert_eq!(back.to_canonical_bytes().unwrap(), bytes);
    // Absent optional fields are left out, not null.
    let text = String::from_utf8(bytes).unwrap();
    assert!(!text.contains("null"), "{text}");
    assert!(
        text.starts_with(r#"{"attribution":["Open Shakespeare"#),
        "{text}"
    );
}

#[test]
fn full_fine_tune_of_a_random_init_round_trips() {
    let mut c = card();
    c.base_model = BaseModel {
        name: "tiny".to_owned(),
        source: BaseSource::RandomInit,
        file: None,
        sha256: None,
        licence: "none (randomly initialised)".to_owned(),
        architecture: "llama: 2 layers".to_owned(),
    };
    c.method.kind = MethodKind::Full;
    c.method.lora = None;
    c.method.clip_norm = None;
    c.method.device = Device::Cpu;
    c.method.precision = Precision::F32;
    c.attribution.clear();
    let bytes = c.to_canonical_bytes().unwrap();
    assert_eq!(ModelCard::from_canonical_bytes(&bytes).unwrap(), c);
    let md = c.to_markdown();
    assert!(md.contains("| gradient clip norm | none |"), "{md}");
    assert!(md.contains("## Attribution\n\n- none required\n"), "{md}");
}

#[test]
fn lineage_round_trips_for_both_methods() {
    for lora in [true, false] {
        let l = lineage(lora);
        let bytes = l.to_canonical_bytes().unwrap();
        let back = Lineage::from_canonical_bytes(&bytes).unwrap();
        assert_eq!(back, l);
        assert_eq!(back.to_canonical_bytes().unwrap(), bytes);
        assert_eq!(l.adapter.is_some(), lora);
        assert_eq!(l.merged.file, MERGED_FILE);
    }
    let full = lineage(false);
    assert_eq!(full.derivation.len(), 1);
    assert_eq!(full.derivation[0].how, HOW_FULL);
    let text = String::from_utf8(lineage(true).to_canonical_bytes().unwrap()).unwrap();
    assert!(text.contains(ADAPTER_FILE));
    assert!(text.contains(
        r#""derivation":[{"from":"base","how":"LoRA trained on data","to":"adapter"},{"from":"adapter","how":"merged W + alpha/rank B A","to":"merged"}]"#
    ));
}

#[test]
fn lineage_new_sorts_the_training_files() {
    let l = Lineage::new(
        LineageBase {
            sha256: None,
            description: "random init of tiny, seed 7".to_owned(),
        },
        vec![
            LineageFile {
                path: "b.txt".to_owned(),
                sha256: digest(2),
            },
            LineageFile {
                path: "a.txt".to_owned(),
                sha256: digest(1),
            },
        ],
        None,
        digest(3),
    )
    .unwrap();
    let paths: Vec<&str> = l.data.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "b.txt"]);
}

/// One edit of a good document.
type Edit = Box<dyn FnOnce(&mut Value)>;

#[test]
fn card_reader_refuses_each_broken_rule() {
    let cases: Vec<(&str, Edit)> = vec![
        ("name", Box::new(|v| v["name"] = json!("a b"))),
        (
            "base_model.sha256",
            Box::new(|v| {
                v["base_model"].as_object_mut().unwrap().remove("sha256");
            }),
        ),
        (
            "base_model.file",
            Box::new(|v| v["base_model"]["source"] = json!("random-init")),
        ),
        (
            "base_model.file",
            Box::new(|v| v["base_model"]["file"] = json!("../model.gguf")),
        ),
        (
            "base_model.licence",
            Box::new(|v| v["base_model"]["licence"] = json!("")),
        ),
        (
            "base_model.architecture",
            Box::new(|v| v["base_model"]["architecture"] = json!("two\nlines")),
        ),
        ("data", Box::new(|v| v["data"][0]["role"] = json!("train"))),
        (
            "data",
            Box::new(|v| v["data"][1]["role"] = json!("heldout")),
        ),
        (
            "data[1].path",
            Box::new(|v| v["data"][1]["path"] = json!("heldout.txt")),
        ),
        (
            "data[1].path",
            Box::new(|v| v["data"][1]["path"] = json!("a.txt")),
        ),
        (
            "data[0].size",
            Box::new(|v| v["data"][0]["size"] = json!(9007199254740992u64)),
        ),
        (
            "data[0].licence",
            Box::new(|v| v["data"][0]["licence"] = json!("")),
        ),
        (
            "method.lora",
            Box::new(|v| v["method"]["kind"] = json!("full")),
        ),
        (
            "method.lora",
            Box::new(|v| {
                v["method"].as_object_mut().unwrap().remove("lora");
            }),
        ),
        (
            "method.lora.rank",
            Box::new(|v| v["method"]["lora"]["rank"] = json!(0)),
        ),
        (
            "method.lora.alpha",
            Box::new(|v| v["method"]["lora"]["alpha"] = json!(-1)),
        ),
        (
            "method.lora.targets[1]",
            Box::new(|v| v["method"]["lora"]["targets"] = json!(["v", "q"])),
        ),
        (
            "method.lora.targets[1]",
            Box::new(|v| v["method"]["lora"]["targets"] = json!(["q", "q"])),
        ),
        (
            "method.lora.targets[0]",
            Box::new(|v| v["method"]["lora"]["targets"] = json!(["qkv"])),
        ),
        (
            "method.steps",
            Box::new(|v| v["method"]["steps"] = json!(0)),
        ),
        (
            "method.batch",
            Box::new(|v| v["method"]["batch"] = json!(4097)),
        ),
        (
            "method.seq_len",
            Box::new(|v| v["method"]["seq_len"] = json!(4)),
        ),
        ("method.lr", Box::new(|v| v["method"]["lr"] = json!(1))),
        (
            "method.warmup_steps",
            Box::new(|v| v["method"]["warmup_steps"] = json!(200)),
        ),
        (
            "method.weight_decay",
            Box::new(|v| v["method"]["weight_decay"] = json!(-0.5)),
        ),
        (
            "method.clip_norm",
            Box::new(|v| v["method"]["clip_norm"] = json!(0)),
        ),
        (
            "method.seed",
            Box::new(|v| v["method"]["seed"] = json!("042")),
        ),
        (
            "method.seed",
            Box::new(|v| v["method"]["seed"] = json!("18446744073709551616")),
        ),
        (
            "method.precision",
            Box::new(|v| v["method"]["device"] = json!("cpu")),
        ),
        (
            "method.determinism",
            Box::new(|v| v["method"]["determinism"] = json!("")),
        ),
        (
            "metrics.k_score",
            Box::new(|v| v["metrics"]["k_score"] = json!(0.25)),
        ),
        (
            "metrics.k_score",
            Box::new(|v| {
                v["metrics"].as_object_mut().unwrap().remove("k_score");
            }),
        ),
        (
            "metrics.bleu",
            Box::new(|v| v["metrics"]["bleu"] = json!(0.5)),
        ),
        ("k_score", Box::new(|v| v["k_score"] = json!(1.5))),
        (
            "gate.gates",
            Box::new(|v| v["gate"] = json!({"passed": false, "gates": []})),
        ),
        (
            "gate.gates[0]",
            Box::new(|v| v["gate"]["gates"][0] = json!("")),
        ),
        (
            "training.tokens",
            Box::new(|v| v["training"]["tokens"] = json!(9007199254740992u64)),
        ),
        (
            "training.final_loss",
            Box::new(|v| v["training"]["final_loss"] = json!(-1)),
        ),
        (
            "training.tuned_perplexity",
            Box::new(|v| v["training"]["tuned_perplexity"] = json!(0.5)),
        ),
        ("limitations", Box::new(|v| v["limitations"] = json!([]))),
        (
            "attribution[0]",
            Box::new(|v| v["attribution"][0] = json!("tab\there")),
        ),
    ];
    assert!(cases.len() >= 12);
    for (expected, edit) in cases {
        assert_eq!(fielded(read_card_edited(edit)), expected);
    }
}

#[test]
fn card_reader_refuses_wrong_shapes_and_schema() {
    assert!(matches!(
        read_card_edited(|v| v["schema"] = json!("kolm.model-card.v2")),
        ModelCardError::Schema { .. }
    ));
    assert!(matches!(
        read_card_edited(|v| v["extra"] = json!(1)),
        ModelCardError::Json { .. }
    ));
    assert!(matches!(
        read_card_edited(|v| {
            v["training"].as_object_mut().unwrap().remove("tokens");
        }),
        ModelCardError::Json { .. }
    ));
    assert!(matches!(
        read_card_edited(|v| v["method"]["device"] = json!("tpu")),
        ModelCardError::Json { .. }
    ));
    assert!(matches!(
        read_card_edited(|v| v["data"][0]["sha256"] = json!("AB".repeat(32))),
        ModelCardError::Json { .. }
    ));
    // An absent optional field spelled null: canonical JSON, but not what
    // the writer writes.
    assert!(matches!(
        read_card_edited(|v| v["data"][1]["licence"] = Value::Null),
        ModelCardError::NotWriterForm { .. }
    ));
}

#[test]
fn readers_refuse_other_byte_forms() {
    let bytes = card().to_canonical_bytes().unwrap();
    let mut trailing = bytes.clone();
    trailing.push(b' ');
    assert!(matches!(
        ModelCard::from_canonical_bytes(&trailing),
        Err(ModelCardError::Jcs(_))
    ));
    let pretty = serde_json::to_vec_pretty(&card_value()).unwrap();
    assert!(matches!(
        ModelCard::from_canonical_bytes(&pretty),
        Err(ModelCardError::Jcs(_))
    ));
    let huge = vec![b' '; MAX_MODEL_CARD_BYTES + 1];
    assert!(matches!(
        ModelCard::from_canonical_bytes(&huge),
        Err(ModelCardError::TooLarge { .. })
    ));

    let bytes = lineage(true).to_canonical_bytes().unwrap();
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b"{}");
    assert!(matches!(
        Lineage::from_canonical_bytes(&trailing),
        Err(ModelCardError::Jcs(_))
    ));
    let huge = vec![b' '; MAX_LINEAGE_BYTES + 1];
    assert!(matches!(
        Lineage::from_canonical_bytes(&huge),
        Err(ModelCardError::TooLarge { .. })
    ));
}

#[test]
fn lineage_reader_refuses_each_broken_rule() {
    // Edges that do not match the presence of the adapter.
    assert_eq!(
        fielded(read_lineage_edited(true, |v| {
            v.as_object_mut().unwrap().remove("adapter");
        })),
        "derivation"
    );
    assert_eq!(
        fielded(read_lineage_edited(false, |v| {
            v["adapter"] = json!({"file": ADAPTER_FILE, "sha256": "aa".repeat(32)});
        })),
        "derivation"
    );
    assert_eq!(
        fielded(read_lineage_edited(true, |v| v["derivation"][1]["how"] = json!("merged"))),
        "derivation"
    );
    assert_eq!(
        fielded(read_lineage_edited(true, |v| {
            v["derivation"].as_array_mut().unwrap().reverse();
        })),
        "derivation"
    );
    assert_eq!(
        fielded(read_lineage_edited(false, |v| v["derivation"][0]["from"] = json!("data"))),
        "derivation"
    );
    // Node names are the fixed ones.
    assert!(matches!(
        read_lineage_edited(false, |v| v["derivation"][0]["from"] = json!("weights")),
        ModelCardError::Json { .. }
    ));
    assert_eq!(
        fielded(read_lineage_edited(true, |v| v["adapter"]["file"] = json!("lora.bin"))),
        "adapter.file"
    );
    assert_eq!(
        fielded(read_lineage_edited(true, |v| v["merged"]["file"] = json!("weights.bin"))),
        "merged.file"
    );
    assert_eq!(
        fielded(read_lineage_edited(true, |v| v["data"]["files"] = json!([]))),
        "data.files"
    );
    assert_eq!(
        fielded(read_lineage_edited(true, |v| {
            let f = v["data"]["files"][0].clone();
            v["data"]["files"].as_array_mut().unwrap().push(f);
        })),
        "data.files[1].path"
    );
    assert_eq!(
        fielded(read_lineage_edited(true, |v| v["base"]["description"] = json!(""))),
        "base.description"
    );
    assert!(matches!(
        read_lineage_edited(true, |v| v["schema"] = json!("kolm.lineage.v0")),
        ModelCardError::Schema { .. }
    ));
    assert!(matches!(
        read_lineage_edited(true, |v| v["base"]["sha256"] = Value::Null),
        ModelCardError::NotWriterForm { .. }
    ));
}

#[test]
fn card_checks_its_lineage() {
    let c = card();
    c.check_lineage(&lineage(true)).unwrap();
    assert_eq!(
        fielded(c.check_lineage(&lineage(false)).unwrap_err()),
        "lineage.adapter"
    );
    let mut other = lineage(true);
    other.data.files[0].sha256 = digest(0x12);
    assert_eq!(
        fielded(c.check_lineage(&other).unwrap_err()),
        "lineage.data.files"
    );
    let mut other = lineage(true);
    other.base.sha256 = None;
    assert_eq!(
        fielded(c.check_lineage(&other).unwrap_err()),
        "lineage.base.sha256"
    );
}

#[test]
fn writer_refuses_a_broken_card() {
    let mut c = card();
    c.k_score = f64::NAN;
    assert_eq!(fielded(c.to_canonical_bytes().unwrap_err()), "k_score");
    let mut c = card();
    c.data.reverse();
    assert_eq!(fielded(c.to_canonical_bytes().unwrap_err()), "data[1].path");
}

#[test]
fn markdown_is_deterministic() {
    let a = card().to_markdown();
    let b = card().to_markdown();
    assert_eq!(a, b);
    let back = ModelCard::from_canonical_bytes(&card().to_canonical_bytes().unwrap()).unwrap();
    assert_eq!(back.to_markdown(), a);
}

#[test]
fn markdown_escapes_customer_strings() {
    assert_eq!(escape_markdown("a|b](x)"), r"a\|b\](x)");
    assert_eq!(escape_markdown("x\ny\r\tz"), "x y  z");
    assert_eq!(
        escape_markdown(r"\`*_[]<>&#!~"),
        r"\\\`\*\_\[\]\<\>\&\#\!\~"
    );

    let mut c = card();
    c.data[1].path = "a|b](x)".to_owned();
    c.data.swap(0, 1);
    c.data[1].licence = Some("<script>[l](http://x) | y".to_owned());
    let md = c.to_markdown();
    let rows: Vec<&str> = md
        .lines()
        .skip_while(|l| *l != "## Data")
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 4, "{md}");
    // Each row has the header's five cells: 6 unescaped `|`.
    for r in &rows {
        let bars = r
            .char_indices()
            .filter(|(i, ch)| *ch == '|' && (*i == 0 || r.as_bytes()[i - 1] != b'\\'))
            .count();
        assert_eq!(bars, 6, "{r}");
    }
    assert!(rows[2].starts_with(r"| a\|b\](x) | train |"), "{}", rows[2]);
    assert!(
        rows[3].ends_with(r"| \<script\>\[l\](http://x) \| y |"),
        "{}",
        rows[3]
    );
    // No link, image or HTML survives anywhere in the card.
    for needle in ["](", "<"] {
        for (i, _) in md.match_indices(needle) {
            assert_eq!(&md[i - 1..i], "\\", "{needle} at {i}: {md}");
        }
    }
}

#[test]
fn markdown_golden() {
    let expected = "\
# Model card: shakespeare-lora

Schema `kolm.model-card.v1`; the JSON card is the record, this is its rendering.

## Base model

| field | value |
|---|---|
| name | SmolLM2-135M-Instruct |
| source | file |
| file | SmolLM2-135M-Instruct.Q4\\_1.gguf |
| SHA-256 | `b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1` |
| licence | Apache-2.0 |
| architecture | llama: 30 layers, d 576, 9/3 heads of 64, ffn 1536, vocab 49152, tied embeddings |

## Data

| path | role | bytes | SHA-256 | licence |
|---|---|---:|---|---|
| heldout.txt | heldout | 1000 | `2222222222222222222222222222222222222222222222222222222222222222` | CC-BY-2.5 |
| train.txt | train | 9000 | `1111111111111111111111111111111111111111111111111111111111111111` | not stated |

## Method

| field | value |
|---|---|
| kind | lora |
| LoRA rank | 16 |
| LoRA alpha | 32 |
| LoRA targets | q v |
| steps | 200 |
| batch | 8 |
| sequence length | 256 |
| learning rate | 0.0002 |
| schedule | cosine |
| warmup steps | 20 |
| weight decay | 0 |
| gradient clip norm | 1 |
| seed | 18446744073709551615 |
| device | gpu |
| precision | bf16 |
| determinism | bitwise on the recorded hardware/software tuple |

## Metrics

| metric | value |
|---|---:|
| K-score | 0.5000 |
| accuracy | 0.6250 |
| safety | 1.0000 |

Quality gate: **passed**.

- k\\_score \\>= 0.4

## Training

| field | value |
|---|---:|
| tokens trained on | 409600 |
| final training loss | 2.2500 |
| held-out perplexity, base | 30.5000 |
| held-out perplexity, tuned | 12.1250 |

## Limitations

- Trained on 37 plays; not a general assistant.

## Attribution

- Open Shakespeare, Open Knowledge Foundation, CC BY 2.5
";
    assert_eq!(card().to_markdown(), expected);
}

/// The examples of `docs/artifact-files.md` are what the readers accept,
/// and its Markdown excerpt is what the example card renders to.
#[test]
fn doc_examples_are_accepted() {
    let doc = include_str!("../../docs/artifact-files.md");
    let json_lines: Vec<&str> = doc.lines().filter(|l| l.starts_with("{\"")).collect();
    assert_eq!(json_lines.len(), 2);
    let card = ModelCard::from_canonical_bytes(json_lines[0].as_bytes()).unwrap();
    Lineage::from_canonical_bytes(json_lines[1].as_bytes()).unwrap();
    let start = doc.find("```markdown\n").unwrap() + "```markdown\n".len();
    let len = doc[start..].find("```").unwrap();
    let excerpt = &doc[start..start + len];
    assert!(card.to_markdown().starts_with(excerpt), "{excerpt}");
}
