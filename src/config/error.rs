//! A config error: the file, the line and the key, and what is wrong.

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub struct ConfigError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ": line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key '{key}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The key on the line holding `offset` (`count` in `count = "x"`), if any.
pub(super) fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_string())
}

// ---------------------------------------------------------------- raw form

/// Where a config's text came from, for errors that point into it.
#[derive(Clone, Copy)]
pub(super) struct Source<'a> {
    pub text: &'a str,
    pub path: &'a Path,
}

impl Source<'_> {
    /// An error at `span` of the text (its line), about `key`.
    pub fn fail(
        &self,
        span: Option<std::ops::Range<usize>>,
        key: &str,
        message: String,
    ) -> ConfigError {
        ConfigError {
            path: self.path.to_path_buf(),
            line: span.map(|s| line_of(self.text, s.start)),
            key: Some(key.to_string()),
            message,
        }
    }
}
