//! Label selectors in Kubernetes syntax: parsed once at the API edge, then
//! matched against a sandbox's labels when a list (or a prune) filters.
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery/pkg/labels`): a
//! comma-separated list of requirements, all of which must hold:
//!
//! | requirement | holds when |
//! |---|---|
//! | `key=value`, `key==value` | the label is present with that value |
//! | `key!=value` | the label is absent, or has another value |
//! | `key` | the label is present |
//! | `!key` | the label is absent |
//! | `key in (a,b)` | the label is present with one of the values |
//! | `key notin (a,b)` | the label is absent, or has none of the values |
//!
//! Keys and values follow the label rules of [`crate::validate`]; a
//! selector is bounded by [`SELECTOR_BYTES_MAX`] and
//! [`SELECTOR_REQUIREMENTS_COUNT_MAX`]. Pure: no IO, usable everywhere.

use std::collections::BTreeMap;

use crate::limits::{
    LABEL_KEY_LENGTH_MAX, LABEL_VALUE_LENGTH_MAX, SELECTOR_BYTES_MAX,
    SELECTOR_REQUIREMENTS_COUNT_MAX,
};
use crate::string_map::StringMap;
use crate::validate::{InvalidInput, quoted};

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value`: present with this value.
    Equals(String, String),
    /// `key!=value`: absent, or another value.
    NotEquals(String, String),
    /// `key in (..)`: present with one of the values.
    In(String, Vec<String>),
    /// `key notin (..)`: absent, or none of the values.
    NotIn(String, Vec<String>),
    /// `key`: present.
    Exists(String),
    /// `!key`: absent.
    DoesNotExist(String),
}

/// Labels a selector can be matched against: a sandbox's
/// ([`StringMap`]) or a plain map.
pub trait Labels {
    /// The value of label `key`, if present.
    fn label(&self, key: &str) -> Option<&String>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

impl Labels for StringMap {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &impl Labels) -> bool {
        match self {
            Requirement::Equals(key, value) => labels.label(key) == Some(value),
            Requirement::NotEquals(key, value) => labels.label(key) != Some(value),
            Requirement::In(key, values) => labels.label(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => {
                !labels.label(key).is_some_and(|v| values.contains(v))
            }
            Requirement::Exists(key) => labels.label(key).is_some(),
            Requirement::DoesNotExist(key) => labels.label(key).is_none(),
        }
    }
}

/// A parsed selector: every requirement must hold. The empty selector
/// matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// The requirements, in the order written.
    pub requirements: Vec<Requirement>,
}

impl Selector {
    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &impl Labels) -> bool {
        self.requirements
            .iter()
            .all(|requirement| requirement.matches(labels))
    }

    /// True when it has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Parses a selector; `field` names it in errors (e.g. `label_expression`).
    pub fn parse(field: &'static str, text: &str) -> Result<Selector, InvalidInput> {
        let invalid = |problem: String| InvalidInput { field, problem };
        if text.len() > SELECTOR_BYTES_MAX {
            return Err(invalid(format!(
                "the selector is {} bytes; at most {SELECTOR_BYTES_MAX} are allowed",
                text.len()
            )));
        }
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(invalid)? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(invalid(format!(
                    "empty requirement in {}; write key=value,key!=value,key,!key",
                    quoted(text)
                )));
            }
            if requirements.len() == SELECTOR_REQUIREMENTS_COUNT_MAX {
                return Err(invalid(format!(
                    "more than {SELECTOR_REQUIREMENTS_COUNT_MAX} requirements"
                )));
            }
            requirements.push(parse_requirement(part).map_err(invalid)?);
        }
        Ok(Selector { requirements })
    }
}

