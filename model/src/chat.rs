//! The chat template from `tokenizer.chat_template`.
//!
//! The template is Jinja; this crate has no Jinja engine. It keeps the
//! template as data (the artifact carries it) and renders the one template
//! it recognises byte for byte, SmolLM2-Instruct's ChatML, whose logic is
//! small enough to write out. Any other template is refused, never guessed.

use crate::error::ModelError;

/// SmolLM2-135M-Instruct's template, as stored in its GGUF.
pub(crate) const SMOLLM2_CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The system turn the template inserts when the conversation has none.
const SMOLLM2_DEFAULT_SYSTEM: &str =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The turn's text.
    pub content: String,
}

/// A chat template (Jinja source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    source: String,
}

impl ChatTemplate {
    pub(crate) fn new(source: String) -> Self {
        Self { source }
    }

    /// The Jinja source, as stored in the file.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The conversation as the model expects it; with
    /// `add_generation_prompt`, ends with the opening of an assistant turn.
    /// Only SmolLM2-Instruct's ChatML template is rendered.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        if self.source != SMOLLM2_CHATML {
            return Err(ModelError::UnsupportedChatTemplate {
                reason: format!(
                    "only SmolLM2-Instruct's ChatML template is rendered; this one is {} bytes of other Jinja",
                    self.source.len()
                ),
            });
        }
        let mut out = String::new();
        let turn = |out: &mut String, role: &str, content: &str| {
            out.push_str("<|im_start|>");
            out.push_str(role);
            out.push('\n');
            out.push_str(content);
            out.push_str("<|im_end|>\n");
        };
        if messages.first().is_some_and(|m| m.role != "system") {
            turn(&mut out, "system", SMOLLM2_DEFAULT_SYSTEM);
        }
        for m in messages {
            turn(&mut out, &m.role, &m.content);
        }
        if add_generation_prompt {
            out.push_str("<|im_start|>assistant\n");
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }

    #[test]
    fn renders_chatml_with_the_default_system_turn() {
        let t = ChatTemplate::new(SMOLLM2_CHATML.to_owned());
        let out = t.render(&[msg("user", "Who is Hamlet?")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nWho is Hamlet?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn keeps_a_given_system_turn_and_omits_the_prompt() {
        let t = ChatTemplate::new(SMOLLM2_CHATML.to_owned());
        let out = t
            .render(&[msg("system", "Be brief."), msg("user", "Hi")], false)
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
        // An empty conversation gets no default system turn (loop.first never runs).
        assert_eq!(t.render(&[], false).unwrap(), "");
    }

    #[test]
    fn refuses_other_templates() {
        let t = ChatTemplate::new(SMOLLM2_CHATML.replace("SmolLM", "Other"));
        assert!(matches!(
            t.render(&[msg("user", "x")], true),
            Err(ModelError::UnsupportedChatTemplate { .. })
        ));
    }
}
