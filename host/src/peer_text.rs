//! Text that comes from the enclave (log lines, error messages, progress
//! phases, names) as the host shows it. The enclave is a peer the host does
//! not trust: raw, its text could move the cursor, clear the screen, retitle
//! the terminal, reorder what follows with bidi overrides, or draw a fake
//! "verdict VERIFIED" line. [`shown`] makes such text inert: every control
//! character, bidi control and other invisible format character is written
//! as a visible `\u{..}` escape, and the length is bounded. Callers prefix
//! it with who said it ([`ENCLAVE_SAYS`]).

/// The label before every line of the enclave's text.
pub const ENCLAVE_SAYS: &str = "enclave says:";

/// The most characters of one peer string shown.
pub const MAX_SHOWN_CHARS: usize = 400;

/// `text` as the host shows it: inert escapes for every character that is
/// not plainly printable, at most [`MAX_SHOWN_CHARS`] characters of it,
/// then how much was left out.
pub fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_SHOWN_CHARS * 2));
    for (count, (i, c)) in text.char_indices().enumerate() {
        if count >= MAX_SHOWN_CHARS {
            let left = text.len().saturating_sub(i);
            out.push_str(&format!("... ({left} more bytes not shown)"));
            break;
        }
        if inert(c) {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    out
}

/// Whether `c` can be shown as itself: printable, and neither a control
/// character nor a character that changes how other text is laid out.
fn inert(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        // C0, DEL, C1 (ESC, CSI, OSC, ...), and every whitespace but the
        // plain space (a newline would start a line that looks like the
        // host's own).
        return false;
    }
    !matches!(u32::from(c),
        // Soft hyphen, Arabic letter mark, Mongolian vowel separator.
        0x00AD | 0x061C | 0x180E
        // Zero-width spaces and joiners, LRM/RLM, the bidi embeddings and
        // overrides (U+202A..U+202E), word joiner and invisible operators,
        // the bidi isolates (U+2066..U+2069), deprecated format characters.
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F
        // Byte order mark, interlinear annotation, variation selectors.
        | 0xFEFF | 0xFFF9..=0xFFFB | 0xFE00..=0xFE0F
        // Tags, supplementary variation selectors, private use.
        | 0xE0000..=0xE0FFF | 0xF0000..=0x10FFFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_and_bidi_overrides_are_shown_as_escapes() {
        let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mverdict VERIFIED\u{1b}[0m\r\n\u{202e}piz.exe\u{9b}2J";
        let s = shown(hostile);
        assert!(!s.chars().any(|c| c.is_control()), "{s:?}");
        assert!(!s.contains('\u{202e}'), "{s:?}");
        assert_eq!(
            s,
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{1b}[31mverdict VERIFIED\\u{1b}[0m\\u{d}\\u{a}\\u{202e}piz.exe\\u{9b}2J"
        );
    }

    #[test]
    fn plain_text_is_unchanged_and_long_text_is_bounded() {
        assert_eq!(
            shown("step 10/100, loss 2.31 — ünïcode ok"),
            "step 10/100, loss 2.31 — ünïcode ok"
        );
        let long = "a".repeat(10_000);
        let s = shown(&long);
        assert!(s.starts_with(&"a".repeat(MAX_SHOWN_CHARS)));
        assert!(s.ends_with("... (9600 more bytes not shown)"), "{s}");
        assert!(s.len() < MAX_SHOWN_CHARS + 40);
    }
}