/// Splits at commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0_u32;
    let mut start = 0;
    for (at, c) in text.char_indices() {
        match c {
            '(' => {
                if depth > 0 {
                    return Err(format!("nested parentheses in {}", quoted(text)));
                }
                depth += 1;
            }
            ')' => {
                if depth == 0 {
                    return Err(format!("unbalanced ')' in {}", quoted(text)));
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unclosed '(' in {}", quoted(text)));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(Requirement::DoesNotExist(key.to_owned()));
    }
    if let Some((key, value)) = part.split_once("!=") {
        let (key, value) = (key.trim(), value.trim());
        check_key(key)?;
        check_value(value)?;
        return Ok(Requirement::NotEquals(key.to_owned(), value.to_owned()));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        let (key, value) = (key.trim(), value.trim());
        check_key(key)?;
        check_value(value)?;
        return Ok(Requirement::Equals(key.to_owned(), value.to_owned()));
    }
    if let Some(open) = part.find('(') {
        let head = part[..open].trim();
        let Some(values) = part[open + 1..].trim_end().strip_suffix(')') else {
            return Err(format!("{} must end with ')'", quoted(part)));
        };
        let (key, operator) = head
            .rsplit_once(char::is_whitespace)
            .map(|(key, operator)| (key.trim(), operator))
            .ok_or_else(|| format!("{} is not `key in (..)` or `key notin (..)`", quoted(part)))?;
        check_key(key)?;
        let values: Vec<String> = values
            .split(',')
            .map(|value| value.trim().to_owned())
            .collect();
        for value in &values {
            check_value(value)?;
        }
        return match operator {
            "in" => Ok(Requirement::In(key.to_owned(), values)),
            "notin" => Ok(Requirement::NotIn(key.to_owned(), values)),
            other => Err(format!(
                "unknown operator {}; use =, ==, !=, in, notin, or a bare key",
                quoted(other)
            )),
        };
    }
    check_key(part)?;
    Ok(Requirement::Exists(part.to_owned()))
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > LABEL_KEY_LENGTH_MAX {
        return Err(format!(
            "key {} must be 1 to {LABEL_KEY_LENGTH_MAX} characters",
            quoted(key)
        ));
    }
    let key_char_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
    if !key.chars().all(key_char_ok) {
        return Err(format!(
            "key {} may contain only letters, digits, '-', '_', '.' and '/'",
            quoted(key)
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), String> {
    if value.len() > LABEL_VALUE_LENGTH_MAX {
        return Err(format!(
            "value {} is longer than {LABEL_VALUE_LENGTH_MAX} characters",
            quoted(value)
        ));
    }
    let value_char_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !value.chars().all(value_char_ok) {
        return Err(format!(
            "value {} may contain only letters, digits, '-', '_' and '.'",
            quoted(value)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_kubernetes_forms_parse_and_match() {
        let prod_web = labels(&[("env", "prod"), ("tier", "web")]);
        let dev = labels(&[("env", "dev")]);
        let none = labels(&[]);
        let cases: &[(&str, [bool; 3])] = &[
            ("env=prod", [true, false, false]),
            ("env==prod", [true, false, false]),
            ("env!=prod", [false, true, true]),
            ("tier", [true, false, false]),
            ("!tier", [false, true, true]),
            ("env in (prod, dev)", [true, true, false]),
            ("env notin (prod)", [false, true, true]),
            ("env=prod,tier!=db", [true, false, false]),
            ("env,!tier", [false, true, false]),
            ("", [true, true, true]),
        ];
        for (text, expected) in cases {
            let selector = Selector::parse("label_expression", text).expect(text);
            let got = [&prod_web, &dev, &none].map(|labels| selector.matches(labels));
            assert_eq!(got, *expected, "{text}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused_with_the_field() {
        for bad in [
            "env=prod,",
            ",",
            "a b",
            "env in (a",
            "env in a)",
            "env between (a)",
            "=prod",
            "env=pr od",
            "!",
            "env=(x)",
        ] {
            let error = Selector::parse("label_expression", bad).expect_err(bad);
            assert_eq!(error.field, "label_expression");
        }
        let long = "a,".repeat(SELECTOR_REQUIREMENTS_COUNT_MAX) + "a";
        assert!(Selector::parse("label_expression", &long).is_err());
        assert!(Selector::parse("label_expression", &"a".repeat(SELECTOR_BYTES_MAX + 1)).is_err());
    }
}
