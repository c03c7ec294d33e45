//! How `kolm-host run` shows what happens: JSON lines on stdout with
//! `--json`, a progress bar on a terminal, text lines on stderr otherwise.
//! Every string that comes from the enclave is shown through
//! [`kolm_host::peer_text`]: escaped, bounded and labelled as the
//! enclave's, so only the host's own lines can say what the host concluded.

use std::time::{Duration, Instant};

use kolm_host::peer_text::{ENCLAVE_SAYS, shown};
use kolm_host::session::Event;

/// Without a bar, at most one text line of progress per phase this often
/// (besides its first and its last): a peer that sends progress without
/// end cannot flood the terminal.
const PROGRESS_LINE_EVERY: Duration = Duration::from_secs(1);

/// Prints one event: a JSON line on stdout, or text on stderr.
pub(crate) fn say(json: bool, value: serde_json::Value, text: &str) {
    if json {
        println!("{value}");
    } else {
        eprintln!("kolm-host: {text}");
    }
}

/// How a run's progress is shown: JSON lines with `--json`; a progress bar
/// (phase, bytes or steps, ETA) when stderr is a terminal; text lines
/// otherwise.
pub(crate) struct Display {
    json: bool,
    bar: Option<indicatif::ProgressBar>,
    phase: String,
    /// The phase and time of the last progress text line.
    last_line: Option<(String, Instant)>,
}

