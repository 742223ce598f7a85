//! Input checks shared by the API edge (which answers INVALID_ARGUMENT with
//! the field named) and `apply` (which must not trust the proposer).
//!
//! A refused value is quoted back only through [`quoted`], which keeps at
//! most [`INPUT_ECHO_CHARS_MAX`] characters of it: a message must help find
//! the bad input without carrying it (a 20,000-character name came back
//! whole, twice, and clients refused the 47 KB of trailers).

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

/// `value` quoted for an error message: its first [`INPUT_ECHO_CHARS_MAX`]
/// characters, escaped like `{:?}`, and how long it was when it was cut.
pub fn quoted(value: &str) -> String {
    match value.char_indices().nth(INPUT_ECHO_CHARS_MAX) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &value[..cut], value.len()),
    }
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
                "{} is {} characters; at most {NAME_LENGTH_MAX} are allowed",
                quoted(value),
                value.len()
            ),
        ));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        return Err(invalid(
            field,
            format!(
                "{} contains {bad:?}; a name is a DNS-1123 label: lowercase letters, digits and '-'",
                quoted(value)
            ),
        ));
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err(invalid(
            field,
            format!(
                "{} must start and end with a lowercase letter or digit",
                quoted(value)
            ),
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
                format!(
                    "key {} must be 1 to {LABEL_KEY_LENGTH_MAX} characters",
                    quoted(key)
                ),
            ));
        }
        let key_char_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
        if !key.chars().all(key_char_ok) {
            return Err(invalid(
                field,
                format!(
                    "key {} may contain only letters, digits, '-', '_', '.' and '/'",
                    quoted(key)
                ),
            ));
        }
        if value.len() > value_length_max {
            return Err(invalid(
                field,
                format!(
                    "value of {} is longer than {value_length_max} characters",
                    quoted(key)
                ),
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
        if key.is_empty() || key.len() > ENV_NAME_BYTES_MAX {
            return Err(invalid(
                "spec.env",
                format!(
                    "variable name {} must be 1 to {ENV_NAME_BYTES_MAX} bytes",
                    quoted(key)
                ),
            ));
        }
        if key.contains('=') || key.contains('\0') {
            return Err(invalid(
                "spec.env",
                format!("variable name {} must not contain '=' or NUL", quoted(key)),
            ));
        }
        if value.len() > ENV_VALUE_BYTES_MAX || value.contains('\0') {
            return Err(invalid(
                "spec.env",
                format!(
                    "value of {} is longer than {ENV_VALUE_BYTES_MAX} bytes or contains NUL",
                    quoted(key)
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
    if spec.cpu_millis != 0 && !(CPU_MILLIS_MIN..=CPU_MILLIS_MAX).contains(&spec.cpu_millis) {
        return Err(invalid(
            "spec.cpus",
            format!(
                "must be 0 (no limit) or {} to {} CPUs",
                CPU_MILLIS_MIN as f64 / 1000.0,
                CPU_MILLIS_MAX / 1000
            ),
        ));
    }
    if spec.memory_bytes != 0 && !(MEMORY_BYTES_MIN..=MEMORY_BYTES_MAX).contains(&spec.memory_bytes)
    {
        return Err(invalid(
            "spec.memory_bytes",
            format!("must be 0 (no limit) or {MEMORY_BYTES_MIN} to {MEMORY_BYTES_MAX} bytes"),
        ));
    }
    if !spec.workdir.is_empty()
        && (!spec.workdir.starts_with('/')
            || spec.workdir.len() > WORKDIR_BYTES_MAX
            || spec.workdir.contains('\0'))
    {
        return Err(invalid(
            "spec.workdir",
            format!(
                "{} must be an absolute path of at most {WORKDIR_BYTES_MAX} bytes without NUL",
                quoted(&spec.workdir)
            ),
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

/// Checks a replica address, `HOST:PORT` (an `http://` prefix is accepted
/// and dropped), and returns it as `HOST:PORT`. HOST is a DNS name (labels
/// of letters, digits, '-' and '_', not starting or ending with '-'), an
/// IPv4 address or a bracketed IPv6 address; PORT is 1 to 65535.
pub fn address(field: &'static str, value: &str) -> Result<String, InvalidInput> {
    let address = value.trim();
    let address = address.strip_prefix("http://").unwrap_or(address);
    let refuse = |problem: &str| {
        invalid(
            field,
            format!(
                "{} is not HOST:PORT ({problem}), e.g. 10.0.0.4:7001 or replica-4.internal:7001",
                quoted(value)
            ),
        )
    };
    if address.len() > ADDRESS_BYTES_MAX {
        return Err(refuse(&format!("longer than {ADDRESS_BYTES_MAX} bytes")));
    }
    if address.parse::<std::net::SocketAddr>().is_ok() {
        return port_in_range(address).map_err(refuse);
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(refuse("no port"));
    };
    if host.starts_with('[') || host.contains(':') {
        return Err(refuse("an IPv6 address must be bracketed: [ADDRESS]:PORT"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| refuse("the port is not a number from 1 to 65535"))?;
    if port == 0 {
        return Err(refuse("the port is not a number from 1 to 65535"));
    }
    if host.is_empty() || host.len() > 253 {
        return Err(refuse("the host must be 1 to 253 characters"));
    }
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !host.split('.').all(label_ok) {
        return Err(refuse(
            "the host is not a DNS name: labels of letters, digits, '-' and '_'",
        ));
    }
    Ok(address.to_string())
}

fn port_in_range(address: &str) -> Result<String, &'static str> {
    match address.parse::<std::net::SocketAddr>() {
        Ok(socket) if socket.port() != 0 => Ok(address.to_string()),
        _ => Err("the port is not a number from 1 to 65535"),
    }
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
    fn quoted_input_is_bounded() {
        assert_eq!(quoted("demo"), "\"demo\"");
        let long = "é".repeat(20_000);
        let echo = quoted(&long);
        assert!(echo.len() < 4 * INPUT_ECHO_CHARS_MAX + 32, "{echo}");
        assert!(echo.ends_with("(40000 bytes)"), "{echo}");
        let error = name("name", &"n".repeat(20_000)).unwrap_err();
        assert!(error.to_string().len() < 256, "{error}");
    }

    #[test]
    fn addresses_are_host_and_port() {
        for good in [
            "10.0.0.4:7001",
            "http://10.0.0.4:7001",
            "[::1]:7001",
            "replica-4.internal:7001",
            "localhost:1",
            "palisade_4:65535",
        ] {
            let expected = good.trim_start_matches("http://");
            assert_eq!(address("address", good).as_deref(), Ok(expected), "{good}");
        }
        for bad in [
            "",
            ":",
            "host:",
            ":7001",
            "a:b:c",
            "::1:7001",
            "host:port",
            "host:99999",
            "host:0",
            "10.0.0.4:0",
            "http://host:7001/path",
            "https://host:7001",
            "ho st:7001",
            "-host:7001",
            "host..name:7001",
            "[::1:7001",
            "user@host:7001",
            &format!("{}:7001", "a".repeat(300)),
        ] {
            assert!(address("address", bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn environment_variable_names_are_bounded() {
        let mut spec = SandboxSpec::default();
        spec.env.insert("K".repeat(ENV_NAME_BYTES_MAX), "v".into());
        assert!(super::spec(&spec).is_ok());
        spec.env
            .insert("K".repeat(ENV_NAME_BYTES_MAX + 1), "v".into());
        assert_eq!(super::spec(&spec).unwrap_err().field, "spec.env");
    }

    #[test]
    fn page_size_has_a_default_and_a_maximum() {
        assert_eq!(page_size(0), Ok(PAGE_SIZE_DEFAULT));
        assert_eq!(page_size(7), Ok(7));
        assert!(page_size((PAGE_SIZE_MAX + 1) as u32).is_err());
    }
}
