//! The schema of a structured answer, behind the V term.
//!
//! A structured answer is **valid** exactly when the generated text, with
//! leading and trailing white space removed, is one JSON document (nothing
//! after it) that is an object with exactly one member, `"answer"` (no
//! other or duplicate key), whose value is a string equal, byte for byte,
//! to one of the question's options.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    answer: String,
}

/// Whether `text` is a valid structured answer among `options`.
pub fn is_valid_structured_answer(text: &str, options: &[String]) -> bool {
    let text = text.trim();
    // serde's derived struct also accepts the sequence form `["..."]`; the
    // schema is an object, and a JSON document starting with `{` is one.
    // The derived struct refuses a duplicate `answer` (a map into
    // `serde_json::Value` would keep the last one silently).
    text.starts_with('{')
        && serde_json::from_str::<Answer>(text).is_ok_and(|a| options.contains(&a.answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_cases() {
        let options = vec!["Hamlet".to_owned(), "Macbeth".to_owned()];
        let valid = |t: &str| is_valid_structured_answer(t, &options);
        assert!(valid(r#"{"answer": "Hamlet"}"#));
        assert!(valid(" \n{\"answer\":\"Macbeth\"}\n"));
        assert!(!valid(r#"{"answer": "hamlet"}"#), "not an option");
        assert!(!valid(r#"{"answer": "Hamlet", "why": "x"}"#), "extra key");
        assert!(
            !valid(r#"{"answer": "Hamlet", "answer": "Hamlet"}"#),
            "duplicate key"
        );
        assert!(!valid(r#"{"answer": "Hamlet"} and more"#), "trailing text");
        assert!(!valid(r#"{"answer": 1}"#), "not a string");
        assert!(!valid(r#"["Hamlet"]"#));
        assert!(!valid("Hamlet"));
        assert!(!valid(""));
    }
}
