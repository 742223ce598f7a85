//! Input checks shared by the API edge (which answers INVALID_ARGUMENT with
//! the field named) and `apply` (which must not trust the proposer).

use std::collections::BTreeMap;

use crate::limits::*;
use crate::state::SandboxSpec;

/// Why an input was refused: the field (as named in the API) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {problem}")]
pub struct InvalidInput {
    /// API field name, e.g. `name` or `labels`.
    pub field: &'static str,
    /// What is wrong and what is allowed.
    pub problem: String,
}

fn invalid(field: &'static str, problem: impl Into<String>) -> InvalidInput {
    InvalidInput {
        field,
        problem: problem.into(),
    }
}

/// Checks a sandbox or workspace name: a DNS-1123 label (lowercase letters,
/// digits and '-', starting and ending with a letter or digit, 1 to 63 chars).
pub fn name(field: &'static str, value: &str) -> Result<(), InvalidInput> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > NAME_LENGTH_MAX {
        return Err(invalid(
            field,
            format!(
                "{:?} is {} characters; at most {NAME_LENGTH_MAX} are allowed",
                value,
                value.len()
            ),
        ));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        return Err(invalid(
            field,
            format!(
                "{value:?} contains {bad:?}; a name is a DNS-1123 label: lowercase letters, digits and '-'"
            ),
        ));
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err(invalid(
            field,
            format!("{value:?} must start and end with a lowercase letter or digit"),
        ));
    }
    Ok(())
}

fn label_map(
    field: &'static str,
    map: &BTreeMap<String, String>,
    value_length_max: usize,
) -> Result<(), InvalidInput> {
    if map.len() > LABELS_COUNT_MAX {
        return Err(invalid(
            field,
            format!(
                "{} entries; at most {LABELS_COUNT_MAX} are allowed",
                map.len()
            ),
        ));
    }
    for (key, value) in map {
        if key.is_empty() || key.len() > LABEL_KEY_LENGTH_MAX {
            return Err(invalid(
                field,
                format!("key {key:?} must be 1 to {LABEL_KEY_LENGTH_MAX} characters"),
            ));
        }
        let key_char_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
        if !key.chars().all(key_char_ok) {
            return Err(invalid(
                field,
                format!("key {key:?} may contain only letters, digits, '-', '_', '.' and '/'"),
            ));
        }
        if value.len() > value_length_max {
            return Err(invalid(
                field,
                format!("value of {key:?} is longer than {value_length_max} characters"),
            ));
        }
    }
    Ok(())
}

/// Checks labels (also used for label selectors).
pub fn labels(field: &'static str, map: &BTreeMap<String, String>) -> Result<(), InvalidInput> {
    label_map(field, map, LABEL_VALUE_LENGTH_MAX)
}

/// Checks annotations (like labels, with longer values).
pub fn annotations(map: &BTreeMap<String, String>) -> Result<(), InvalidInput> {
    label_map("annotations", map, ANNOTATION_VALUE_LENGTH_MAX)
}

/// Checks a sandbox spec.
pub fn spec(spec: &SandboxSpec) -> Result<(), InvalidInput> {
    if spec.command.len() > COMMAND_ARGS_COUNT_MAX {
        return Err(invalid(
            "spec.command",
            format!(
                "{} arguments; at most {COMMAND_ARGS_COUNT_MAX} are allowed",
                spec.command.len()
            ),
        ));
    }
    if let Some(first) = spec.command.first()
        && first.is_empty()
    {
        return Err(invalid(
            "spec.command",
            "the program (first argument) is empty",
        ));
    }
    if spec
        .command
        .iter()
        .any(|arg| arg.len() > COMMAND_ARG_LENGTH_MAX || arg.contains('\0'))
    {
        return Err(invalid(
            "spec.command",
            format!("an argument is longer than {COMMAND_ARG_LENGTH_MAX} bytes or contains NUL"),
        ));
    }
    if spec.env.len() > ENV_COUNT_MAX {
        return Err(invalid(
            "spec.env",
            format!(
                "{} variables; at most {ENV_COUNT_MAX} are allowed",
                spec.env.len()
            ),
        ));
    }
    for (key, value) in &spec.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(invalid(
                "spec.env",
                format!("variable name {key:?} must be non-empty without '=' or NUL"),
            ));
        }
        if value.len() > ENV_VALUE_LENGTH_MAX || value.contains('\0') {
            return Err(invalid(
                "spec.env",
                format!(
                    "value of {key:?} is longer than {ENV_VALUE_LENGTH_MAX} bytes or contains NUL"
                ),
            ));
        }
    }
    if spec.image.len() > IMAGE_LENGTH_MAX {
        return Err(invalid(
            "spec.image",
            format!("longer than {IMAGE_LENGTH_MAX} characters"),
        ));
    }
    label_map(
        "spec.driver_config",
        &spec.driver_config,
        ANNOTATION_VALUE_LENGTH_MAX,
    )
}

/// Checks a client-chosen request id: 1 to 128 printable ASCII characters.
pub fn request_id(value: &str) -> Result<(), InvalidInput> {
    if value.is_empty() || value.len() > REQUEST_ID_LENGTH_MAX {
        return Err(invalid(
            "request_id",
            format!("must be 1 to {REQUEST_ID_LENGTH_MAX} characters"),
        ));
    }
    if !value.chars().all(|c| c.is_ascii_graphic()) {
        return Err(invalid(
            "request_id",
            "may contain only printable ASCII characters without spaces",
        ));
    }
    Ok(())
}

/// Checks a sandbox policy document.
pub fn policy_document(document: &str) -> Result<(), InvalidInput> {
    if document.len() > POLICY_DOCUMENT_BYTES_MAX {
        return Err(invalid(
            "policy",
            format!(
                "{} bytes; at most {POLICY_DOCUMENT_BYTES_MAX} are allowed",
                document.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a list page size and returns the size to use.
pub fn page_size(requested: u32) -> Result<usize, InvalidInput> {
    match requested as usize {
        0 => Ok(PAGE_SIZE_DEFAULT),
        size if size > PAGE_SIZE_MAX => Err(invalid(
            "page_size",
            format!("{size} is larger than the maximum {PAGE_SIZE_MAX}"),
        )),
        size => Ok(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dns_1123_labels() {
        assert!(name("name", "demo").is_ok());
        assert!(name("name", "a").is_ok());
        assert!(name("name", "web-01").is_ok());
        assert!(name("name", &"a".repeat(63)).is_ok());
        for bad in ["", "Demo", "-a", "a-", "a_b", "a.b", "ä", &"a".repeat(64)] {
            let error = name("name", bad).expect_err(bad);
            assert_eq!(error.field, "name");
        }
    }

    #[test]
    fn page_size_has_a_default_and_a_maximum() {
        assert_eq!(page_size(0), Ok(PAGE_SIZE_DEFAULT));
        assert_eq!(page_size(7), Ok(7));
        assert!(page_size((PAGE_SIZE_MAX + 1) as u32).is_err());
    }
}
