//! How `kolm-host run` shows what happens: JSON lines on stdout with
//! `--json`, a progress bar on a terminal, text lines on stderr otherwise.
//! Every string that comes from the enclave is shown through
//! [`kolm_host::peer_text`]: escaped, bounded and labelled as the
//! enclave's, so only the host's own lines can say what the host concluded.

use kolm_host::session::Event;

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
                if !self.bar(&phase, done, total) {
                    say(
                        json,
                        serde_json::json!({"event": "progress", "phase": phase,
                            "done": done, "total": total}),
                        &format!("{phase}: {done}/{total}"),
                    );
                }
            }
            Event::Log { line } => self.line(
                serde_json::json!({"event": "log", "line": line}),
                &format!("enclave: {line}"),
            ),
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

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