impl Display {
    pub(crate) fn new(json: bool) -> Display {
        use std::io::IsTerminal;
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg:>18} [{bar:30}] {pos}/{len} {elapsed_precise} ETA {eta}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Display {
            json,
            bar,
            phase: String::new(),
            last_line: None,
        }
    }

    /// A line above the bar, or on its own.
    fn line(&self, value: serde_json::Value, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("kolm-host: {text}")),
            None => say(self.json, value, text),
        }
    }

    /// Moves the bar to `phase` at `done` of `total`; false without a bar.
    fn bar(&mut self, phase: &str, done: u64, total: u64) -> bool {
        let Some(bar) = &self.bar else { return false };
        if self.phase != phase {
            self.phase = phase.to_string();
            bar.reset();
            bar.set_message(phase.to_string());
        }
        bar.set_length(total);
        bar.set_position(done);
        true
    }

    pub(crate) fn event(&mut self, e: Event) {
        let json = self.json;
        match e {
            Event::Hello {
                platform,
                identity_key,
                identity,
            } => self.line(
                serde_json::json!({"event": "hello", "platform": platform,
                    "identity_key": hex::encode(identity_key), "identity": identity}),
                &format!(
                    "enclave up: platform {platform}, identity key {}: {identity}",
                    hex::encode(identity_key)
                ),
            ),
            Event::Sent { done, total } => {
                if !self.bar("sending inputs", done, total) && done == total {
                    say(
                        json,
                        serde_json::json!({"event": "inputs-sent", "bytes": total}),
                        &format!("inputs sent: {total} bytes"),
                    );
                }
            }
            Event::Progress { phase, done, total } => {
                // The phase is the enclave's word: inert and labelled.
                let phase = shown(&phase);
                let label = format!("{ENCLAVE_SAYS} {phase}");
                if !self.bar(&label, done, total) && self.progress_line_due(&phase, done, total) {
                    say(
                        json,
                        serde_json::json!({"event": "progress", "phase": phase,
                            "done": done, "total": total}),
                        &format!("{label}: {done}/{total}"),
                    );
                }
            }
            Event::Train {
                step,
                steps,
                loss_micros,
                tokens_per_s,
                eta_s,
            } => {
                // Numbers only: nothing of the enclave's text.
                let loss = loss_micros as f64 / 1e6;
                let eta = clock(eta_s);
                let text = format!(
                    "{ENCLAVE_SAYS} train step {step}/{steps} loss {loss:.4} {tokens_per_s} tok/s ETA {eta}"
                );
                if self.bar("train", step, steps) {
                    if let Some(bar) = &self.bar {
                        bar.set_message(format!("train loss {loss:.3} {tokens_per_s} tok/s"));
                    }
                } else if self.progress_line_due("train", step, steps) {
                    say(
                        json,
                        serde_json::json!({"event": "train", "step": step, "steps": steps,
                            "loss": loss, "tokens_per_s": tokens_per_s, "eta_s": eta_s}),
                        &text,
                    );
                }
            }
            Event::Log { line } => {
                let line = shown(&line);
                self.line(
                    serde_json::json!({"event": "log", "line": line}),
                    &format!("{ENCLAVE_SAYS} {line}"),
                );
            }
            Event::Received { done, total } => {
                if !self.bar("receiving artifact", done, total) && done == total {
                    say(
                        json,
                        serde_json::json!({"event": "artifact-received", "bytes": total}),
                        &format!("artifact received: {total} bytes"),
                    );
                }
            }
        }
    }

    /// Whether a progress text line is due: a new phase, its end, or
    /// [`PROGRESS_LINE_EVERY`] since the last line.
    fn progress_line_due(&mut self, phase: &str, done: u64, total: u64) -> bool {
        let now = Instant::now();
        let due = match &self.last_line {
            Some((p, at)) => {
                p != phase || done == total || now.duration_since(*at) >= PROGRESS_LINE_EVERY
            }
            None => true,
        };
        if due {
            self.last_line = Some((phase.to_owned(), now));
        }
        due
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Seconds as h:mm:ss.
fn clock(s: u64) -> String {
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// One quality gate of the job's policy, judged on the sealed metrics.
fn gate_json(gate: &kolm_policy::QualityGate, value: Option<f64>) -> (serde_json::Value, String) {
    let pass = value.is_some_and(|v| {
        v.is_finite() && gate.min.is_none_or(|m| v >= m) && gate.max.is_none_or(|m| v <= m)
    });
    let bound = match (gate.min, gate.max) {
        (Some(lo), Some(hi)) => format!("in [{lo}, {hi}]"),
        (Some(lo), None) => format!(">= {lo}"),
        (None, Some(hi)) => format!("<= {hi}"),
        (None, None) => "any".to_owned(),
    };
    let shown = value.map_or_else(|| "missing".to_owned(), |v| format!("{v:.4}"));
    (
        serde_json::json!({"metric": gate.metric, "min": gate.min, "max": gate.max,
            "value": value, "pass": pass}),
        format!(
            "  gate {} {bound}: {shown} {}",
            gate.metric,
            if pass { "PASS" } else { "FAIL" }
        ),
    )
}

/// What the run produced, from the verified manifest's metrics (signed by
/// the enclave, checked by the verifier) and the job's policy gates: the
/// held-out perplexity (and the base model's), the K-score, each quality
/// gate and its verdict, the training throughput. One `summary` JSON line
/// with `--json`. `verified` is false for an artifact the host rejected:
/// its figures are then said to be unverified.
pub(crate) fn summary(
    json: bool,
    manifest: &kolm_format::manifest::Manifest,
    policy: Option<&kolm_policy::Policy>,
    verified: bool,
) {
    let m = &manifest.metrics;
    // A fine-tune writes `perplexity`; the bigram demo `eval_perplexity`.
    let perplexity = m.get("perplexity").or_else(|| m.get("eval_perplexity"));
    let base = m.get("base_perplexity");
    let k_score = m.get("k_score");
    let tokens_per_s = m.get("train_tokens_per_s");
    let gates: Vec<_> = policy
        .map(|p| p.quality.gates.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|g| gate_json(g, m.get(&g.metric).copied()))
        .collect();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "event": "summary",
                "verified": verified,
                "job": manifest.job.id,
                "perplexity": perplexity,
                "base_perplexity": base,
                "k_score": k_score,
                "tokens_per_s": tokens_per_s,
                "gates": gates.iter().map(|(j, _)| j.clone()).collect::<Vec<_>>(),
                "metrics": m,
            })
        );
        return;
    }
    let mut parts = Vec::new();
    if let Some(p) = perplexity {
        parts.push(match base {
            Some(b) => format!("held-out perplexity {p:.2} (base model {b:.2})"),
            None => format!("held-out perplexity {p:.2}"),
        });
    }
    if let Some(k) = k_score {
        parts.push(format!("K-score {k:.4}"));
    }
    if let Some(t) = tokens_per_s {
        parts.push(format!("{t:.0} training tokens/s"));
    }
    if parts.is_empty() && gates.is_empty() {
        return;
    }
    let caveat = if verified {
        ""
    } else {
        " (from a REJECTED artifact: NOT verified)"
    };
    eprintln!("kolm-host: result{caveat}: {}", parts.join(", "));
    for (_, line) in &gates {
        eprintln!("kolm-host: {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_are_rate_limited_but_each_phase_starts_and_ends() {
        let mut d = Display::new(true);
        assert!(d.progress_line_due("job", 0, 10));
        assert!(!d.progress_line_due("job", 1, 10));
        assert!(!d.progress_line_due("job", 2, 10));
        assert!(d.progress_line_due("job", 10, 10));
        assert!(d.progress_line_due("train", 1, 10));
        assert!(!d.progress_line_due("train", 2, 10));
    }

    #[test]
    fn a_gate_is_judged_on_its_inclusive_bounds() {
        let g = |min, max| kolm_policy::QualityGate {
            metric: "k_score".into(),
            min,
            max,
        };
        assert_eq!(gate_json(&g(Some(0.05), None), Some(0.05)).0["pass"], true);
        assert_eq!(gate_json(&g(Some(0.05), None), Some(0.04)).0["pass"], false);
        assert_eq!(gate_json(&g(None, Some(40.0)), Some(27.0)).0["pass"], true);
        assert_eq!(gate_json(&g(None, Some(40.0)), None).0["pass"], false);
        assert_eq!(
            gate_json(&g(None, Some(40.0)), Some(f64::NAN)).0["pass"],
            false
        );
        assert!(
            gate_json(&g(None, Some(40.0)), Some(27.0))
                .1
                .contains("<= 40: 27.0000 PASS")
        );
    }
}
